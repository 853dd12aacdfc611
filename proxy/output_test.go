package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// The replies of one client pipeline used to have no bound: 64 KB of
// "CLIENT GETNAME" after a 256 KiB CLIENT SETNAME (names are now at most
// 4096 bytes, which still asks for 16 MiB) took the proxy from
// 15 MB to 5.16 GB and held every other client for 12 s, and GETs of a
// 1 MiB value that the client never read took 2.46 GB (plain Redis: 394
// MB). These tests run the proxy in this process and read its Go heap.

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// heapAfter is the largest heap in use (after a collection) over a few
// samples taken while a client that does not read sits on its replies:
// the proxy must have stopped rendering them, not just paused.
func heapAfter() uint64 {
	var most uint64
	tick := time.NewTicker(30 * time.Millisecond)
	defer tick.Stop()
	for i := 0; i < 8; i++ {
		<-tick.C
		most = max(most, heapInUse())
	}
	return most
}

// TestOutputBoundedWhenNotRead: a client that sends a pipeline asking for
// far more reply bytes than it reads makes the proxy hold about
// outputPauseAt (1 MiB) of them, plus at most 16 values in flight, and
// other clients are served meanwhile.
func TestOutputBoundedWhenNotRead(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 1)
		other := c.client()
		ctx := context.Background()
		const mib = 1 << 20
		// The reviewer's case 2a (a 256 KiB name then), with the longest
		// name Redis's clients may set through lockproxy (4096 bytes):
		// 64 KiB of GETNAME ask for 16 MiB of replies.
		t.Run("GETNAME", func(t *testing.T) {
			conn := c.dialSmallWindow()
			defer conn.Close()
			name := strings.Repeat("n", 4096)
			if out, _ := exchangeUntil(t, conn, encode("CLIENT", "SETNAME", name), "+OK\r\n"); out != "+OK\r\n" {
				t.Fatalf("CLIENT SETNAME: %q", out)
			}
			base := heapInUse()
			start := time.Now()
			// A long command first, in the same write, makes the proxy read
			// the whole 64 KiB behind it at once (as the 256 KiB SETNAME
			// did in the review): one pipeline asks for all 16 MiB.
			in := encode("ECHO", strings.Repeat("e", 256<<10)) + strings.Repeat("CLIENT GETNAME\r\n", 4096)
			if _, err := conn.Write([]byte(in)); err != nil {
				t.Fatal(err)
			}
			firstByte(t, conn)
			if err := other.Set(ctx, "probe", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "ERR") {
				t.Fatalf("another client's SET: %v", err)
			}
			t.Logf("first reply byte and another client's command answered %v after the pipeline was sent", time.Since(start))
			held := int64(heapAfter()) - int64(base)
			t.Logf("heap held for a client that does not read 16.25 MiB of replies: %.1f MiB", float64(held)/mib)
			// 1 MiB of output, the 256 KiB command and its reply, and on
			// TLS the writer's record in flight: 0.5–4 MiB measured, once
			// 6.4 in a loaded -race run (the process heap also holds what
			// earlier tests left). Unbounded, it is all 16.25 MiB.
			if held > 8*mib {
				t.Fatalf("the proxy holds %.1f MiB of replies for a client that does not read them; want at most 8 MiB, half of what it asked for", float64(held)/mib)
			}
		})
		// Case 2c: GETs of a 1 MiB value, never read.
		t.Run("GET", func(t *testing.T) {
			val := strings.Repeat("v", mib)
			if ok, err := other.SetNX(ctx, "bigval", val, time.Minute).Result(); err != nil || !ok {
				t.Fatalf("SET bigval NX: %v %v", ok, err)
			}
			conn := c.dial()
			defer conn.Close()
			base := heapInUse()
			if _, err := conn.Write([]byte(strings.Repeat("GET bigval\r\n", 200))); err != nil {
				t.Fatal(err)
			}
			firstByte(t, conn)
			if err := other.Ping(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			held := int64(heapAfter()) - int64(base)
			t.Logf("heap held for a client that does not read 200 GETs of a 1 MiB value: %.1f MiB", float64(held)/mib)
			if held > 32*mib {
				t.Fatalf("the proxy holds %.1f MiB of replies for a client that does not read them; want at most 32 MiB (16 values and 1 MiB)", float64(held)/mib)
			}
		})
	})
}

// dialSmallWindow is dial with a 32 KiB receive buffer, set before the
// connection is made, so that the kernels' buffers take little of what
// the proxy writes to a client that does not read: the rest is the
// proxy's to hold.
func (c *cluster) dialSmallWindow() net.Conn {
	c.t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var err error
		rc.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 32<<10) })
		return err
	}}
	conn, err := d.Dial("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.clientTLS != nil {
		tc := tls.Client(conn, c.clientTLS)
		if err := tc.Handshake(); err != nil {
			c.t.Fatal(err)
		}
		return tc
	}
	return conn
}

