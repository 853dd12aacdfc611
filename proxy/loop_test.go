package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Plain TCP clients are served on the engine's event loop (loopclient.go);
// these tests cover what the loop does itself: the end of a client's
// stream, a client that leaves while its pipeline waits, and reading
// paused while a client sends far ahead. The rest of the suite runs on the
// loop too; TLS clients (tls_test in cmd/lockproxy) and
// TestGoroutineModeServesPlainTCP cover redcon's goroutine per connection.

// A client that sends its commands and shuts down its side of the
// connection still gets every reply, then the connection closes.
func TestLoopHalfClosedClientGetsItsReplies(t *testing.T) {
	c := startCluster(t, 3)
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	in := "*6\r\n$3\r\nSET\r\n$4\r\nhalf\r\n$1\r\nt\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n" +
		"PING\r\n" +
		"*2\r\n$3\r\nGET\r\n$4\r\nhalf\r\n"
	if _, err := conn.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	conn.(*net.TCPConn).CloseWrite()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	out, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read: %v (got %q)", err, out)
	}
	if want := "+OK\r\n+PONG\r\n$1\r\nt\r\n"; string(out) != want {
		t.Fatalf("got %q, want %q then close", out, want)
	}
}

// A client that disconnects while its request waits for the masters is
// closed at once; its pipeline still ends when the request is decided (once
// the masters are back), so a later shutdown does not wait for it, and the
// masters agree on the key: held by all (the lock was taken, nobody got
// the reply; it expires by its TTL) or undone on all.
func TestLoopClientGoneWhileItsPipelineWaits(t *testing.T) {
	const nodeTimeout = 300 * time.Millisecond
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) { qc.NodeTimeout = nodeTimeout })
	ctx := context.Background()
	admin := c.client()
	base := connectedClients(t, admin)
	for _, m := range c.masters[:2] {
		if err := m.Pause(); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("*6\r\n$3\r\nSET\r\n$4\r\ngone\r\n$1\r\nt\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n10000\r\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return connectedClients(t, admin) == base+1 }, "the client connected")
	conn.Close()
	waitFor(t, func() bool { return connectedClients(t, admin) == base }, "the closed client counted out")
	for _, m := range c.masters[:2] {
		if err := m.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if err := admin.Close(); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := c.srv.Shutdown(sctx); err != nil {
		t.Fatalf("shutdown after a client left mid-pipeline: %v", err)
	}
	t.Logf("shutdown took %v", time.Since(start).Round(time.Millisecond))
	if holders := count(c.onMasters("gone"), "t"); holders != 0 && holders != 3 {
		t.Fatalf("after shutdown the key is on %d of 3 masters: half-acquired", holders)
	}
}

func connectedClients(t *testing.T, cl *redis.Client) int {
	t.Helper()
	info, err := cl.Info(context.Background(), "clients").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "connected_clients:"); ok {
			var n int
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatalf("no connected_clients in INFO: %q", info)
	return 0
}

// A client that writes megabytes of pipelined commands without reading is
// read in pieces (lockproxy stops reading while it is far ahead) and gets
// every reply, in order.
func TestLoopLongPipelineAnsweredInOrder(t *testing.T) {
	c := startCluster(t, 3)
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 15000
	var in bytes.Buffer
	for i := 0; i < n; i++ {
		key := fmt.Sprintf("long:%d", i%5000) // each key 3 times: the first wins
		fmt.Fprintf(&in, "*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$1\r\nt\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n60000\r\n", len(key), key)
		e := fmt.Sprint(i)
		fmt.Fprintf(&in, "*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(e), e)
	}
	t.Logf("pipeline of %d commands, %d bytes", 2*n, in.Len())
	werr := make(chan error, 1)
	go func() {
		conn.SetWriteDeadline(time.Now().Add(60 * time.Second))
		_, err := conn.Write(in.Bytes())
		werr <- err
	}()
	conn.SetReadDeadline(time.Now().Add(60 * time.Second))
	rd := bufio.NewReader(conn)
	for i := 0; i < n; i++ {
		set, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("reply %d: %v", 2*i, err)
		}
		want := "+OK\r\n"
		if i >= 5000 {
			want = "$-1\r\n"
		}
		if set != want {
			t.Fatalf("SET #%d: %q, want %q", i, set, want)
		}
		hdr, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		body, err := rd.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("$%d\r\n%d\r\n", len(fmt.Sprint(i)), i); hdr+body != want {
			t.Fatalf("ECHO #%d: %q, want %q", i, hdr+body, want)
		}
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
}

// With NoEventLoop, plain TCP clients and masters get a goroutine per
// connection (redcon, batching's writer and reader): the same replies.
func TestGoroutineModeServesPlainTCP(t *testing.T) {
	// A node_timeout far beyond the harness's: a write whose deadline
	// passes before it is written is dropped, and on a loaded machine the
	// third master's copy of a pipelined SET could miss the 250ms, which
	// the check on all three masters below would take for a lost write.
	// This test checks what goroutine mode serves, not timing.
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) {
		qc.NoEventLoop = true
		qc.NodeTimeout = 5 * time.Second
	})
	if c.engine.Loop() != nil {
		t.Fatal("NoEventLoop: the engine has a loop")
	}
	ctx := context.Background()
	cl := c.client()
	if ok, err := cl.SetNX(ctx, "g", "t1", 10*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX: %v %v", ok, err)
	}
	if ok, err := cl.SetNX(ctx, "g", "t2", 10*time.Second).Result(); err != nil || ok {
		t.Fatalf("second SET NX: %v %v, want not acquired", ok, err)
	}
	release := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	if n, err := release.Run(ctx, cl, []string{"g"}, "t1").Int(); err != nil || n != 1 {
		t.Fatalf("release: %v %v", n, err)
	}
	pipe := cl.Pipeline()
	var echos []*redis.StringCmd
	for i := 0; i < 100; i++ {
		pipe.SetNX(ctx, fmt.Sprint("g:", i%10), "t", 10*time.Second)
		echos = append(echos, pipe.Echo(ctx, fmt.Sprint(i)))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	for i, e := range echos {
		if e.Val() != fmt.Sprint(i) {
			t.Fatalf("ECHO #%d = %q", i, e.Val())
		}
	}
	// A granted SET NX is answered once a quorum said yes: those two
	// masters hold g:3 now. The third one's write may still be on its way
	// (its reply was not waited for), so it is waited for.
	if holders := count(c.onMasters("g:3"), "t"); holders < 2 {
		t.Fatalf("g:3 on %d of 3 masters after its grant, want a quorum (2) at once", holders)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		vals := c.onMasters("g:3")
		if count(vals, "t") == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("g:3 on the masters: %q; want it on all 3 within 5s of its grant", vals)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
