// Package fakemaster is a scripted Redis master at the wire, for unit tests
// of the code that talks to masters (batching's pipelines, quorum's
// engine, the probes): a real TCP listener on 127.0.0.1 that speaks RESP2,
// answers each command as the test scripted it (a reply, after a delay,
// held until released, never, or by closing the connection), and records
// every command it received, in order.
//
// It answers like one Redis: in order per connection, so a reply held or
// delayed holds every later reply on that connection behind it, as a busy
// or paused (SIGSTOP) master does. What it knows by itself is what clients
// need to connect and what script caching needs:
//
//   - AUTH [user] pass against RequirePass, NOAUTH before it;
//   - HELLO is an unknown command, so clients fall back to RESP2;
//   - PING, SELECT, CLIENT …, CONFIG GET maxmemory-policy (noeviction);
//   - INFO (any section) answers SetInfoServer's text, by default that of
//     a Redis 7.0.15;
//   - SCRIPT LOAD and EVAL remember the script, SCRIPT FLUSH and
//     FlushScripts forget them all, and EVALSHA of a script it does not
//     have is NOSCRIPT before any rule is looked at.
//
// Everything else is scripted with On; an unscripted command gets an
// error naming it, so that a test never passes on an answer it did not
// choose.
package fakemaster

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Command is one command a master received.
type Command struct {
	Conn int      // the connection it came on, numbered from 1 in order of accept
	Args []string // the command name first, as sent
}

// Is reports whether c starts with args, the name compared without case.
func (c Command) Is(args ...string) bool {
	if len(args) == 0 || len(args) > len(c.Args) || !strings.EqualFold(c.Args[0], args[0]) {
		return false
	}
	for i := 1; i < len(args); i++ {
		if c.Args[i] != args[i] {
			return false
		}
	}
	return true
}

// String renders c's arguments quoted, for failure messages.
func (c Command) String() string { return fmt.Sprintf("%q", c.Args) }

// Master is one fake master. Its methods are safe for concurrent use.
type Master struct {
	ln   net.Listener
	quit chan struct{} // closed by Close: held replies give up
	wg   sync.WaitGroup

	mu       sync.Mutex // protects the fields below
	rules    []*Rule
	got      []Command
	news     chan struct{} // closed and replaced at each command received, for WaitFor
	scripts  map[string]bool
	user     string // RequirePass
	info     string // INFO's answer (SetInfoServer)
	pass     string
	conns    map[net.Conn]bool
	accepted int
	closed   bool
}

// Start listens on a free port of 127.0.0.1; t's cleanup closes it.
func Start(t testing.TB) *Master {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("fakemaster: %v", err)
	}
	m := &Master{ln: ln, quit: make(chan struct{}), news: make(chan struct{}),
		scripts: map[string]bool{}, conns: map[net.Conn]bool{}, info: DefaultInfoServer}
	m.wg.Add(1)
	go m.accept()
	t.Cleanup(m.Close)
	return m
}

// Addr is the master's host:port.
func (m *Master) Addr() string { return m.ln.Addr().String() }

// Close stops listening, closes every connection and waits for them.
func (m *Master) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	close(m.quit)
	m.ln.Close()
	for c := range m.conns {
		c.Close()
	}
	m.mu.Unlock()
	m.wg.Wait()
}

// RequirePass makes the master want AUTH pass (user "" or "default") or
// AUTH user pass before anything else, like requirepass or an ACL user.
func (m *Master) RequirePass(user, pass string) {
	m.mu.Lock()
	m.user, m.pass = user, pass
	m.mu.Unlock()
}

// DefaultInfoServer is what INFO answers until SetInfoServer: the version
// fields of a Redis 7.0.15.
const DefaultInfoServer = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n"

// SetInfoServer sets INFO's answer, for example a Redis 6.2's or a Valkey's
// version fields ("# Server\r\nredis_version:6.2.16\r\n").
func (m *Master) SetInfoServer(text string) {
	m.mu.Lock()
	m.info = text
	m.mu.Unlock()
}

// FlushScripts forgets every script, as SCRIPT FLUSH does.
func (m *Master) FlushScripts() {
	m.mu.Lock()
	clear(m.scripts)
	m.mu.Unlock()
}

// Received returns the commands received so far, in order of arrival.
func (m *Master) Received() []Command {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Command(nil), m.got...)
}

// Count is how many commands received so far start with args.
func (m *Master) Count(args ...string) int {
	n := 0
	for _, c := range m.Received() {
		if c.Is(args...) {
			n++
		}
	}
	return n
}

// WaitFor blocks until cond holds for the commands received so far, and
// fails t when it does not within 10s. It polls nothing: it looks again at
// each command received. cond runs with the master's lock held: it must
// only look.
func (m *Master) WaitFor(t testing.TB, what string, cond func([]Command) bool) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		m.mu.Lock()
		ok, news := cond(m.got), m.news
		m.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-news:
		case <-timeout:
			t.Fatalf("fakemaster %s: not within 10s: %s; received %v", m.Addr(), what, m.Received())
		}
	}
}

func (m *Master) accept() {
	defer m.wg.Done()
	for {
		c, err := m.ln.Accept()
		if err != nil {
			return
		}
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return
		}
		m.conns[c] = true
		m.accepted++
		n := m.accepted
		m.mu.Unlock()
		m.wg.Add(1)
		go m.serve(c, n)
	}
}

// answer is what one command gets, decided when it arrives and carried
// out in order by the connection's writer.
type answer struct {
	reply resp.Reply
	after time.Duration
	gate  <-chan struct{} // nil: not held
	close bool
}

