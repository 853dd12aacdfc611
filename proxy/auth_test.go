package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/ops"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// rawConn speaks RESP by hand, to check replies byte for byte.
type rawConn struct {
	t  *testing.T
	c  net.Conn
	rd *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, rd: bufio.NewReader(c)}
}

// do sends args and returns the whole reply as it came on the wire.
func (r *rawConn) do(args ...string) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	r.c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(r.c, b.String()); err != nil {
		r.t.Fatal(err)
	}
	var out strings.Builder
	if err := readRaw(r.rd, &out); err != nil {
		r.t.Fatalf("%v: reading reply: %v (so far %q)", args, err, out.String())
	}
	return out.String()
}

// readRaw copies one RESP2 or RESP3 reply into out.
func readRaw(rd *bufio.Reader, out *strings.Builder) error {
	line, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	out.WriteString(line)
	body := strings.TrimSuffix(line[1:], "\r\n")
	switch line[0] {
	case '$', '=', '!':
		n, _ := strconv.Atoi(body)
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(rd, buf); err != nil {
			return err
		}
		out.Write(buf)
	case '*', '~', '>', '%', '|':
		n, _ := strconv.Atoi(body)
		if line[0] == '%' || line[0] == '|' {
			n *= 2
		}
		for range n {
			if err := readRaw(rd, out); err != nil {
				return err
			}
		}
	}
	return nil
}

const (
	noAuth    = "-NOAUTH Authentication required.\r\n"
	wrongPass = "-WRONGPASS invalid username-password pair or user is disabled.\r\n"
)

func withPass(p string) clusterOpt {
	return func(pc *proxy.Config, qc *quorum.Config) { pc.RequirePass = p }
}

func TestAuthRESP2(t *testing.T) {
	var m *ops.Metrics
	c := startCluster(t, 1, withPass("s3cret"), withMetrics(&m), patient)

	r := dialRaw(t, c.addr)
	for _, cmd := range [][]string{{"PING"}, {"SET", "auth:k", "v", "NX", "PX", "10000"}, {"INFO"}, {"CLIENT", "SETNAME", "x"}} {
		if got := r.do(cmd...); got != noAuth {
			t.Errorf("%v before AUTH = %q, want NOAUTH", cmd, got)
		}
	}
	if v := c.onMasters("auth:k"); v[0] != "(nil)" {
		t.Fatalf("a command before AUTH reached the master: %v", v)
	}
	for _, cmd := range [][]string{{"AUTH", "wrong"}, {"AUTH", "s3cre"}, {"AUTH", "s3cret!"}, {"AUTH", "bob", "s3cret"}, {"AUTH", "default", "wrong"}} {
		if got := r.do(cmd...); got != wrongPass {
			t.Errorf("%v = %q, want WRONGPASS", cmd, got)
		}
	}
	if got := r.do("PING"); got != noAuth {
		t.Errorf("PING after failed AUTHs = %q, want NOAUTH", got)
	}
	if got := r.do("AUTH", "s3cret"); got != "+OK\r\n" {
		t.Fatalf("AUTH s3cret = %q", got)
	}
	if got := r.do("SET", "auth:k", "v", "NX", "PX", "10000"); got != "+OK\r\n" {
		t.Fatalf("SET after AUTH = %q", got)
	}

	r2 := dialRaw(t, c.addr)
	if got := r2.do("AUTH", "default", "s3cret"); got != "+OK\r\n" {
		t.Fatalf("AUTH default s3cret = %q", got)
	}
	if got := r2.do("SET", "auth:k", "w", "NX", "PX", "10000"); got != "$-1\r\n" {
		t.Fatalf("contended SET in RESP2 = %q, want $-1", got)
	}
	// HELLO 2 AUTH answers the RESP2 form of the map: a flat array.
	r3 := dialRaw(t, c.addr)
	if got := r3.do("HELLO", "2", "AUTH", "default", "s3cret"); !strings.HasPrefix(got, "*14\r\n") || !strings.Contains(got, "proto\r\n:2\r\n") {
		t.Fatalf("HELLO 2 AUTH = %q", got)
	}
	// QUIT is allowed before AUTH.
	r4 := dialRaw(t, c.addr)
	if got := r4.do("QUIT"); got != "+OK\r\n" {
		t.Fatalf("QUIT before AUTH = %q", got)
	}

	st := info(t, c.client(func(o *redis.Options) { o.Password = "s3cret" }), "stats")
	if st["auth_failures"] != "5" {
		t.Errorf("INFO stats auth_failures = %q, want 5", st["auth_failures"])
	}
	if got := metric(c.scrape(), "lockproxy_auth_failures_total"); got != 5 {
		t.Errorf("lockproxy_auth_failures_total = %v, want 5", got)
	}
}

