package proxy_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// closedWithin reports whether the server closes conn within d, reading
// and discarding what it sends meanwhile.
func closedWithin(conn net.Conn, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 4096)
	for {
		if _, err := conn.Read(buf); err != nil {
			return !isTimeout(err)
		}
	}
}

// Silent connections, opened faster than anyone can react, locked every
// client out with "max number of clients reached" for as long as they
// stayed. The handshake timeout closes connections that have not
// authenticated (requirepass set) and sent a command in time, however busy
// they are, so the lock-out ends; a client past its handshake stays, as
// long as no idle timeout is set.
func TestHandshakeTimeoutEndsTheLockOut(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		// The clients meant to pass (one before the lock-out, two after)
		// must connect and authenticate within the handshake timeout too,
		// TLS handshake included: on a loaded machine that took longer than
		// the first staging's timeout, and lockproxy rightly closed them.
		// Then it is staged again on a new lockproxy with the timeout
		// doubled; every other check fails at once.
		handshake := 300 * time.Millisecond
		for round := 1; ; round++ {
			cut := handshakeLockOut(t, start, handshake)
			if cut == "" {
				return
			}
			if round == 3 {
				t.Fatalf("with handshake_timeout %v: %s", handshake, cut)
			}
			t.Logf("with handshake_timeout %v: %s; staged again with %v", handshake, cut, 2*handshake)
			handshake *= 2
		}
	})
}

// handshakeLockOut stages the lock-out with the given handshake timeout.
// It answers why, when a client that was to pass was closed before it
// had authenticated (or could not connect), and "" when all went as it
// should; it fails the test on anything else.
func handshakeLockOut(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster, handshake time.Duration) (cut string) {
	t.Helper()
	c := start(t, 3, func(pc *proxy.Config, _ *quorum.Config) {
		pc.MaxClients, pc.HandshakeTimeout, pc.RequirePass = 12, handshake, "pw"
	})
	ctx := context.Background()
	// A client past its handshake, then idle: it stays.
	good, err := c.tryDial()
	if err != nil {
		return "the authenticating client's connection: " + err.Error()
	}
	defer good.Close()
	if out, closed := exchangeOn(t, good, encode("AUTH", "pw"), 200*time.Millisecond); out != "+OK\r\n" {
		if out == "" {
			return fmt.Sprintf("the authenticating client got no reply to AUTH (closed %v)", closed)
		}
		t.Fatalf("AUTH: %q", out)
	}
	// One that keeps sending PING without authenticating: closed.
	busy := c.dial()
	defer busy.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				if _, err := busy.Write([]byte(encode("PING"))); err != nil {
					return
				}
			}
		}
	}()
	// Silent ones, plain TCP even on the TLS port: no TLS handshake.
	var silent []net.Conn
	for i := 0; i < 10; i++ {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		silent = append(silent, conn)
	}
	began := time.Now()
	if out, closed := c.exchange(encode("PING"), time.Second); !strings.HasPrefix(out, "-ERR max number of clients reached") || !closed {
		t.Fatalf("13th client: %q (closed %v), want the max_clients error", out, closed)
	}
	if !closedWithin(busy, 5*time.Second) {
		t.Fatal("a connection that never authenticated is still open")
	}
	for i, conn := range silent {
		if !closedWithin(conn, 5*time.Second) {
			t.Fatalf("silent connection %d is still open", i)
		}
	}
	waited := time.Since(began)
	// passCut tells a client closed by the handshake timeout (no reply at
	// all) from one refused (an error reply, which fails the test).
	passCut := func(who string, err error) string {
		var refused redis.Error
		if errors.As(err, &refused) {
			t.Fatalf("%s: %v", who, err)
		}
		return who + ": " + err.Error()
	}
	cl := c.client(func(o *redis.Options) { o.Password = "pw" })
	if err := cl.Ping(ctx).Err(); err != nil {
		return passCut("a new client after the lock-out", err)
	}
	if waited < handshake/2 {
		t.Fatalf("connections closed after %v, before the handshake timeout %v", waited, handshake)
	}
	if closedWithin(good, 2*handshake) {
		t.Fatal("an authenticated client was closed by the handshake timeout")
	}
	admin := c.client(func(o *redis.Options) { o.Password = "pw" })
	info, err := admin.Info(ctx, "stats").Result()
	if err != nil {
		return passCut("INFO stats", err)
	}
	if n := infoField(info, "handshake_timeout_closes"); n != "11" {
		t.Errorf("handshake_timeout_closes = %s, want 11", n)
	}
	t.Logf("lock-out ended %v after it began", waited.Round(time.Millisecond))
	return ""
}

// A connection that neither sends nor is sent anything for idle_timeout is
// closed, as by Redis's timeout; one whose pipeline waits for the masters
// longer than that is not, and a pooled client reconnects by itself.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, func(pc *proxy.Config, qc *quorum.Config) {
			pc.IdleTimeout = idle
			qc.NodeTimeout = 3 * idle
		})
		ctx := context.Background()
		quiet := c.dial()
		defer quiet.Close()
		began := time.Now()
		if out, _ := exchangeOn(t, quiet, encode("PING"), 100*time.Millisecond); out != "+PONG\r\n" {
			t.Fatalf("PING: %q", out)
		}
		if !closedWithin(quiet, 5*time.Second) {
			t.Fatal("an idle connection is still open")
		}
		if d := time.Since(began); d < idle*3/4 {
			t.Fatalf("closed %v after its last command, before idle_timeout %v", d, idle)
		}
		// Active: a command every idle/3 keeps it.
		active := c.dial()
		defer active.Close()
		rd := bufio.NewReader(active)
		for i := 0; i < 6; i++ {
			active.Write([]byte(encode("PING")))
			active.SetReadDeadline(time.Now().Add(2 * time.Second))
			if line, err := rd.ReadString('\n'); err != nil || line != "+PONG\r\n" {
				t.Fatalf("active connection, PING %d: %q %v", i, line, err)
			}
			time.Sleep(idle / 3)
		}
		// Waiting for the masters longer than idle_timeout: two of three
		// paused, the request ends at node_timeout (3 × idle) with
		// NOQUORUM on the same connection.
		for _, m := range c.masters[:2] {
			if err := m.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		waiting := c.dial()
		defer waiting.Close()
		out, closed := exchangeOn(t, waiting, encode("SET", "idle", "t", "NX", "PX", "10000"), 5*idle)
		for _, m := range c.masters[:2] {
			m.Resume()
		}
		if !strings.HasPrefix(out, "-NOQUORUM") {
			t.Fatalf("a pipeline waiting for the masters: %q (closed %v), want NOQUORUM", out, closed)
		}
		// A pooled client idle for longer dials again by itself: go-redis
		// checks a plain connection before reusing it; a TLS one it does
		// not check, and retries on its EOF (MaxRetries, default 3).
		cl := c.client(func(o *redis.Options) { o.MaxRetries = 3 })
		if err := cl.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * idle)
		if ok, err := cl.SetNX(ctx, "pooled", "t", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("a pooled client after its connection was closed idle: %v %v", ok, err)
		}
		if n := infoInt(t, cl, "stats", "idle_timeout_closes"); n < 2 {
			t.Errorf("idle_timeout_closes = %d, want at least 2", n)
		}
	})
}
