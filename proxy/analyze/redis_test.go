package analyze

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestModelAgainstRedis runs random command sequences in the model and in
// a real redis-server, each command through redis.pcall in EVAL as a
// script would call it, and compares the replies: types, values and error
// texts. It skips where redis-server is not installed.
func TestModelAgainstRedis(t *testing.T) {
	c := startRedis(t)
	rng := rand.New(rand.NewPCG(13, 14))
	for seq := 0; seq < 200; seq++ {
		c.do(t, "FLUSHALL")
		now := c.do(t, "TIME")
		sec, _ := strconv.ParseInt(now.Elems[0].Str, 10, 64)
		usec, _ := strconv.ParseInt(now.Elems[1].Str, 10, 64)
		r := &run{probe: "redis", db: keyspace{}, nowUS: sec*1e6 + usec, vals: []string{"k1", "k2"}, nkeys: 2,
			b: testBudget(t, Options{}.withDefaults()), dbArg: -1}
		var log []string
		for step := 0; step < 25; step++ {
			args := randomCommand(rng, r.nowMS())
			want := c.do(t, append([]string{"EVAL", "return redis.pcall(unpack(ARGV))", "0"}, args...)...)
			got := luaRoundTrip(r.exec(args))
			log = append(log, fmt.Sprintf("%q -> %s", args, want))
			if !sameReply(args[0], got, want) {
				t.Fatalf("sequence %d: %q: model %s, redis %s\nafter:\n%s", seq, args, got, want, strings.Join(log, "\n"))
			}
		}
	}
}

// luaRoundTrip is what a reply becomes through redis.pcall and back to
// RESP: integers go through a Lua number.
func luaRoundTrip(r Reply) Reply {
	if r.Type == IntReply {
		r.Int = truncInt(float64(r.Int))
	}
	for i := range r.Elems {
		r.Elems[i] = luaRoundTrip(r.Elems[i])
	}
	return r
}

// TestScriptRepliesAgainstRedis runs the sandbox's reply cases on a real
// server: the conversions between Lua and Redis, the libraries, the error
// texts. A script error's text is compared without the " script: <sha>…"
// Redis appends.
func TestScriptRepliesAgainstRedis(t *testing.T) {
	c := startRedis(t)
	for _, sc := range scriptReplies {
		if strings.Contains(sc.body, "time") {
			continue // the model's clock is not the server's
		}
		c.do(t, "FLUSHALL")
		c.do(t, "SET", "k", "abc")
		real := c.do(t, "EVAL", sc.body, "1", "k", "abc")
		if i := strings.Index(real.Str, " script: "); real.Type == ErrorReply && i > 0 {
			real.Str = real.Str[:i]
		}
		o, ref := runOnce(t, sc.body, 1, []string{"k", "abc"}, keyspace{"k": {typ: typeString, str: "abc"}})
		if ref != nil {
			t.Errorf("%s: refused: %v", sc.body, ref)
			continue
		}
		if !o.reply.Equal(real) {
			t.Errorf("%s: model %s, redis %s", sc.body, o.reply, real)
		}
		if got := o.reply.String(); got != sc.want {
			t.Errorf("%s: model %s, the table says %s", sc.body, got, sc.want)
		}
	}
}

