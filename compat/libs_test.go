package compat

import (
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	zredis "github.com/zeromicro/go-zero/core/stores/redis"
)

// Lock libraries whose scripts are not in the catalog: lockproxy serves
// them by understanding their scripts (issue 13); and redis-mutex, which
// renews with SET XX PX. Each driver takes its
// library through the same lifecycle, and reads the masters after every
// step: acquire (the key holds the holder's token with the asked TTL),
// refused while held, a stranger's extend and release do nothing, extend
// (the TTL moves back up), release, re-acquire by the locker refused
// before, expiry (another locker gets it after the TTL, and the expired
// holder's release leaves it alone).
//
// TestLibsPlainRedis runs every driver against one plain redis-server, no
// lockproxy: there the libraries work by construction, so a pass shows the
// driver is right. TestLibsThroughLockproxy (libs_lockproxy_test.go) runs
// the same drivers through lockproxy, unchanged. docs/compat.md
// ("Libraries served by script understanding") lists them.
var libDrivers = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"redis-semaphore_Mutex", func(t *testing.T, e *env) { e.runNode(t, "redis_semaphore.js", "mutex") }},
	{"redis-semaphore_RedlockMutex", func(t *testing.T, e *env) { e.runNode(t, "redis_semaphore.js", "redlock") }},
	{"go-zero_RedisLock", driveGoZero},
	{"symfony-lock_phpredis", func(t *testing.T, e *env) { e.runSymfony(t, "phpredis") }},
	{"symfony-lock_predis", func(t *testing.T, e *env) { e.runSymfony(t, "predis") }},
	{"sesamecare-redlock", func(t *testing.T, e *env) { e.runNode(t, "sesame_redlock.js") }},
	{"simple-redis-mutex", func(t *testing.T, e *env) { e.runNode(t, "simple_redis_mutex.js") }},
	{"redis-mutex", func(t *testing.T, e *env) { e.runNode(t, "redis_mutex.js") }},
	{"simple-redis-mutex-1", func(t *testing.T, e *env) { e.runNode(t, "simple_redis_mutex1.js") }},
	{"redis-semaphore-4_Mutex", func(t *testing.T, e *env) { e.runNode(t, "redis_semaphore4.js") }},
	{"node-mutex", func(t *testing.T, e *env) { e.runNode(t, "node_mutex.js") }},
}

// TestLibsPlainRedis: every driver of libDrivers against one plain
// redis-server, and every script they send is one of the bodies kept for
// the analyzer's tests in proxy/analyze/testdata/libs, byte for byte.
func TestLibsPlainRedis(t *testing.T) {
	t.Parallel()
	e := plainRedis(t)
	capture := e.monitorScripts(t)
	t.Run("drivers", func(t *testing.T) {
		for _, d := range libDrivers {
			t.Run(d.name, func(t *testing.T) {
				t.Parallel()
				d.run(t, e)
			})
		}
	})
	if t.Failed() {
		return
	}
	checkCapturedScripts(t, capture())
}

