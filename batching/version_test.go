package batching

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// The version fields of INFO server as the servers print them (CRLF line
// ends, other fields around).
const (
	infoRedis62  = "# Server\r\nredis_version:6.2.16\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n"
	infoRedis74  = "# Server\r\nredis_version:7.4.1\r\nredis_git_sha1:00000000\r\nredis_mode:standalone\r\n"
	infoValkey80 = "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nredis_git_sha1:00000000\r\n"
	infoValkey72 = "# Server\r\nredis_version:7.2.4\r\nredis_git_sha1:00000000\r\nserver_name:valkey\r\nvalkey_version:7.2.7\r\n"
)

func TestParseServerInfo(t *testing.T) {
	for _, c := range []struct {
		info, str           string
		major, minor, patch int
		at70                bool
	}{
		{infoRedis62, "redis 6.2.16", 6, 2, 16, false},
		{infoRedis74, "redis 7.4.1", 7, 4, 1, true},
		{infoValkey80, "valkey 8.0.1 (redis_version 7.2.4)", 7, 2, 4, true},
		{infoValkey72, "valkey 7.2.7 (redis_version 7.2.4)", 7, 2, 4, true},
		{"redis_version:7.0.15\n", "redis 7.0.15", 7, 0, 15, true},
		{"redis_version:255.255.255\r\n", "redis 255.255.255", 255, 255, 255, true}, // unstable branch
		{"redis_version:7.9.224\r\n", "redis 7.9.224", 7, 9, 224, true},             // 8.0-m01
		{"redis_version:7.4.0-rc1\r\n", "redis 7.4.0-rc1", 7, 4, 0, true},
		{"redis_version:6.2\r\n", "redis 6.2", 6, 2, 0, false},
	} {
		v, err := ParseServerInfo(c.info)
		if err != nil {
			t.Errorf("%q: %v", c.info, err)
			continue
		}
		if v.String() != c.str || v.Major != c.major || v.Minor != c.minor || v.Patch != c.patch || v.AtLeast(7, 0) != c.at70 {
			t.Errorf("%q: %+v (%s), AtLeast(7, 0) %v; want %s %d.%d.%d, %v", c.info, v, v, v.AtLeast(7, 0), c.str, c.major, c.minor, c.patch, c.at70)
		}
	}
	for _, bad := range []string{"", "# Server\r\nredis_mode:standalone\r\n", "redis_version:seven\r\n", "redis_version:7\r\n", "redis_version:7.x\r\n"} {
		if v, err := ParseServerInfo(bad); err == nil {
			t.Errorf("%q parsed as %+v, want an error", bad, v)
		}
	}
}

// TestCheckVersionRefusesBeforeInit: with CheckVersion set, a new
// connection reads INFO server after AUTH; a version it refuses leaves the
// master down with CheckVersion's error, having been sent no Init command
// (no script loaded), and redialled; one it accepts gets Init next.
func TestCheckVersionRefusesBeforeInit(t *testing.T) {
	bothModes(t, func(t *testing.T, with func(Options) Options) {
		m := fakemaster.Start(t)
		m.RequirePass("", "pw")
		m.SetInfoServer(infoRedis62)
		load := resp.AppendCommandString(nil, "SCRIPT", "LOAD", "return 1")
		tooOld := errors.New("too old")
		var seen []ServerVersion
		check := make(chan ServerVersion, 16)
		p := New(with(Options{Addr: m.Addr(), Password: "pw", Logger: quiet(), Init: [][]byte{load},
			CheckVersion: func(i int, v ServerVersion) error {
				check <- v
				if !v.AtLeast(7, 0) {
					return tooOld
				}
				return nil
			}}))
		defer p.Close()
		for len(seen) < 2 { // refused, then redialled and refused again
			select {
			case v := <-check:
				seen = append(seen, v)
			case <-time.After(5 * time.Second):
				t.Fatalf("CheckVersion asked %d times within 5s, want a redial", len(seen))
			}
		}
		if seen[0].Version != "6.2.16" {
			t.Fatalf("CheckVersion got %+v, want 6.2.16", seen[0])
		}
		if up, err := p.Up(); up || !errors.Is(err, tooOld) {
			t.Fatalf("Up() = %v, %v; want down with CheckVersion's error", up, err)
		}
		if v := p.Version(); v.Version != "6.2.16" {
			t.Fatalf("Version() = %+v, want the refused 6.2.16", v)
		}
		if err := p.Submit(Op{Cmd: load}); err == nil {
			t.Fatal("Submit on a refused master accepted the command")
		}
		for _, c := range m.Received() {
			if !c.Is("AUTH") && !c.Is("INFO", "server") {
				t.Fatalf("a refused master was sent %v; want AUTH and INFO server only", c)
			}
		}

		m.SetInfoServer(infoValkey80) // upgraded in place
		waitConnected(t, p)
		if v := p.Version(); v.Server != "valkey" || v.Version != "8.0.1" {
			t.Fatalf("Version() = %+v after the upgrade, want valkey 8.0.1", v)
		}
		got := m.Received()
		n := len(got)
		if n < 3 || !got[n-3].Is("AUTH", "pw") || !got[n-2].Is("INFO", "server") || !got[n-1].Is("SCRIPT", "LOAD", "return 1") {
			t.Fatalf("the accepted connection's handshake ends %v, want AUTH, INFO server, SCRIPT LOAD", got[max(0, n-3):])
		}
	})
}

// TestCheckVersionInfoRefused: a master user denied INFO fails the
// connection with a message saying what to grant.
func TestCheckVersionInfoRefused(t *testing.T) {
	m := fakemaster.Start(t)
	m.On("INFO").Reply(resp.Reply{Type: resp.Error, Str: []byte("NOPERM User lp has no permissions to run the 'info' command")})
	p := New(Options{Addr: m.Addr(), Logger: quiet(), CheckVersion: func(int, ServerVersion) error { return nil }})
	defer p.Close()
	m.WaitFor(t, "INFO server", func(cs []fakemaster.Command) bool { return len(cs) > 0 })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := p.Up(); err != nil && strings.Contains(err.Error(), "+info") {
			break
		}
		if time.Now().After(deadline) {
			_, err := p.Up()
			t.Fatalf("Up() error %v, want one saying the master user needs +info", err)
		}
		time.Sleep(time.Millisecond)
	}
}
