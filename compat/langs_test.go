package compat

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// langClient is a Redis client of another language that Debian ships, and
// the script (ruby/, perl/, lua/, python/, php/, erlang/) or program (c/,
// cpp/) that drives it.
type langClient struct {
	name    string
	interp  string   // the interpreter, Debian's; empty for a compiled program
	script  string   // under compat/
	extra   []string // arguments after PORT and PREFIX
	probe   []string // interpreter arguments that print the client's version
	install string   // the apt-get line that installs interpreter and client
	// build is the compiler's command line for a compiled client: the
	// program it writes, named by -o, is added at the end.
	build []string
}

var langClients = []langClient{
	{name: "redis-rb", interp: "/usr/bin/ruby", script: filepath.Join("ruby", "redis_rb.rb"),
		probe: []string{"-e", `require "redis"; print Redis::VERSION`}, install: "apt-get install -y ruby ruby-redis"},
	// redis-rb on its hiredis driver: the same script, hiredis's C reader.
	{name: "redis-rb-hiredis", interp: "/usr/bin/ruby", script: filepath.Join("ruby", "redis_rb.rb"), extra: []string{"hiredis"},
		probe: []string{"-e", `require "redis/connection/hiredis"; print Hiredis::VERSION`}, install: "apt-get install -y ruby-redis ruby-hiredis"},
	{name: "em-redis", interp: "/usr/bin/ruby", script: filepath.Join("ruby", "em_redis.rb"),
		probe: []string{"-W0", "-e", `require "em-redis"; print EMRedis::VERSION`}, install: "apt-get install -y ruby-em-redis"},
	{name: "perl-Redis", interp: "/usr/bin/perl", script: filepath.Join("perl", "redis.pl"), extra: []string{"Redis"},
		probe: []string{"-MRedis", "-e", "print $Redis::VERSION"}, install: "apt-get install -y libredis-perl"},
	{name: "perl-Redis-Fast", interp: "/usr/bin/perl", script: filepath.Join("perl", "redis.pl"), extra: []string{"Redis::Fast"},
		probe: []string{"-MRedis::Fast", "-e", "print $Redis::Fast::VERSION"}, install: "apt-get install -y libredis-fast-perl"},
	{name: "AnyEvent-Redis", interp: "/usr/bin/perl", script: filepath.Join("perl", "anyevent_redis.pl"),
		probe: []string{"-MAnyEvent::Redis", "-e", "print $AnyEvent::Redis::VERSION"}, install: "apt-get install -y libanyevent-redis-perl"},
	// lua5.1: lua-redis's pipeline fails under Debian's lua5.3 (table.insert
	// past the end), against Redis as against lockproxy.
	{name: "lua-redis", interp: "/usr/bin/lua5.1", script: filepath.Join("lua", "lua_redis.lua"),
		probe: []string{"-e", `io.write(require("redis")._VERSION)`}, install: "apt-get install -y lua5.1 lua-redis"},
	{name: "aioredis", interp: "/usr/bin/python3", script: filepath.Join("python", "aioredis_lock.py"),
		probe: []string{"-c", "import aioredis; print(aioredis.__version__)"}, install: "apt-get install -y python3-aioredis"},
	{name: "django-redis", interp: "/usr/bin/python3", script: filepath.Join("python", "django_redis_lock.py"),
		probe: []string{"-c", "import django_redis; print(django_redis.__version__)"}, install: "apt-get install -y python3-django-redis"},
	{name: "laravel-phpredis", interp: "/usr/bin/php", script: filepath.Join("php", "laravel_lock.php"), extra: []string{"phpredis"},
		probe:   []string{"-r", `require "/usr/share/php/Illuminate/Cache/autoload.php"; require "/usr/share/php/Illuminate/Redis/autoload.php"; require "/usr/share/php/Illuminate/Container/autoload.php"; echo phpversion("redis");`},
		install: "apt-get install -y php-illuminate-cache php-illuminate-redis php-illuminate-container php-redis"},
	{name: "laravel-predis", interp: "/usr/bin/php", script: filepath.Join("php", "laravel_lock.php"), extra: []string{"predis"},
		probe:   []string{"-r", `require "/usr/share/php/Illuminate/Cache/autoload.php"; require "/usr/share/php/Predis/autoload.php"; echo Predis\Client::VERSION;`},
		install: "apt-get install -y php-illuminate-cache php-illuminate-redis php-illuminate-container php-nrk-predis"},
	{name: "eredis", interp: "/usr/bin/escript", script: filepath.Join("erlang", "eredis_lock.escript"),
		install: "apt-get install -y erlang-redis-client"},
	{name: "hiredis", build: []string{"gcc", "-O1", filepath.Join("c", "hiredis_lock.c"), "-lhiredis"},
		install: "apt-get install -y gcc libhiredis-dev"},
	{name: "Poco-Redis", build: []string{"g++", "-std=c++17", "-O0", filepath.Join("cpp", "poco_redis_lock.cpp"), "-lPocoRedis", "-lPocoNet", "-lPocoFoundation"},
		install: "apt-get install -y g++ libpoco-dev"},
}

