package floor

import (
	"bufio"
	"io"
	"net"
	"path/filepath"
	"strings"
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
