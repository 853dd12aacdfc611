package fakemaster

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// client is a raw connection to a fake master.
type client struct {
	t  *testing.T
	c  net.Conn
	rd *resp.Reader
}

func dial(t *testing.T, m *Master) *client {
	t.Helper()
	c, err := net.Dial("tcp", m.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, c: c, rd: resp.NewReader(c, 4096)}
}

func (c *client) send(args ...string) {
	c.t.Helper()
	if _, err := c.c.Write(resp.AppendCommandString(nil, args...)); err != nil {
		c.t.Fatal(err)
	}
}

// next reads one reply within d.
func (c *client) next(d time.Duration) (resp.Reply, error) {
	c.c.SetReadDeadline(time.Now().Add(d))
	return c.rd.Next()
}

func (c *client) want(text string) {
	c.t.Helper()
	r, err := c.next(5 * time.Second)
	if err != nil || r.String() != text {
		c.t.Fatalf("got %v %v, want %s", r, err, text)
	}
}

func TestRulesNewestFirstAndOnce(t *testing.T) {
	m := Start(t)
	m.On("SET").Reply(resp.ReplyNil)
	m.On("SET", "k").Error("ERR first").Once()
	c := dial(t, m)
	c.send("set", "k", "v")
	c.want("ERR first")
	c.send("SET", "k", "v")
	c.want("(nil)")
	c.send("GET", "k")
	c.want("ERR fakemaster: no rule for 'GET'")
	if n := m.Count("SET", "k"); n != 2 {
		t.Fatalf("Count(SET k) = %d, want 2", n)
	}
}

// TestHoldKeepsOrder: a held reply holds the later ones on its connection,
// yet the commands behind it are received; Release lets them all go, in
// order.
func TestHoldKeepsOrder(t *testing.T) {
	m := Start(t)
	held := m.On("GET").Reply(resp.Reply{Type: resp.Bulk, Str: []byte("v")}).Hold()
	c := dial(t, m)
	c.send("GET", "k")
	c.send("PING")
	m.WaitFor(t, "GET and PING received", func(got []Command) bool { return len(got) == 2 })
	if r, err := c.next(50 * time.Millisecond); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a reply got past the held one: %v %v", r, err)
	}
	held.Release()
	c.rd = resp.NewReader(c.c, 4096) // the timed-out read may have left the reader mid-line
	c.want(`"v"`)
	c.want("PONG")
}

func TestAfterAndCloseConn(t *testing.T) {
	m := Start(t)
	m.On("PING").After(30 * time.Millisecond).Reply(resp.Reply{Type: resp.Status, Str: []byte("PONG")})
	m.On("QUIT").CloseConn()
	c := dial(t, m)
	start := time.Now()
	c.send("PING")
	c.want("PONG")
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("delayed reply came after %v", d)
	}
	c.send("QUIT")
	if r, err := c.next(5 * time.Second); !errors.Is(err, io.EOF) {
		t.Fatalf("CloseConn: got %v %v, want EOF", r, err)
	}
}

func TestScriptsAndNoScript(t *testing.T) {
	m := Start(t)
	body := "return 'AUTH'"
	sha := SHA1(body)
	m.On("EVALSHA", sha).Reply(resp.Reply{Type: resp.Integer, Int: 1})
	c := dial(t, m)
	c.send("EVALSHA", sha, "0")
	c.want("NOSCRIPT No matching script. Please use EVAL.")
	c.send("SCRIPT", "LOAD", body)
	c.want(`"` + sha + `"`)
	c.send("EVALSHA", sha, "0")
	c.want("1")
	m.FlushScripts()
	c.send("EVALSHA", sha, "0")
	c.want("NOSCRIPT No matching script. Please use EVAL.")
}

func TestRequirePass(t *testing.T) {
	m := Start(t)
	pass := "AUTH \r\n*1\r\n$4\r\nPING\x00\xff"
	m.RequirePass("app", pass)
	c := dial(t, m)
	c.send("PING")
	c.want("NOAUTH Authentication required.")
	c.send("AUTH", pass)
	c.want("WRONGPASS invalid username-password pair or user is disabled.")
	c.send("AUTH", "app", pass)
	c.want("OK")
	c.send("PING")
	c.want("PONG")
	if got := m.Received()[2].Args; got[2] != pass {
		t.Fatalf("the password arrived as %q", got[2])
	}
}