// driveGoZero: go-zero v1.10.3's core/stores/redis RedisLock. Its one
// script acquires the lock or, for its holder, sets the TTL again (so
// Acquire is also its extend), and answers the bulk string "OK"; the TTL is
// SetExpire's seconds*1000 + 500 ms.
func driveGoZero(t *testing.T, e *env) {
	r := zredis.New(e.addr)
	key := prefixOf(t) + "lock"
	newLock := func(seconds int) *zredis.RedisLock {
		l := zredis.NewRedisLock(r, key)
		l.SetExpire(seconds)
		return l
	}
	acquire := func(l *zredis.RedisLock, want bool, what string) {
		t.Helper()
		if ok, err := l.Acquire(); ok != want || err != nil {
			t.Fatalf("%s: Acquire = %v, %v; want %v, nil", what, ok, err, want)
		}
	}
	release := func(l *zredis.RedisLock, want bool, what string) {
		t.Helper()
		if ok, err := l.Release(); ok != want || err != nil {
			t.Fatalf("%s: Release = %v, %v; want %v, nil", what, ok, err, want)
		}
	}

	a := newLock(10)
	acquire(a, true, "free lock")
	must(t, e.checkHeld(t, key, goZeroID(a)))
	must(t, e.checkPTTL(t, key, 9500, 10500))

	b := newLock(10)
	acquire(b, false, "held lock")
	must(t, e.checkHeld(t, key, goZeroID(a)))

	// A stranger's release does nothing, nor does its Acquire (go-zero's
	// extend) move the TTL.
	e.shorten(t, key, "3000")
	release(b, false, "a stranger's release")
	acquire(b, false, "a stranger's re-acquire")
	must(t, e.checkHeld(t, key, goZeroID(a)))
	must(t, e.checkPTTL(t, key, 1, 3000))

	// The holder's Acquire extends: the TTL moves back up.
	acquire(a, true, "the holder's re-acquire")
	must(t, e.checkHeld(t, key, goZeroID(a)))
	must(t, e.checkPTTL(t, key, 9500, 10500))

	release(a, true, "the holder's release")
	must(t, e.checkGone(t, key))
	release(a, false, "a second release")
	acquire(b, true, "a released lock")
	must(t, e.checkHeld(t, key, goZeroID(b)))
	release(b, true, "the holder's release")
	must(t, e.checkGone(t, key))

	// Expiry: go-zero has no waiting acquire; poll as its users do.
	short := newLock(1) // 1500 ms
	acquire(short, true, "free lock")
	must(t, e.checkHeld(t, key, goZeroID(short)))
	must(t, e.checkPTTL(t, key, 1, 1500))
	waiter := newLock(10)
	start := time.Now()
	for {
		ok, err := waiter.Acquire()
		if err != nil {
			t.Fatalf("waiting Acquire: %v", err)
		}
		if ok {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("a lock held for 1.5s was still refused after 5s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waited := time.Since(start); waited < 700*time.Millisecond {
		t.Fatalf("a lock held for 1.5s was taken after %v", waited)
	}
	// The holder's key expires on each master at its own moment (when the
	// master took the write, plus the TTL), so the poll that wins may find
	// it gone on a quorum only: the others refused, and keep nothing once
	// it expires there (found flaky under load).
	must(t, e.checkGranted(t, key, goZeroID(waiter)))
	release(short, false, "the expired holder's release")
	must(t, e.checkGranted(t, key, goZeroID(waiter)))
	release(waiter, true, "the holder's release")
	must(t, e.checkKeys(t, prefixOf(t)))
}

// goZeroID is the token RedisLock l writes: go-zero keeps it unexported,
// and the checks need to know the masters hold this lock's, not any.
func goZeroID(l *zredis.RedisLock) string {
	return reflect.ValueOf(l).Elem().FieldByName("id").String()
}

// debianPHP runs the Symfony driver: Debian's PHP, with Debian's
// php-symfony-lock, php-redis and php-nrk-predis.
const debianPHP = "/usr/bin/php"

const phpInstall = "apt-get install -y php-cli php-symfony-lock php-redis php-nrk-predis"

// requireSymfonyLock fails t (never skips) when PHP, Symfony Lock or the
// client (phpredis or predis) is missing, saying how to install them.
func requireSymfonyLock(t *testing.T, client string) {
	t.Helper()
	probe := map[string]string{
		"phpredis": `echo "phpredis ", phpversion("redis");`,
		"predis":   `require "/usr/share/php/Predis/autoload.php"; echo "predis ", Predis\Client::VERSION;`,
	}[client]
	code := `require "/usr/share/php/Symfony/Component/Lock/autoload.php";
if (!class_exists("Symfony\\Component\\Lock\\Store\\RedisStore")) { fwrite(STDERR, "no Symfony RedisStore"); exit(1); }
if (!extension_loaded("redis") && "` + client + `" === "phpredis") { fwrite(STDERR, "no redis extension"); exit(1); }
` + probe
	out, err := exec.Command(debianPHP, "-r", code).CombinedOutput()
	if err != nil {
		t.Fatalf("Symfony Lock with %s for %s is missing (%v: %s); install it with:\n  %s\n(.ci/run installs it)", client, debianPHP, err, strings.TrimSpace(string(out)), phpInstall)
	}
	t.Logf("%s: %s", debianPHP, strings.TrimSpace(string(out)))
}

// runSymfony runs php/symfony_lock.php against e with client "phpredis" or
// "predis".
func (e *env) runSymfony(t *testing.T, client string) {
	t.Helper()
	requireSymfonyLock(t, client)
	e.runDriven(t, 30*time.Second, debianPHP, filepath.Join("php", "symfony_lock.php"), port(e.addr), prefixOf(t), client)
	must(t, e.checkKeys(t, prefixOf(t)))
}