// require fails t, saying how to install them, when the interpreter or the
// client is missing; as everywhere in the suite, a missing dependency is a
// failure, never a skip (.ci/run installs them). A compiled client is
// built into t's directory, and lc comes back with the program as its
// interpreter.
func (lc langClient) require(t *testing.T) langClient {
	t.Helper()
	if lc.build != nil {
		bin := filepath.Join(t.TempDir(), lc.name)
		args := append(append([]string(nil), lc.build[1:]...), "-o", bin)
		if out, err := exec.Command(lc.build[0], args...).CombinedOutput(); err != nil {
			t.Fatalf("building the %s client failed (%v):\n%s\ninstall the compiler and library with:\n  %s\n(.ci/run installs them)", lc.name, err, out, lc.install)
		}
		lc.interp, lc.script = bin, ""
		return lc
	}
	if _, err := os.Stat(lc.interp); err != nil {
		t.Fatalf("%s: %v; install it with:\n  %s\n(.ci/run installs it)", lc.name, err, lc.install)
	}
	if lc.probe != nil {
		out, err := exec.Command(lc.interp, lc.probe...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s for %s is missing (%v: %s); install it with:\n  %s\n(.ci/run installs it)", lc.name, lc.interp, err, strings.TrimSpace(string(out)), lc.install)
		}
		t.Logf("%s %s", lc.name, strings.TrimSpace(string(out)))
	}
	return lc
}

// TestOtherLanguageClients runs the Redis clients of Ruby, Perl, Lua,
// Python's asyncio, PHP's Laravel, Django, Erlang, C and C++ through
// lockproxy: the handshakes their connection options send (a database, a
// client name, a password where none is set, reconnection), the server
// probes of lock libraries (INFO's redis_version, CLIENT SETNAME/GETNAME,
// ECHO), then a lock's life with them: SET NX PX, a contender refused, an
// EVAL extend, a stranger's extend and release refused, SCRIPT LOAD and
// EVALSHA (NOSCRIPT for an unknown sha1), pipelines and asynchronous
// commands where the client has them, a WATCH/MULTI/EXEC release, a
// re-acquire with EX; Laravel's Cache::lock and django-redis's cache.lock
// run unmodified. Each script runs first against one plain redis-server,
// then through lockproxy, where every reply must be the plain run's, step
// by step; the masters are read at each checkpoint.
func TestOtherLanguageClients(t *testing.T) {
	t.Parallel()
	for _, lc := range langClients {
		t.Run(lc.name, func(t *testing.T) {
			t.Parallel()
			lc := lc.require(t)
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
			if len(want) < 10 {
				t.Errorf("the plain run printed %d steps: the script stopped early", len(want))
			}
			must(t, e.checkKeys(t, prefixOf(t)))
		})
	}
}

func (e *env) runLang(t *testing.T, lc langClient) []string {
	t.Helper()
	args := append([]string{port(e.addr), prefixOf(t)}, lc.extra...)
	if lc.script != "" {
		args = append([]string{lc.script}, args...)
	}
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
