package compat

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestGoRedisRESP3: go-redis 9 with Protocol: 3 (its default) through
// lockproxy: the handshake, and every reply type lockproxy sends as the
// client decodes it.
func TestGoRedisRESP3(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: e.addr, Protocol: 3, ClientName: "compat"})
	t.Cleanup(func() { c.Close() })
	key := prefixOf(t) + "lock"

	hello, err := c.Do(ctx, "HELLO", "3").Result()
	if err != nil {
		t.Fatalf("HELLO 3: %v", err)
	}
	m, ok := hello.(map[interface{}]interface{})
	if !ok || m["proto"] != int64(3) || m["server"] != "redis" {
		t.Fatalf("HELLO 3 = %#v, want a map with proto 3", hello)
	}
	if name, err := c.ClientGetName(ctx).Result(); err != nil || name != "compat" {
		t.Fatalf("CLIENT GETNAME = %q, %v", name, err)
	}
	if id, err := c.ClientID(ctx).Result(); err != nil || id <= 0 {
		t.Fatalf("CLIENT ID = %d, %v", id, err)
	}
	if info, err := c.Info(ctx).Result(); err != nil || !strings.Contains(info, "loading:0") {
		t.Fatalf("INFO: %v, loading:0 missing from:\n%s", err, info)
	}

	// Lock commands: status, null, bulk, integers.
	if ok, err := c.SetNX(ctx, key, "tok", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX PX = %v, %v", ok, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if ok, err := c.SetNX(ctx, key, "other", 5*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX PX of a held key = %v, %v; want false (RESP3 null)", ok, err)
	}
	if v, err := c.Get(ctx, key).Result(); v != "tok" || err != nil {
		t.Fatalf("GET = %q, %v", v, err)
	}
	if _, err := c.Get(ctx, key+"-missing").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of a missing key: %v, want redis.Nil", err)
	}
	if d, err := c.PTTL(ctx, key).Result(); err != nil || d < 4*time.Second || d > 5*time.Second {
		t.Fatalf("PTTL = %v, %v", d, err)
	}
	if n, err := c.Exists(ctx, key, key+"-missing").Result(); n != 1 || err != nil {
		t.Fatalf("EXISTS = %d, %v", n, err)
	}
	if ok, err := c.PExpire(ctx, key, 9*time.Second).Result(); !ok || err != nil {
		t.Fatalf("PEXPIRE = %v, %v", ok, err)
	}
	must(t, e.checkPTTL(t, key, 8000, 9000))

	// Scripts: arrays, NOSCRIPT, lockproxy's "how to register" error.
	rel := redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)
	if ex, err := c.ScriptExists(ctx, rel.Hash(), strings.Repeat("0", 40)).Result(); err != nil || len(ex) != 2 || !ex[0] || ex[1] {
		t.Fatalf("SCRIPT EXISTS = %v, %v; want [true false]", ex, err)
	}
	if _, err := c.EvalSha(ctx, strings.Repeat("0", 40), []string{key}).Result(); err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Fatalf("EVALSHA of an unknown sha1: %v, want NOSCRIPT", err)
	}
	if _, err := c.Eval(ctx, `return redis.call("flushall")`, nil).Result(); err == nil || !strings.Contains(err.Error(), "[[scripts]]") {
		t.Fatalf("EVAL of an unknown script: %v, want an error that says how to register it", err)
	}
	if n, err := rel.Run(ctx, c, []string{key}, "other").Int(); n != 0 || err != nil {
		t.Fatalf("release with another token = %d, %v", n, err)
	}
	must(t, e.checkHeld(t, key, "tok"))
	if n, err := rel.Run(ctx, c, []string{key}, "tok").Int(); n != 1 || err != nil {
		t.Fatalf("release = %d, %v", n, err)
	}
	must(t, e.checkGone(t, key))
	if n, err := c.Del(ctx, key).Result(); n != 0 || err != nil {
		t.Fatalf("DEL of a released key = %d, %v", n, err)
	}
	// Unsupported commands are errors, never sent to a master.
	if err := c.Do(ctx, "FLUSHALL").Err(); err == nil || !strings.Contains(err.Error(), "unknown or unsupported command") {
		t.Fatalf("FLUSHALL: %v", err)
	}
	must(t, e.checkKeys(t, prefixOf(t)))
}