func TestAuthRESP3(t *testing.T) {
	c := startCluster(t, 1, withPass("s3cret"), patient)
	r := dialRaw(t, c.addr)
	if got := r.do("HELLO", "3"); !strings.HasPrefix(got, "-NOAUTH HELLO must be called with the client already authenticated") {
		t.Errorf("HELLO 3 before AUTH = %q, want NOAUTH", got)
	}
	if got := r.do("HELLO", "3", "AUTH", "default", "wrong"); got != wrongPass {
		t.Errorf("HELLO 3 AUTH default wrong = %q, want WRONGPASS", got)
	}
	if got := r.do("HELLO", "3", "AUTH", "bob", "s3cret"); got != wrongPass {
		t.Errorf("HELLO 3 AUTH bob = %q, want WRONGPASS", got)
	}
	if got := r.do("PING"); got != noAuth {
		t.Errorf("PING after failed HELLO AUTH = %q, want NOAUTH", got)
	}
	got := r.do("HELLO", "3", "AUTH", "default", "s3cret", "SETNAME", "app")
	if !strings.HasPrefix(got, "%7\r\n") || !strings.Contains(got, "proto\r\n:3\r\n") {
		t.Fatalf("HELLO 3 AUTH default s3cret = %q, want a RESP3 map with proto 3", got)
	}
	if got := r.do("SET", "auth3:k", "v", "NX", "PX", "10000"); got != "+OK\r\n" {
		t.Fatalf("SET after HELLO 3 AUTH = %q", got)
	}
	if got := r.do("SET", "auth3:k", "w", "NX", "PX", "10000"); got != "_\r\n" {
		t.Fatalf("contended SET in RESP3 = %q, want _ (RESP3 null)", got)
	}
	if got := r.do("CLIENT", "GETNAME"); got != "$3\r\napp\r\n" {
		t.Fatalf("CLIENT GETNAME = %q", got)
	}
	// AUTH after HELLO 3 keeps RESP3.
	if got := r.do("AUTH", "s3cret"); got != "+OK\r\n" {
		t.Fatalf("AUTH on a RESP3 connection = %q", got)
	}
}

// TestAuthClients: go-redis authenticates with AUTH (RESP2) and with
// HELLO 3 AUTH (RESP3); a wrong password is an error, never a lock.
func TestAuthClients(t *testing.T) {
	c := startCluster(t, 3, withPass("s3cret"), patient)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		good := c.client(func(o *redis.Options) { o.Protocol, o.Password = proto, "s3cret" })
		key := fmt.Sprint("authc:", proto)
		if ok, err := good.SetNX(ctx, key, "t", 10*time.Second).Result(); err != nil || !ok {
			t.Fatalf("RESP%d with the password: %v %v", proto, ok, err)
		}
		bad := c.client(func(o *redis.Options) { o.Protocol, o.Password = proto, "nope" })
		if _, err := bad.SetNX(ctx, key+"x", "t", 10*time.Second).Result(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("RESP%d with a wrong password: want WRONGPASS, got %v", proto, err)
		}
		none := c.client(func(o *redis.Options) { o.Protocol = proto })
		if _, err := none.SetNX(ctx, key+"y", "t", 10*time.Second).Result(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Fatalf("RESP%d without a password: want NOAUTH, got %v", proto, err)
		}
		if got := c.onMasters(key + "x"); count(got, "(nil)") != 3 {
			t.Fatalf("a refused client's lock reached the masters: %v", got)
		}
	}
}

func TestAuthWithoutRequirePass(t *testing.T) {
	c := startCluster(t, 1)
	r := dialRaw(t, c.addr)
	if got := r.do("AUTH", "x"); !strings.HasPrefix(got, "-ERR AUTH <password> called without any password configured") {
		t.Errorf("AUTH without requirepass = %q", got)
	}
	// As Redis: the default user is "nopass", so a client configured with
	// a password still connects.
	if got := r.do("AUTH", "default", "x"); got != "+OK\r\n" {
		t.Errorf("AUTH default x without requirepass = %q, want +OK", got)
	}
	if got := r.do("HELLO", "3", "AUTH", "default", "x"); !strings.HasPrefix(got, "%7\r\n") {
		t.Errorf("HELLO 3 AUTH default x without requirepass = %q, want the HELLO map", got)
	}
	if got := r.do("HELLO", "3", "AUTH", "bob", "x"); got != wrongPass {
		t.Errorf("HELLO AUTH bob without requirepass = %q, want WRONGPASS", got)
	}
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Errorf("PING = %q", got)
	}
}