// startRedis starts a redis-server for the test, or skips the test where
// there is none, and returns a connection to it.
func startRedis(t *testing.T) *respConn {
	t.Helper()
	if _, err := redisproc.Binary(); err != nil {
		t.Skip(err)
	}
	srv, err := redisproc.Start(redisproc.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	conn, err := net.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &respConn{w: conn, r: bufio.NewReader(conn)}
}

// sameReply compares replies, allowing time-to-live answers to differ by
// the time the real server took.
func sameReply(cmd string, model, real Reply) bool {
	if (cmd == "pttl" || cmd == "ttl") && model.Type == IntReply && real.Type == IntReply && model.Int >= 0 {
		d := model.Int - real.Int
		return d >= 0 && d <= 2000
	}
	return model.Equal(real)
}

var (
	randKeys   = []string{"k1", "k2"}
	randValues = []string{"v", "1", "-1", "0", "10", "1.5", "abc", "9223372036854775807", "-9223372036854775808", "007", ""}
	randTTLs   = []string{"100000", "2000000", "0", "-5", "abc", "1.5", "9223372036854775807"}
)

func pick(rng *rand.Rand, xs []string) string { return xs[rng.IntN(len(xs))] }

// randomCommand makes one command of the model, with arguments that are
// valid most of the time and wrong some of the time.
func randomCommand(rng *rand.Rand, nowMS int64) []string {
	k, v := pick(rng, randKeys), pick(rng, randValues)
	abs := strconv.FormatInt(nowMS+int64(2*rng.IntN(2)-1)*500000, 10) // never now itself: the real clock moves on
	opts := func(pool ...string) []string {
		var out []string
		for rng.IntN(2) == 0 && len(out) < 3 {
			out = append(out, pool[rng.IntN(len(pool))])
		}
		return out
	}
	switch rng.IntN(40) {
	case 0:
		return []string{"get", k}
	case 1, 2:
		args := []string{"set", k, v}
		for _, o := range opts("NX", "XX", "GET", "KEEPTTL", "PX", "EX", "PXAT", "EXAT", "nx") {
			args = append(args, o)
			switch o {
			case "PX", "EX":
				args = append(args, pick(rng, randTTLs))
			case "PXAT":
				args = append(args, abs)
			case "EXAT":
				args = append(args, abs[:len(abs)-3])
			}
		}
		return args
	case 3:
		return []string{"setnx", k, v}
	case 4:
		return []string{pick(rng, []string{"setex", "psetex"}), k, pick(rng, randTTLs), v}
	case 5:
		return []string{pick(rng, []string{"mset", "msetnx"}), k, v, pick(rng, randKeys), pick(rng, randValues)}
	case 6:
		return []string{"mget", k, pick(rng, randKeys)}
	case 7:
		return []string{"getrange", k, pick(rng, []string{"0", "-1", "1", "-3", "x"}), pick(rng, []string{"0", "-1", "2", "100", "-2"})}
	case 8:
		return []string{"strlen", k}
	case 9:
		return []string{pick(rng, []string{"incr", "decr"}), k}
	case 10:
		return []string{pick(rng, []string{"incrby", "decrby"}), k, pick(rng, randValues)}
	case 11:
		return []string{pick(rng, []string{"del", "unlink", "exists"}), k, pick(rng, randKeys)}
	case 12, 13:
		cmd := pick(rng, []string{"expire", "pexpire", "expireat", "pexpireat"})
		t := pick(rng, randTTLs)
		if strings.HasSuffix(cmd, "at") && rng.IntN(2) == 0 {
			t = abs
			if cmd == "expireat" {
				t = abs[:len(abs)-3]
			}
		}
		// GT and LT compare a relative TTL with one set a few µs earlier:
		// the answer depends on the real clock having ticked.
		if !strings.HasSuffix(cmd, "at") {
			return append([]string{cmd, k, t}, opts("NX", "XX", "FOO")...)
		}
		return append([]string{cmd, k, t}, opts("NX", "XX", "GT", "LT", "FOO")...)
	case 14:
		return []string{"persist", k}
	case 15:
		return []string{pick(rng, []string{"ttl", "pttl", "type"}), k}
	}
	return randomAggregateCommand(rng, k, v, abs, opts)
}

// randomAggregateCommand makes a hash, sorted-set, list or pub/sub command.
func randomAggregateCommand(rng *rand.Rand, k, v, abs string, opts func(...string) []string) []string {
	switch rng.IntN(24) + 16 {
	case 16:
		return []string{"hget", k, pick(rng, randValues)}
	case 17, 18:
		return []string{pick(rng, []string{"hset", "hsetnx"}), k, pick(rng, []string{"f", "g"}), v}
	case 19:
		return []string{"hdel", k, pick(rng, []string{"f", "g"})}
	case 20:
		return []string{"hexists", k, pick(rng, []string{"f", "g"})}
	case 21, 22:
		return []string{"hincrby", k, pick(rng, []string{"f", "g"}), pick(rng, randValues)}
	case 23:
		return []string{pick(rng, []string{"hlen", "hgetall", "hkeys", "hvals"}), k}
	case 24, 25, 26:
		args := append([]string{"zadd", k}, opts("NX", "XX", "GT", "LT", "CH", "INCR")...)
		for n := 1 + rng.IntN(2); n > 0; n-- {
			args = append(args, pick(rng, []string{"1", "2.5", "-1", "inf", "-inf", "x", "1e3", abs}), pick(rng, []string{"a", "b", "c"}))
		}
		return args
	case 27:
		return []string{"zscore", k, pick(rng, []string{"a", "b", "c"})}
	case 28:
		return []string{"zrem", k, pick(rng, []string{"a", "b", "c"})}
	case 29:
		return []string{"zcard", k}
	case 30, 31:
		return []string{pick(rng, []string{"zcount", "zremrangebyscore"}), k,
			pick(rng, []string{"-inf", "(1", "0", "2.5", "x", abs}), pick(rng, []string{"+inf", "(2.5", "3", "1e10"})}
	case 32, 33:
		return append([]string{pick(rng, []string{"zrange", "zrevrange"}), k, pick(rng, []string{"0", "-1", "1", "-2"}),
			pick(rng, []string{"0", "-1", "1", "5"})}, opts("WITHSCORES")...)
	case 34, 35:
		return []string{pick(rng, []string{"lpush", "rpush"}), k, v}
	case 36:
		return []string{"llen", k}
	case 37:
		return []string{"publish", "chan", v}
	case 38:
		return []string{"set", k}
	}
	return []string{"get"}
}

// respConn is a minimal RESP2 client that keeps reply types.
type respConn struct {
	w io.Writer
	r *bufio.Reader
}

func (c *respConn) do(t *testing.T, args ...string) Reply {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if conn, ok := c.w.(net.Conn); ok {
		conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	if _, err := io.WriteString(c.w, b.String()); err != nil {
		t.Fatal(err)
	}
	r, err := readTyped(c.r)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readTyped(r *bufio.Reader) (Reply, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return Reply{}, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	rest := line[1:]
	switch line[0] {
	case '+':
		return Reply{Type: StatusReply, Str: rest}, nil
	case '-':
		return errReply(rest), nil
	case ':':
		n, err := strconv.ParseInt(rest, 10, 64)
		return intReply(n), err
	case '$':
		n, _ := strconv.Atoi(rest)
		if n < 0 {
			return nilReply, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return Reply{}, err
		}
		return bulkReply(string(buf[:n])), nil
	case '*':
		n, _ := strconv.Atoi(rest)
		out := Reply{Type: ArrayReply}
		for i := 0; i < n; i++ {
			e, err := readTyped(r)
			if err != nil {
				return Reply{}, err
			}
			out.Elems = append(out.Elems, e)
		}
		return out, nil
	}
	return Reply{}, fmt.Errorf("unexpected reply %q", line)
}