// TestRESP3Wire: the bytes of every reply type after HELLO 3, and back to
// RESP2 after HELLO 2, read off the socket.
func TestRESP3Wire(t *testing.T) {
	t.Parallel()
	e := setup(t)
	key := prefixOf(t) + "lock"
	conn, err := net.Dial("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	send := func(args ...string) string {
		t.Helper()
		fmt.Fprintf(conn, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(conn, "$%d\r\n%s\r\n", len(a), a)
		}
		v, err := readRaw(r)
		if err != nil {
			t.Fatalf("%s: %v", strings.Join(args, " "), err)
		}
		return v
	}
	release := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	for _, tc := range []struct {
		args []string
		want string // exact reply, or a prefix when it ends in "…"
	}{
		{[]string{"GET", key}, "$-1\r\n"}, // RESP2 before HELLO
		{[]string{"HELLO", "3"}, "%7\r\n…"},
		{[]string{"PING"}, "+PONG\r\n"},
		{[]string{"GET", key}, "_\r\n"},
		{[]string{"SET", key, "tok", "NX", "PX", "5000"}, "+OK\r\n"},
		{[]string{"SET", key, "other", "NX", "PX", "5000"}, "_\r\n"},
		{[]string{"GET", key}, "$3\r\ntok\r\n"},
		{[]string{"EXISTS", key}, ":1\r\n"},
		{[]string{"PTTL", key + "-missing"}, ":-2\r\n"},
		{[]string{"CLIENT", "GETNAME"}, "_\r\n"},
		{[]string{"CLIENT", "SETINFO", "LIB-NAME", "compat"}, "+OK\r\n"},
		{[]string{"SCRIPT", "EXISTS", strings.Repeat("0", 40)}, "*1\r\n:0\r\n"},
		{[]string{"INFO", "server"}, "=…"},
		{[]string{"CONFIG", "GET", "maxmemory"}, "%…"},
		{[]string{"COMMAND", "DOCS"}, "%0\r\n"},
		{[]string{"SET", key, "v"}, "-ERR SET without NX…"},
		{[]string{"EVAL", release, "1", key, "other"}, ":0\r\n"},
		{[]string{"EVAL", release, "1", key, "tok"}, ":1\r\n"},
		{[]string{"HELLO", "2"}, "*14\r\n…"},
		{[]string{"GET", key}, "$-1\r\n"},
	} {
		got := send(tc.args...)
		if p, ok := strings.CutSuffix(tc.want, "…"); ok {
			if !strings.HasPrefix(got, p) {
				t.Errorf("%s = %q, want %q…", strings.Join(tc.args, " "), got, p)
			}
		} else if got != tc.want {
			t.Errorf("%s = %q, want %q", strings.Join(tc.args, " "), got, tc.want)
		}
	}
}

// readRaw reads one whole RESP2/RESP3 reply and returns its bytes.
func readRaw(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	if len(line) < 3 {
		return "", fmt.Errorf("short line %q", line)
	}
	var n int
	switch line[0] {
	case '$', '=', '!':
		fmt.Sscan(line[1:], &n)
		if n < 0 {
			return line, nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(r, body); err != nil {
			return "", err
		}
		return line + string(body), nil
	case '*', '~', '>', '%', '|':
		fmt.Sscan(line[1:], &n)
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		out := line
		for i := 0; i < n; i++ {
			el, err := readRaw(r)
			if err != nil {
				return "", err
			}
			out += el
		}
		return out, nil
	}
	return line, nil
}