// exchangeUntil writes in and reads until the output has want's length.
func exchangeUntil(t testing.TB, conn io.ReadWriter, in, want string) (string, error) {
	t.Helper()
	if _, err := conn.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, len(want))
	n, err := io.ReadFull(conn, b)
	return string(b[:n]), err
}

// firstByte waits for the first byte of the replies to a pipeline.
func firstByte(t testing.TB, conn interface {
	io.Reader
	SetReadDeadline(time.Time) error
}) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(conn, make([]byte, 1)); err != nil {
		t.Fatalf("no reply: %v", err)
	}
	conn.SetReadDeadline(time.Time{})
}

// TestOutputInPiecesInOrder: a client that reads gets every reply of a
// long pipeline of large replies, in order, while the proxy renders them
// a piece at a time: local replies (CLIENT GETNAME of a 4 KiB name, ECHO
// carrying each command's place) alone, then mixed with quorum reads (GET
// of a 64 KiB value).
func TestOutputInPiecesInOrder(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		// 1,750 GETs of a 64 KiB value queue on one master: node_timeout
		// is raised so that a busy machine (TLS, -race) does not turn the
		// last of them into NOQUORUM; replies' order and memory are what
		// this checks (it failed once so in CI, with other tests running).
		c := start(t, 1, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = 2 * time.Second })
		ctx := context.Background()
		value := strings.Repeat("v", 64<<10)
		if ok, err := c.client().SetNX(ctx, "lock:k", value, time.Minute).Result(); err != nil || !ok {
			t.Fatalf("SET lock:k NX: %v %v", ok, err)
		}
		conn := c.dial()
		defer conn.Close()
		name := strings.Repeat("n", 4096)
		if out, _ := exchangeUntil(t, conn, encode("CLIENT", "SETNAME", name), "+OK\r\n"); out != "+OK\r\n" {
			t.Fatalf("CLIENT SETNAME: %q", out)
		}
		const n = 5000
		reply := func(i int) (cmd, want string) {
			switch {
			case i%10 == 9:
				return encode("ECHO", strconv.Itoa(i)), strconv.Itoa(i)
			case i >= 1500 && i%2 == 0:
				return encode("GET", "lock:k"), value
			}
			return "CLIENT GETNAME\r\n", name
		}
		var in bytes.Buffer
		for i := 0; i < n; i++ {
			cmd, _ := reply(i)
			in.WriteString(cmd)
		}
		base := heapInUse()
		var peak atomic.Uint64
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { // sample the heap while the replies flow
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			var m runtime.MemStats
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				runtime.ReadMemStats(&m)
				if m.HeapInuse > peak.Load() {
					peak.Store(m.HeapInuse)
				}
			}
		}()
		var werr error
		go func() { // the proxy reads as the client reads: write meanwhile
			defer wg.Done()
			_, werr = conn.Write(in.Bytes())
		}()
		began := time.Now()
		conn.SetReadDeadline(time.Now().Add(2 * time.Minute))
		r := bufio.NewReaderSize(conn, 64<<10)
		buf := make([]byte, 64<<10+2)
		total := 0
		for i := 0; i < n; i++ {
			_, want := reply(i)
			total += len(want)
			head, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			if head != fmt.Sprintf("$%d\r\n", len(want)) {
				t.Fatalf("reply %d: header %q, want a bulk of %d bytes", i, head, len(want))
			}
			b := buf[:len(want)+2]
			if _, err := io.ReadFull(r, b); err != nil {
				t.Fatalf("reply %d: %v", i, err)
			}
			if string(b[:len(want)]) != want || string(b[len(want):]) != "\r\n" {
				t.Fatalf("reply %d: %.40q…, want %.40q…", i, b, want)
			}
		}
		took := time.Since(began)
		close(stop)
		wg.Wait()
		if werr != nil {
			t.Fatal(werr)
		}
		// Nothing more: no reply duplicated.
		conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		if k, _ := r.Read(buf[:1]); k != 0 {
			t.Fatalf("a byte after the last reply: %q", buf[:1])
		}
		over := float64(int64(peak.Load())-int64(base)) / (1 << 20)
		t.Logf("%d replies (%d MiB) in %v; heap in use peaked %.1f MiB over the start", n, total>>20, took, over)
		if over > 128 {
			t.Fatalf("heap in use peaked %.1f MiB over the start while replies were read; want under 128 MiB", over)
		}
	})
}
