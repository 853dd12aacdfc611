package floor

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestFloorFansOutAndAnswersInOrder drives the floor over three real
// masters with one pipelined write: a SET NX goes to every master and is
// granted by majority, the same SET NX again is refused, and the answers
// come back in command order with PING and an unserved command between
// them.
func TestFloorFansOutAndAnswersInOrder(t *testing.T) {
	masters, err := redisproc.StartN(filepath.Join(t.TempDir(), "m"), 3)
	if err != nil {
		t.Fatalf("starting 3 redis-server masters: %v", err)
	}
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr)
		defer m.Stop()
	}
	s, err := Start("127.0.0.1:0", addrs, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := net.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	set := "*6\r\n$3\r\nSET\r\n$4\r\nlk:a\r\n$2\r\nt1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n"
	in := set + "*1\r\n$4\r\nPING\r\n" + set + "*2\r\n$3\r\nGET\r\n$4\r\nlk:a\r\n"
	// Split mid-command: a command completed by a later read is served.
	if _, err := io.WriteString(conn, in[:20]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := io.WriteString(conn, in[20:]); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	var got []string
	for range 4 {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, strings.TrimRight(line, "\r\n"))
	}
	want := []string{"+OK", "+PONG", "$-1", "-ERR the floor proxy serves SET and PING only (a measuring stick, not lockproxy)"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("replies %q, want %q", got, want)
	}
	for _, m := range masters {
		c, err := net.Dial("tcp", m.Addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "*2\r\n$3\r\nGET\r\n$4\r\nlk:a\r\n")
		c.SetDeadline(time.Now().Add(2 * time.Second))
		r := bufio.NewReader(c)
		r.ReadString('\n')
		v, _ := r.ReadString('\n')
		c.Close()
		if strings.TrimSpace(v) != "t1" {
			t.Errorf("master %s holds %q, want t1 on every master", m.Addr, v)
		}
	}
}

// TestFrame: a complete command's length, 0 for every strict prefix of
// one (the floor waits for more), -1 for what is not a RESP array.
func TestFrame(t *testing.T) {
	cmd := "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n"
	if n := frame([]byte(cmd + "*1\r\n")); n != len(cmd) {
		t.Errorf("frame = %d, want %d", n, len(cmd))
	}
	for i := range len(cmd) {
		if n := frame([]byte(cmd[:i])); n != 0 {
			t.Errorf("frame(%q) = %d, want 0 (incomplete)", cmd[:i], n)
		}
	}
	for _, bad := range []string{"PING\r\n", "*1\r\n+x\r\n"} {
		if n := frame([]byte(bad)); n != -1 {
			t.Errorf("frame(%q) = %d, want -1", bad, n)
		}
	}
}

// floorFor starts a floor over masters, logging into a buffer.
func floorFor(t *testing.T, masters []*redisproc.Server) (*Server, *syncBuffer) {
	t.Helper()
	var addrs []string
	for _, m := range masters {
		addrs = append(addrs, m.Addr)
	}
	logs := &syncBuffer{}
	s, err := Start("127.0.0.1:0", addrs, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s, logs
}

// syncBuffer is a bytes.Buffer the loop's goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// roundTrip writes cmds in one write and reads one line per command.
func roundTrip(t *testing.T, addr string, cmds ...string) []string {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, strings.Join(cmds, "")); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	var got []string
	for range cmds {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got = append(got, strings.TrimRight(line, "\r\n"))
	}
	return got
}

func setNX(key, token string) string {
	return fmt.Sprintf("*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n", len(key), key, len(token), token)
}

// TestFloorAnswersByMajority: a key already held on one master of three
// is still granted (two say OK), one held on two is refused (two say
// nil); the answer follows the vote, not the first or the last reply.
func TestFloorAnswersByMajority(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	s, _ := floorFor(t, masters)
	if _, err := masters[0].Do("SET", "lk:one", "other"); err != nil {
		t.Fatal(err)
	}
	for _, m := range masters[1:] {
		if _, err := m.Do("SET", "lk:two", "other"); err != nil {
			t.Fatal(err)
		}
	}
	got := roundTrip(t, s.Addr(), setNX("lk:one", "t"), setNX("lk:two", "t"))
	if want := []string{"+OK", "$-1"}; !slices.Equal(got, want) {
		t.Fatalf("held on one master, then on two: %q, want %q", got, want)
	}
}

// TestFloorSurvivesMasterDeath: a master that dies votes no from then on,
// once logged: with one of three dead a SET NX is still granted, with two
// dead it is refused, and the loop neither stalls the client nor spins on
// the dead connection.
func TestFloorSurvivesMasterDeath(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	s, logs := floorFor(t, masters)
	if got := roundTrip(t, s.Addr(), setNX("lk:a", "t")); got[0] != "+OK" {
		t.Fatalf("all masters up: %q", got)
	}
	if err := masters[0].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the hang-up reaches the loop first, or the write finds it
	if got := roundTrip(t, s.Addr(), setNX("lk:b", "t"), setNX("lk:c", "t")); !slices.Equal(got, []string{"+OK", "+OK"}) {
		t.Fatalf("one of three dead: %q, want two grants", got)
	}
	if err := masters[1].Kill(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if got := roundTrip(t, s.Addr(), setNX("lk:d", "t")); got[0] != "$-1" {
		t.Fatalf("two of three dead: %q, want a refusal", got)
	}
	time.Sleep(100 * time.Millisecond) // a spinning loop would log on
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 2 || strings.Count(out, "floor: master failed") != 2 {
		t.Fatalf("want one log line per dead master, got %d lines:\n%.2000s", n, out)
	}
	for _, m := range masters[:2] {
		if !strings.Contains(out, m.Addr) {
			t.Errorf("no log line names dead master %s:\n%s", m.Addr, out)
		}
	}
}

// TestFloorClientsCloseMidFlight: clients that close with commands in
// flight do not disturb the others: each surviving client gets every
// answer, in order, and the floor serves on afterwards.
func TestFloorClientsCloseMidFlight(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	s, _ := floorFor(t, masters)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", s.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close()
			var cmds strings.Builder
			for j := range 200 {
				// Even keys are new (granted), odd ones repeat the
				// previous key (refused): the order is visible.
				cmds.WriteString(setNX(fmt.Sprintf("lk:%d:%d", i, j/2*2), "t"))
			}
			if _, err := io.WriteString(conn, cmds.String()); err != nil {
				errs <- err
				return
			}
			if i%2 == 1 {
				return // closes with its commands in flight
			}
			conn.SetDeadline(time.Now().Add(10 * time.Second))
			rd := bufio.NewReader(conn)
			for j := range 200 {
				line, err := rd.ReadString('\n')
				if err != nil {
					errs <- fmt.Errorf("client %d, reply %d: %v", i, j, err)
					return
				}
				want := "+OK\r\n"
				if j%2 == 1 {
					want = "$-1\r\n"
				}
				if line != want {
					errs <- fmt.Errorf("client %d, reply %d: %q, want %q", i, j, line, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := roundTrip(t, s.Addr(), "*1\r\n$4\r\nPING\r\n", setNX("lk:after", "t")); !slices.Equal(got, []string{"+PONG", "+OK"}) {
		t.Fatalf("after the closes: %q", got)
	}
}