// serve reads commands and decides their answers as they arrive (so that
// Received shows what the client sent while earlier replies are held),
// and writes the answers in order on another goroutine.
func (m *Master) serve(c net.Conn, n int) {
	defer m.wg.Done()
	answers := make(chan answer, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.write(c, answers)
	}()
	defer func() {
		close(answers)
		<-done
		c.Close()
		m.mu.Lock()
		delete(m.conns, c)
		m.mu.Unlock()
	}()
	rd := resp.NewReader(c, 64<<10)
	authed := false
	for {
		r, err := rd.Next()
		if err != nil || r.Type != resp.Array || len(r.Elems) == 0 {
			return
		}
		cmd := Command{Conn: n, Args: make([]string, len(r.Elems))}
		for i, e := range r.Elems {
			cmd.Args[i] = string(e.Str)
		}
		a := m.decide(cmd, &authed)
		select {
		case answers <- a:
		case <-done: // the writer closed the connection
			return
		}
	}
}

// write carries out the answers in order until one closes the connection.
func (m *Master) write(c net.Conn, answers <-chan answer) {
	for a := range answers {
		if a.after > 0 {
			select {
			case <-time.After(a.after):
			case <-m.quit:
				return
			}
		}
		if a.gate != nil {
			select {
			case <-a.gate:
			case <-m.quit:
				return
			}
		}
		if a.close {
			c.Close()
			return
		}
		if _, err := c.Write(resp.AppendReply(nil, a.reply, false)); err != nil {
			return
		}
	}
}

// decide records cmd and finds its answer: authentication first, then
// NOSCRIPT for a script the master does not have, then the newest
// matching rule, then what the master knows by itself.
func (m *Master) decide(cmd Command, authed *bool) answer {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, cmd)
	close(m.news)
	m.news = make(chan struct{})
	switch {
	case cmd.Is("AUTH"):
		return answer{reply: m.auth(cmd.Args[1:], authed)}
	case cmd.Is("HELLO"):
		// As a Redis before 6 says it, authenticated or not: clients
		// (rueidis) then fall back to RESP2 and AUTH.
		return answer{reply: errorReply("ERR unknown command 'HELLO'")}
	}
	if m.pass != "" && !*authed {
		return answer{reply: errorReply("NOAUTH Authentication required.")}
	}
	switch {
	case cmd.Is("EVALSHA") && len(cmd.Args) > 1 && !m.scripts[strings.ToLower(cmd.Args[1])]:
		return answer{reply: errorReply("NOSCRIPT No matching script. Please use EVAL.")}
	case cmd.Is("EVAL") && len(cmd.Args) > 1:
		m.scripts[SHA1(cmd.Args[1])] = true // Redis caches what EVAL ran
	}
	for i := len(m.rules) - 1; i >= 0; i-- {
		if a, ok := m.rules[i].take(cmd); ok {
			return a
		}
	}
	return answer{reply: m.builtin(cmd)}
}

// auth answers AUTH as Redis does. m.mu is held.
func (m *Master) auth(args []string, authed *bool) resp.Reply {
	user, pass := "default", ""
	switch len(args) {
	case 1:
		pass = args[0]
	case 2:
		user, pass = args[0], args[1]
	default:
		return errorReply("ERR wrong number of arguments for 'auth' command")
	}
	want := m.user
	if want == "" {
		want = "default"
	}
	switch {
	case m.pass == "":
		return errorReply("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	case user != want || pass != m.pass:
		return errorReply("WRONGPASS invalid username-password pair or user is disabled.")
	}
	*authed = true
	return resp.ReplyOK
}

// configDefaults are the CONFIG GET values builtin answers.
var configDefaults = map[string]string{
	"maxmemory-policy": "noeviction", "appendonly": "no", "appendfsync": "everysec",
	"no-appendfsync-on-rewrite": "no",
}

// builtin is the answer to a command no rule matched. m.mu is held.
func (m *Master) builtin(cmd Command) resp.Reply {
	switch {
	case cmd.Is("PING"):
		return resp.Reply{Type: resp.Status, Str: []byte("PONG")}
	case cmd.Is("SELECT"), cmd.Is("CLIENT"):
		return resp.ReplyOK
	case cmd.Is("INFO"):
		return bulk(m.info)
	case cmd.Is("CONFIG", "GET") && len(cmd.Args) >= 3:
		// What lockproxy's monitor reads, as a Redis with default
		// persistence and noeviction answers it: one pair per parameter
		// it knows, none for others.
		var pairs []resp.Reply
		for _, p := range cmd.Args[2:] {
			if v, ok := configDefaults[strings.ToLower(p)]; ok {
				pairs = append(pairs, bulk(strings.ToLower(p)), bulk(v))
			}
		}
		return resp.Reply{Type: resp.Array, Elems: pairs}
	case cmd.Is("SCRIPT") && len(cmd.Args) == 3 && strings.EqualFold(cmd.Args[1], "LOAD"):
		sha := SHA1(cmd.Args[2])
		m.scripts[sha] = true
		return bulk(sha)
	case cmd.Is("SCRIPT") && len(cmd.Args) >= 2 && strings.EqualFold(cmd.Args[1], "FLUSH"):
		clear(m.scripts)
		return resp.ReplyOK
	}
	return errorReply("ERR fakemaster: no rule for '" + cmd.Args[0] + "'")
}

// SHA1 is the sha1 of a script body, in hex, as EVALSHA names it.
func SHA1(body string) string {
	h := sha1.Sum([]byte(body))
	return hex.EncodeToString(h[:])
}

func bulk(s string) resp.Reply { return resp.Reply{Type: resp.Bulk, Str: []byte(s)} }

func errorReply(msg string) resp.Reply { return resp.Reply{Type: resp.Error, Str: []byte(msg)} }
