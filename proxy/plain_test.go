package proxy_test

import (
	"bufio"
	"crypto/sha1"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// TestPlainTransaction: a MULTI without WATCH is accepted, as Redis
// accepts it. The pipelined MULTI, SET NX PX, EXEC of redis-py's
// pipeline(transaction=True) takes the lock and EXEC answers [OK] (it
// took the lock while EXEC answered "EXEC without MULTI"); node-mutex's
// MULTI, SCRIPT LOAD, SCRIPT LOAD, EXEC answers the sha1s (an understood
// script waits for its verdict); a second lock command, or a command
// lockproxy does not run in a transaction, is refused at queue time and
// EXEC aborts with nothing run; DISCARD drops the queue; the queue is
// bounded. RESP2 and RESP3, on both transports.
func TestPlainTransaction(t *testing.T) {
	for _, useTLS := range []bool{false, true} {
		c := startClusterWith(t, 3, useTLS)
		for _, proto := range []string{"2", "3"} {
			p := dialRaw(t, c.addr)
			if useTLS {
				p = dialRawTLS(t, c)
			}
			p.do("HELLO", proto)
			k := fmt.Sprintf("plain%s%v", proto, useTLS)
			got := p.pipeline([]string{"MULTI"}, []string{"SET", k, "tok", "NX", "PX", "30000"}, []string{"EXEC"})
			if want := "+OK\r\n+QUEUED\r\n*1\r\n+OK\r\n"; strings.Join(got, "") != want {
				t.Fatalf("RESP%s pipelined MULTI, SET NX PX, EXEC = %q, want %q", proto, got, want)
			}
			if v := c.onMasters(k); count(v, "tok") < 2 {
				t.Fatalf("after EXEC [OK] the masters hold %v", v)
			}
			// Taken by another: [nil], as one Redis answers.
			got = p.pipeline([]string{"MULTI"}, []string{"SET", k, "other", "NX", "PX", "30000"}, []string{"PING"}, []string{"EXEC"})
			nilRep := "$-1\r\n"
			if proto == "3" {
				nilRep = "_\r\n"
			}
			if want := "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n" + nilRep + "+PONG\r\n"; strings.Join(got, "") != want {
				t.Fatalf("RESP%s SET NX of a held lock in MULTI = %q, want %q", proto, got, want)
			}

			// node-mutex: its scripts loaded in a transaction; the second
			// is one the catalog lacks (understood by the analyzer).
			b1 := `local key = KEYS[1] local id = ARGV[1] if redis.call("get", key) == id then return redis.call("del", key) end return 0`
			b2 := fmt.Sprintf(`local k%s = KEYS[1] if redis.call("get", k%s) == ARGV[1] then return redis.call("pexpire", k%s, ARGV[2]) end return 0`, proto, proto, proto)
			got = p.pipeline([]string{"MULTI"}, []string{"SCRIPT", "LOAD", b1}, []string{"SCRIPT", "LOAD", b2}, []string{"EXEC"})
			want := "+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n"
			for _, b := range []string{b1, b2} {
				sum := sha1.Sum([]byte(b))
				want += "$40\r\n" + hex.EncodeToString(sum[:]) + "\r\n"
			}
			if strings.Join(got, "") != want {
				t.Fatalf("RESP%s MULTI, SCRIPT LOAD ×2, EXEC = %q, want %q", proto, got, want)
			}

			// Two lock commands: refused at queue time, nothing runs.
			k2 := k + "b"
			got = p.pipeline([]string{"MULTI"}, []string{"SET", k2, "t", "NX", "PX", "30000"}, []string{"EXPIRE", k, "60"}, []string{"EXEC"})
			if got[1] != "+QUEUED\r\n" || !strings.HasPrefix(got[2], "-ERR lockproxy runs at most one lock command in a transaction") || got[3] != "-EXECABORT Transaction discarded because of previous errors.\r\n" {
				t.Fatalf("RESP%s two lock commands in MULTI = %q", proto, got)
			}
			if v := c.onMasters(k2); count(v, "(nil)") != 3 {
				t.Fatalf("an aborted transaction took %s: %v", k2, v)
			}
			// A command not run in a transaction: the same.
			got = p.pipeline([]string{"MULTI"}, []string{"SET", k2, "t", "NX", "PX", "30000"}, []string{"PUBLISH", "ch", "m"}, []string{"EXEC"})
			if !strings.HasPrefix(got[2], "-ERR lockproxy does not run PUBLISH inside MULTI") || !strings.HasPrefix(got[3], "-EXECABORT") {
				t.Fatalf("RESP%s PUBLISH in MULTI = %q", proto, got)
			}
			// DISCARD drops the queue.
			got = p.pipeline([]string{"MULTI"}, []string{"SET", k2, "t", "NX", "PX", "30000"}, []string{"DISCARD"}, []string{"EXEC"})
			if want := "+OK\r\n+QUEUED\r\n+OK\r\n-ERR EXEC without MULTI\r\n"; strings.Join(got, "") != want {
				t.Fatalf("RESP%s DISCARD = %q, want %q", proto, got, want)
			}
			if v := c.onMasters(k2); count(v, "(nil)") != 3 {
				t.Fatalf("a discarded transaction took %s: %v", k2, v)
			}
			// A nested MULTI is an error that does not abort the
			// transaction, as in Redis 7.0.
			got = p.pipeline([]string{"MULTI"}, []string{"MULTI"}, []string{"PING"}, []string{"EXEC"})
			if want := "+OK\r\n-ERR MULTI calls can not be nested\r\n+QUEUED\r\n*1\r\n+PONG\r\n"; strings.Join(got, "") != want {
				t.Fatalf("RESP%s nested MULTI = %q, want %q", proto, got, want)
			}
			// The bound: 64 commands; the 65th is refused, EXEC aborts.
			cmds := [][]string{{"MULTI"}}
			for i := 0; i < 65; i++ {
				cmds = append(cmds, []string{"PING"})
			}
			cmds = append(cmds, []string{"EXEC"})
			got = p.pipeline(cmds...)
			if got[64] != "+QUEUED\r\n" || !strings.HasPrefix(got[65], "-ERR lockproxy queues at most 64 commands") || !strings.HasPrefix(got[66], "-EXECABORT") {
				t.Fatalf("RESP%s past the queue bound: %q %q %q", proto, got[64], got[65], got[66])
			}
		}
	}
}

// dialRawTLS is dialRaw to a cluster started with TLS.
func dialRawTLS(t *testing.T, c *cluster) *rawConn {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", c.addr, c.clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &rawConn{t: t, c: conn, rd: bufio.NewReader(conn)}
}
