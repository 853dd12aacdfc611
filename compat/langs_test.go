package compat

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// langClient is a Redis client of another language that Debian ships, and
// the script (ruby/, perl/, lua/) that drives it.
type langClient struct {
	name    string
	interp  string   // the interpreter, Debian's
	script  string   // under compat/
	extra   []string // arguments after PORT and PREFIX
	probe   []string // interpreter arguments that print the client's version
	install string   // the apt-get line that installs interpreter and client
}

var langClients = []langClient{
	{"redis-rb", "/usr/bin/ruby", filepath.Join("ruby", "redis_rb.rb"), nil,
		[]string{"-e", `require "redis"; print Redis::VERSION`}, "apt-get install -y ruby ruby-redis"},
	{"perl-Redis", "/usr/bin/perl", filepath.Join("perl", "redis.pl"), []string{"Redis"},
		[]string{"-MRedis", "-e", "print $Redis::VERSION"}, "apt-get install -y libredis-perl"},
	{"perl-Redis-Fast", "/usr/bin/perl", filepath.Join("perl", "redis.pl"), []string{"Redis::Fast"},
		[]string{"-MRedis::Fast", "-e", "print $Redis::Fast::VERSION"}, "apt-get install -y libredis-fast-perl"},
	// lua5.1: lua-redis's pipeline fails under Debian's lua5.3 (table.insert
	// past the end), against Redis as against lockproxy.
	{"lua-redis", "/usr/bin/lua5.1", filepath.Join("lua", "lua_redis.lua"), nil,
		[]string{"-e", `io.write(require("redis")._VERSION)`}, "apt-get install -y lua5.1 lua-redis"},
}

// require fails t, saying how to install them, when the interpreter or the
// client is missing; as everywhere in the suite, a missing dependency is a
// failure, never a skip (.ci/run installs them).
func (lc langClient) require(t *testing.T) {
	t.Helper()
	out, err := exec.Command(lc.interp, lc.probe...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s for %s is missing (%v: %s); install it with:\n  %s\n(.ci/run installs it)", lc.name, lc.interp, err, strings.TrimSpace(string(out)), lc.install)
	}
	t.Logf("%s %s", lc.name, strings.TrimSpace(string(out)))
}

// TestOtherLanguageClients runs the Redis clients of Ruby, Perl and Lua
// through lockproxy: the handshakes their connection options send (a
// database, a client name, a password where none is set, reconnection),
// the server probes of lock libraries (INFO's redis_version, CLIENT
// SETNAME/GETNAME, ECHO), then a lock's life with them: SET NX PX, a
// contender refused, an EVAL extend, a stranger's extend and release
// refused, SCRIPT LOAD and EVALSHA (NOSCRIPT for an unknown sha1), a
// pipeline, redlock-rb's value-and-PTTL read, a WATCH/MULTI/EXEC release,
// a re-acquire with EX. Each script runs first against one plain
// redis-server, then through lockproxy, where every reply must be the
// plain run's, step by step; the masters are read at each checkpoint.
func TestOtherLanguageClients(t *testing.T) {
	t.Parallel()
	for _, lc := range langClients {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			lc.require(t)
			plain := ownRedis(t)
			want := steps(plain.runLang(t, lc))
			e := setup(t)
			got := steps(e.runLang(t, lc))
			for i := 0; i < len(want) || i < len(got); i++ {
				var w, g string
				if i < len(want) {
					w = want[i]
				}
				if i < len(got) {
					g = got[i]
				}
				if w != g {
					t.Errorf("step %d: through lockproxy %q, on one Redis %q", i+1, g, w)
				}
			}
			if len(want) < 20 {
				t.Errorf("the plain run printed %d steps: the script stopped early", len(want))
			}
			must(t, e.checkKeys(t, prefixOf(t)))
		})
	}
}

func (e *env) runLang(t *testing.T, lc langClient) []string {
	t.Helper()
	args := append([]string{lc.script, port(e.addr), prefixOf(t)}, lc.extra...)
	return e.runDriven(t, 30*time.Second, lc.interp, args...)
}

// steps keeps a script's "STEP name result" lines.
func steps(lines []string) []string {
	var out []string
	for _, l := range lines {
		if strings.HasPrefix(l, "STEP ") {
			out = append(out, l)
		}
	}
	return out
}
