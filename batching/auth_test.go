package batching

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// oddPassword holds what once broke credentials that travelled as RESP:
// the word AUTH (reloads skipped any command containing it), RESP framing
// and bytes that are not UTF-8.
const oddPassword = "pAUTHw \r\n*2\r\n$4\r\nAUTH\r\n\x00\xff"

// TestCredentialsAreValues: the pipeline authenticates with the username
// and password it was given, byte for byte, once per connection; after a
// NOSCRIPT it loads every Init script again, one whose body says AUTH
// included, and does not authenticate again.
func TestCredentialsAreValues(t *testing.T) {
	bothModes(t, func(t *testing.T, with func(Options) Options) {
		m := fakemaster.Start(t)
		m.RequirePass("lp", oddPassword)
		body := "return redis.call('ACL', 'WHOAMI') -- AUTH"
		m.On("EVALSHA", fakemaster.SHA1(body)).Reply(resp.Reply{Type: resp.Bulk, Str: []byte("lp")})
		p := New(with(Options{Addr: m.Addr(), Username: "lp", Password: oddPassword, Logger: quiet(),
			Init: [][]byte{resp.AppendCommandString(nil, "SCRIPT", "LOAD", body)}}))
		defer p.Close()
		waitConnected(t, p)
		got := m.Received()
		if len(got) != 2 || !got[0].Is("AUTH", "lp", oddPassword) || !got[1].Is("SCRIPT", "LOAD", body) {
			t.Fatalf("handshake: got %v, want AUTH lp <password>, then SCRIPT LOAD", got)
		}

		m.FlushScripts()
		evalsha := resp.AppendCommandString(nil, "EVALSHA", fakemaster.SHA1(body), "0")
		rec := newRecorder(1)
		if err := p.Submit(Op{Cmd: evalsha, C: rec}); err != nil {
			t.Fatal(err)
		}
		rec.wait(t)
		if r := rec.got[0]; r.Type != resp.Error || !strings.HasPrefix(string(r.Str), "NOSCRIPT") {
			t.Fatalf("after the flush: %v, want NOSCRIPT", r)
		}
		m.WaitFor(t, "the script loaded again after NOSCRIPT", func(cs []fakemaster.Command) bool {
			return len(cs) == 4 && cs[3].Is("SCRIPT", "LOAD", body)
		})
		rec = newRecorder(1)
		if err := p.Submit(Op{Cmd: evalsha, C: rec}); err != nil {
			t.Fatal(err)
		}
		rec.wait(t)
		if r := rec.got[0]; r.Type != resp.Bulk || string(r.Str) != "lp" {
			t.Fatalf("after the reload: %v, want the script's reply", r)
		}
		if n := m.Count("AUTH"); n != 1 {
			t.Fatalf("%d AUTH on one connection, want 1", n)
		}
	})
}

// TestWrongPasswordSaysWhyNotWhat: a refused AUTH leaves the master down
// with the master's reason (INFO quorum shows it), never the password.
func TestWrongPasswordSaysWhyNotWhat(t *testing.T) {
	m := fakemaster.Start(t)
	m.RequirePass("", "right")
	p := New(Options{Addr: m.Addr(), Password: oddPassword, Logger: quiet()})
	defer p.Close()
	m.WaitFor(t, "an AUTH", func(cs []fakemaster.Command) bool { return len(cs) > 0 })
	deadline := time.Now().Add(5 * time.Second)
	for {
		up, err := p.Up()
		if up {
			t.Fatal("up with a wrong password")
		}
		if err != nil && strings.Contains(err.Error(), "WRONGPASS") {
			if msg := err.Error(); !strings.HasPrefix(msg, "AUTH failed: ") || strings.Contains(msg, "pAUTHw") {
				t.Fatalf("error %q: want the master's reason after \"AUTH failed: \", without the password", msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no WRONGPASS within 5s: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if got := m.Received()[0]; !got.Is("AUTH", oddPassword) || len(got.Args) != 2 {
		t.Fatalf("got %v, want AUTH <password> for the default user", got)
	}
}
