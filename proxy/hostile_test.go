package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// Hostile and wrong input: every case gets a clear error, the connection
// is closed only where the byte stream is broken, nothing reaches a
// master, and other clients are not affected.

func withLimits(bulk, args, query int) clusterOpt {
	return func(pc *proxy.Config, _ *quorum.Config) {
		pc.MaxBulkLen, pc.MaxArgs, pc.MaxQueryBuffer = bulk, args, query
	}
}

func TestHostileProtocolErrors(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, withLimits(1000, 16, 4096))
		before := commandStats(c)
		ping := "*1\r\n$4\r\nPING\r\n"
		const pong = "+PONG\r\n"
		for _, tc := range []struct {
			name, in, want string
		}{
			{"bulk length over the limit", ping + "*2\r\n$4\r\nECHO\r\n$1001\r\n", "-ERR Protocol error: invalid bulk length: over 1000 (proto_max_bulk_len in config.toml)\r\n"},
			{"bulk length that overflows int64", ping + "*1\r\n$9223372036854775808\r\n", "-ERR Protocol error: invalid bulk length: over 1000"},
			{"bulk length that overflows redcon's index", ping + "*1\r\n$9223372036854775807\r\nx", "-ERR Protocol error: invalid bulk length"},
			{"argument count over the limit", ping + "*17\r\n", "-ERR Protocol error: invalid multibulk length: over 16 (proto_max_args in config.toml)\r\n"},
			{"huge argument count", ping + "*4611686018427387904\r\n", "-ERR Protocol error: invalid multibulk length"},
			{"negative count", ping + "*-1\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
			{"zero count", ping + "*0\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
			{"count not a number", ping + "*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
			{"count without CR", ping + "*1\n$4\r\nPING\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
			{"negative bulk length", ping + "*1\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
			{"not a bulk", ping + "*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'\r\n"},
			{"bulk longer than declared", ping + "*1\r\n$3\r\nPING\r\n", "-ERR Protocol error: expected CRLF after a bulk argument"},
			{"command over the query buffer limit", ping + "*5\r\n" + strings.Repeat("$1000\r\n"+strings.Repeat("x", 1000)+"\r\n", 4) + "$1000\r\n", "-ERR Protocol error: command larger than 4096 bytes (client_query_buffer_limit in config.toml)\r\n"},
			{"inline line over 64 KiB", "PING\r\n" + strings.Repeat("x", 65*1024), "-ERR Protocol error: too big inline request"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				out, closed := c.exchange(tc.in, 2*time.Second)
				if !strings.HasPrefix(out, pong+tc.want) || !closed {
					t.Fatalf("got %q (closed %v), want %q then close", out, closed, pong+tc.want)
				}
			})
		}
		// Inline (telnet) commands are split with Redis's grammar; a quote
		// left open ends the stream after the replies before it.
		want := "$4\r\naA b\r\n-ERR Protocol error: unbalanced quotes in request\r\n"
		if out, closed := c.exchange("ECHO \"a\\x41 b\"\r\nSET \"k v\r\n", 2*time.Second); out != want || !closed {
			t.Fatalf("unbalanced quotes: %q closed %v, want %q", out, closed, want)
		}
		if n := c.srv.ProtocolErrors(); n < 14 {
			t.Errorf("ProtocolErrors = %d, want every case counted", n)
		}
		// Still serving, nothing reached a master.
		if err := c.client().Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		if after := commandStats(c); after != before {
			t.Fatalf("masters saw commands:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// Wrong but well-formed commands get an error each, and the connection
// goes on.
func TestHostileWrongCommandsKeepTheConnection(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3)
		before := commandStats(c)
		cmds := [][]string{
			{"SET", "k", "v", "NX", "PX", "-5"},
			{"SET", "k", "v", "NX", "PX", "0"},
			{"SET", "k", "v", "NX", "PX", "99999999999999999999"},
			{"SET", "k", "v", "NX", "PX", "9223372036854775807"},
			{"SET", "k", "v", "NX", "EX", "9223372036854775807"},
			{"SET", "k", "v", "NX", "EXAT", "-9223372036854775808"},
			{"SET", "k", "v", "NX", "PXAT", "99999999999999999"},
			{"SET", "k", "v", "NX", "PX", "1e3"},
			{"SET", "k", "v", "NX", "PX", " 100"},
			{"PEXPIRE", "k", "-1"},
			{"EXPIRE", "k", "9223372036854775807"},
			{"EVAL", "return 1", "-1"},
			{"EVAL", "return 1", "99999999999"},
			{"EVAL", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`, "2", "k"},
			{"EVALSHA", strings.Repeat("z", 40), "0"},
			{"FLUSHALL"}, {"DEBUG", "SLEEP", "10"}, {"SHUTDOWN"}, {"KEYS", "*"},
			{"\x00\xff\r\n"},
			{strings.Repeat("X", 100000)},
			{"SELECT", "1"},
		}
		var in strings.Builder
		for _, cmd := range cmds {
			in.WriteString(encode(cmd...))
		}
		in.WriteString("\x01\x02 junk \xfe\r\n") // inline garbage: an unknown command
		in.WriteString(encode("PING"))
		// The last command asks the proxy to close the connection: everything
		// before it must have been answered, and nothing closed it earlier.
		in.WriteString(encode("QUIT"))
		out, closed := c.exchange(in.String(), 5*time.Second)
		if !closed {
			t.Fatalf("no QUIT reply: %q", out)
		}
		r := bufio.NewReader(strings.NewReader(out))
		for i := 0; i <= len(cmds); i++ {
			line, err := r.ReadString('\n')
			if err != nil || !strings.HasPrefix(line, "-") {
				what := "inline junk"
				if i < len(cmds) {
					what = fmt.Sprintf("%.60q", cmds[i])
				}
				t.Fatalf("reply %d to %s: %q %v; want an error", i, what, line, err)
			}
		}
		if rest, _ := io.ReadAll(r); string(rest) != "+PONG\r\n+OK\r\n" {
			t.Fatalf("after the errors: %q, want +PONG and QUIT's +OK", rest)
		}
		if after := commandStats(c); after != before {
			t.Fatalf("masters saw commands:\nbefore %s\nafter  %s", before, after)
		}
	})
}

// Empty and binary keys and tokens are locks like any other.
func TestHostileBinaryAndEmptyKeys(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3)
		ctx := context.Background()
		cl := c.client()
		rel := redis.NewScript(releaseScript)
		for _, kv := range [][2]string{
			{"", "token"},
			{"k", ""},
			{"\x00\r\n\xff*1\r\n$4\r\n", "\r\n\x00\xfe$-1\r\n"},
			{strings.Repeat("\xff", 1000), strings.Repeat("\x00", 1000)},
		} {
			key, tok := kv[0], kv[1]
			if ok, err := cl.SetNX(ctx, key, tok, 10*time.Second).Result(); err != nil || !ok {
				t.Fatalf("acquire %q: %v %v", key, ok, err)
			}
			if got := c.onMasters(key); count(got, tok) != 3 {
				t.Fatalf("masters hold %q under %q, want %q on all 3", got, key, tok)
			}
			if ok, err := cl.SetNX(ctx, key, "other", 10*time.Second).Result(); err != nil || ok {
				t.Fatalf("contended acquire %q: %v %v", key, ok, err)
			}
			if v, err := cl.Get(ctx, key).Result(); err != nil || v != tok {
				t.Fatalf("GET %q = %q, %v", key, v, err)
			}
			if n, err := rel.Run(ctx, cl, []string{key}, tok).Int(); err != nil || n != 1 {
				t.Fatalf("release %q: %d %v", key, n, err)
			}
			waitFor(t, func() bool { return count(c.onMasters(key), "(nil)") == 3 }, "released everywhere")
		}
	})
}

func TestHostileMaxClients(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		c := start(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.MaxClients = 5 })
		var conns []net.Conn
		for i := 0; i < 5; i++ {
			conn := c.dial()
			defer conn.Close()
			conns = append(conns, conn)
			// Served: the connection counts.
			conn.Write([]byte(encode("PING")))
			if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || line != "+PONG\r\n" {
				t.Fatalf("client %d: %q %v", i, line, err)
			}
		}
		out, closed := c.exchange(encode("PING"), 2*time.Second)
		if out != "-ERR max number of clients reached (max_clients in config.toml)\r\n" || !closed {
			t.Fatalf("6th client: %q closed %v", out, closed)
		}
		conns[0].Close()
		waitFor(t, func() bool {
			conn := c.dial()
			defer conn.Close()
			conn.Write([]byte(encode("PING")))
			conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(conn).ReadString('\n')
			return line == "+PONG\r\n"
		}, "a slot freed by a closed client")
	})
}

// A client that sends commands and never reads its replies is cut off
// after the write timeout; the others are served meanwhile.
func TestHostileSlowReaderCannotBlock(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		const writeTimeout = time.Second
		c := start(t, 3, func(pc *proxy.Config, _ *quorum.Config) { pc.WriteTimeout = writeTimeout })
		ctx := context.Background()
		good := c.client()
		connected := func() int {
			info, err := good.Info(ctx, "clients").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(l, "connected_clients:"); ok {
					n, _ := strconv.Atoi(v)
					return n
				}
			}
			return -1
		}
		base := connected()
		slow := c.dial()
		defer slow.Close()
		tcpOf(slow).SetReadBuffer(4096)
		// 64 KiB echoes until the proxy stops reading from us: its writes to
		// us are blocked.
		echo := encode("ECHO", strings.Repeat("e", 64<<10))
		go func() {
			for {
				slow.SetWriteDeadline(time.Now().Add(5 * time.Second))
				if _, err := slow.Write([]byte(echo)); err != nil {
					return
				}
			}
		}()
		waitFor(t, func() bool { return connected() == base+1 }, "the slow client connected")
		begin := time.Now()
		for time.Since(begin) < writeTimeout {
			s := time.Now()
			if ok, err := good.SetNX(ctx, fmt.Sprint("slow:", time.Now().UnixNano()), "t", time.Second).Result(); err != nil || !ok {
				t.Fatalf("good client while a slow one is stuck: %v %v", ok, err)
			}
			if d := time.Since(s); d > writeTimeout/2 {
				t.Fatalf("good client waited %v while a slow one is stuck", d)
			}
		}
		waitFor(t, func() bool { return connected() == base }, "the slow client disconnected")
		t.Logf("slow reader disconnected %v after it started", time.Since(begin).Round(time.Millisecond))
	})
}

// (4) Junk bytes on many connections and 3,000 open connections: the
// proxy still answers others promptly.
func TestHostileJunkAnd3000Connections(t *testing.T) {
	transports(t, func(t *testing.T, start func(testing.TB, int, ...clusterOpt) *cluster) {
		const conns = 3000
		raiseFileLimit(t, 2*conns+200)
		c := start(t, 3)
		ctx := context.Background()
		good := c.client()
		rng := rand.New(rand.NewPCG(1, 2))
		var open []net.Conn
		defer func() {
			for _, conn := range open {
				conn.Close()
			}
		}()
		for i := 0; i < conns; i++ {
			conn := c.dial()
			open = append(open, conn)
			switch i % 3 {
			case 0: // random bytes, then a line end so that they make a command
				junk := make([]byte, 1+rng.IntN(512))
				for j := range junk {
					junk[j] = byte(rng.Uint32())
				}
				conn.Write(append(junk, "\r\n"...))
			case 1: // half a command, never finished
				conn.Write([]byte("*3\r\n$3\r\nSET\r\n$100000\r\nabc"))
			}
		}
		var lat []time.Duration
		for i := 0; i < 50; i++ {
			s := time.Now()
			if ok, err := good.SetNX(ctx, fmt.Sprint("j:", i), "t", 10*time.Second).Result(); err != nil || !ok {
				t.Fatalf("acquire among %d hostile connections: %v %v", conns, ok, err)
			}
			lat = append(lat, time.Since(s))
		}
		info, _ := good.Info(ctx, "clients").Result()
		// Every random-junk connection got an error (an unknown command, or a
		// protocol error and the connection closed).
		junkErr := 0
		buf := make([]byte, 1)
		deadline := time.Now().Add(5 * time.Second)
		for i := 0; i < conns; i += 3 {
			open[i].SetReadDeadline(deadline)
			if n, _ := open[i].Read(buf); n == 1 && buf[0] == '-' {
				junkErr++
			}
		}
		t.Logf("with %d connections open (%s): acquire max %v; %d of %d junk connections answered with an error",
			conns, strings.TrimSpace(strings.Split(info, "\r\n")[1]), maxDur(lat), junkErr, conns/3)
		if junkErr != conns/3 {
			t.Fatalf("only %d of %d junk connections got an error reply", junkErr, conns/3)
		}
		if maxDur(lat) > 500*time.Millisecond {
			t.Fatalf("acquire took up to %v with hostile connections open", maxDur(lat))
		}
	})
}

func maxDur(d []time.Duration) time.Duration {
	var m time.Duration
	for _, x := range d {
		m = max(m, x)
	}
	return m
}

// raiseFileLimit raises the soft limit on open files to at least n, up to
// the hard limit.
func raiseFileLimit(t *testing.T, n uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur >= n {
		return
	}
	if rl.Max < n {
		t.Fatalf("open files: hard limit %d < %d needed; raise it (ulimit -Hn)", rl.Max, n)
	}
	old := rl.Cur
	rl.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rl.Cur = old
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	})
}

func encode(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// commandStats is every master's per-command call counts.
func commandStats(c *cluster) string {
	var out []string
	for _, m := range c.masters {
		s, err := m.Do("INFO", "commandstats")
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, stripInfo(s))
	}
	return strings.Join(out, " | ")
}
