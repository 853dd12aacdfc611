package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Before AUTH succeeds, Redis's own limits apply: at most 10 arguments of
// at most 16384 bytes. With requirepass set, 100 unauthenticated
// connections each sending an unfinished 8 MiB command held all of it in
// lockproxy's memory (docs/hardening.md). A command that fits gets NOAUTH
// and the connection goes on; AUTH followed by a long command in the same
// write is served, since each command is checked under the state the ones
// before it left.
func TestPreAuthLimits(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.RequirePass = "pw" })
		auth := encode("AUTH", "pw")
		keys := []string{"DEL"}
		for i := 0; i < 11; i++ {
			keys = append(keys, fmt.Sprint("k", i))
		}
		long := strings.Repeat("x", 20000)
		for _, tc := range []struct {
			name, in, want string
			closed         bool
		}{
			{"11 arguments", encode(keys...), "-ERR Protocol error: unauthenticated multibulk length (over 10 before AUTH, as Redis; requirepass is set: authenticate first)\r\n", true},
			{"a 16385-byte argument", "*2\r\n$4\r\nECHO\r\n$16385\r\n", "-ERR Protocol error: unauthenticated bulk length (over 16384 before AUTH, as Redis; requirepass is set: authenticate first)\r\n", true},
			{"an unfinished 1 MiB argument", "*2\r\n$4\r\nECHO\r\n$1048576\r\n" + strings.Repeat("x", 1000), "-ERR Protocol error: unauthenticated bulk length", true},
			{"within the limits", encode("ECHO", strings.Repeat("x", 16384)), "-NOAUTH Authentication required.\r\n", false},
			{"a wrong password, then 11 arguments", encode("AUTH", "nope") + encode(keys...), "-WRONGPASS invalid username-password pair or user is disabled.\r\n-ERR Protocol error: unauthenticated multibulk length", true},
			{"AUTH, then 11 arguments and a long one in the same write", auth + encode(keys...) + encode("ECHO", long),
				"+OK\r\n:0\r\n$20000\r\n" + long + "\r\n", false},
			{"HELLO AUTH, then 11 arguments", encode("HELLO", "2", "AUTH", "default", "pw") + encode(keys...), ":0\r\n", false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, closed := c.expect(tc.in, len(tc.want), 2*time.Second)
				if tc.name == "HELLO AUTH, then 11 arguments" {
					out = out[strings.LastIndex(out, "\r\n:")+2:] // after HELLO's map
				}
				if !strings.HasPrefix(out, tc.want) || closed != tc.closed {
					t.Fatalf("got %.300q (closed %v), want %.300q (closed %v)", out, closed, tc.want, tc.closed)
				}
			})
		}
	})
}

// clientsInfo reads an integer field of INFO.
func infoInt(t testing.TB, cl *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := cl.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in INFO %s", field, section)
	return 0
}

// All connections together hold at most client_query_buffer_total in
// input; past it the connection holding the most is closed with an error
// that names the key, whether it is the one asking for more memory or
// another, and the others, small clients first, go on.
func TestInputBudget(t *testing.T) {
	const total = 9 << 20
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, withLimits(1<<20, 16, 2<<20+4096), func(pc *proxy.Config, _ *quorum.Config) { pc.MaxInputTotal = total })
		admin := c.client()
		ctx := context.Background()
		held := func() int64 { return infoInt(t, admin, "clients", "client_input_bytes") }
		base := held()
		// send opens a connection that sends an unfinished command and
		// waits until lockproxy holds it.
		send := func(partial string, grows int64) net.Conn {
			from := held()
			conn := c.dial()
			t.Cleanup(func() { conn.Close() })
			go conn.Write([]byte(partial)) // blocks until read; fails once closed
			waitFor(t, func() bool {
				return held() >= from+grows || infoInt(t, admin, "stats", "evicted_clients") > 0
			}, fmt.Sprintf("lockproxy to hold the unfinished command (from %d, +%d)", from, grows))
			return conn
		}
		mib := strings.Repeat("x", 1<<20)
		// The biggest first: a 1.9 MiB unfinished command (a 2 MiB buffer),
		// then 1 MiB ones until the budget is exceeded: at the seventh.
		big := send("*3\r\n$4\r\nECHO\r\n$1048576\r\n"+mib+"\r\n$1048576\r\n"+mib[:900000], 2<<20)
		var small []net.Conn
		for i := 0; i < 7; i++ {
			small = append(small, send("*2\r\n$4\r\nECHO\r\n$1000000\r\n"+mib[:900000], 1<<20))
		}
		if n := infoInt(t, admin, "stats", "evicted_clients"); n != 1 {
			t.Fatalf("evicted_clients = %d, want 1 (input held: %d of %d, from %d)", n, held(), total, base)
		}
		big.SetReadDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(big).ReadString('\n')
		want := "-ERR closing the connection: the memory all clients hold in unfinished and read-ahead commands and in replies they have not read reached 9437184 bytes (client_query_buffer_total in config.toml), and this connection holds the most ("
		if !strings.HasPrefix(line, want) {
			t.Fatalf("the biggest connection got %q, want %q…", line, want)
		}
		if n := held(); n > total {
			t.Fatalf("client_input_bytes = %d after the eviction, over %d", n, total)
		}
		for i, conn := range small {
			conn.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
			if n, err := conn.Read(make([]byte, 1)); n != 0 || !isTimeout(err) {
				t.Fatalf("small connection %d: %d bytes, %v; want it open and silent", i, n, err)
			}
		}
		if ok, err := admin.SetNX(ctx, "budget", "t", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("a small client: %v %v", ok, err)
		}
	})
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A TLS client's input is held and given back as a plain TCP client's
// (one guard, one pipeline): after a long command the buffer shrinks
// back, and closing the connection releases what it held.
func TestInputBudgetTLSLikePlain(t *testing.T) {
	c := startClusterTLS(t, 3)
	admin := c.client()
	held := func() int64 { return infoInt(t, admin, "clients", "client_input_bytes") }
	base := held()
	conn := c.dial()
	arg := strings.Repeat("x", 1<<20)
	if _, err := conn.Write([]byte(encode("ECHO", arg))); err != nil {
		t.Fatal(err)
	}
	rd := bufio.NewReader(conn)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := rd.ReadString('\n'); err != nil || line != "$1048576\r\n" {
		t.Fatalf("ECHO of 1 MiB: %q %v", line, err)
	}
	// A PING after it: lockproxy's own buffer is back to 4 KiB by its reply.
	conn.Write([]byte(encode("PING")))
	if _, err := rd.Discard(1<<20 + 2); err != nil {
		t.Fatal(err)
	}
	if line, err := rd.ReadString('\n'); err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING: %q %v", line, err)
	}
	if n := held(); n > base+64<<10 {
		t.Fatalf("client_input_bytes = %d after a 1 MiB command on TLS and a PING, want at most %d: the long command's buffer is kept", n, base+64<<10)
	}
	conn.Close()
	waitFor(t, func() bool { return held() == base }, "the closed connection's input released")
}
