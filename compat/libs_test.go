package compat

import "testing"

// Lock libraries that lockproxy serves only once it understands scripts by
// what they do (issue 13): their scripts are not in the catalog, so today
// lockproxy refuses them. Each driver takes its library through the same
// lifecycle, and reads the masters after every step: acquire (the key holds
// the holder's token with the asked TTL), refused while held, a stranger's
// extend and release do nothing, extend (the TTL moves back up), release,
// re-acquire by the locker refused before, expiry (another locker gets it
// after the TTL, and the expired holder's release leaves it alone).
//
// TestLibsPlainRedis runs every driver against one plain redis-server, no
// lockproxy: there the libraries work by construction, so a pass shows the
// driver is right. libs_analyzer_test.go (build tag analyzer) runs the same
// drivers through lockproxy, unchanged; its tag goes when the analyzer
// lands. docs/compat.md ("Libraries waiting for script understanding")
// says how each fails through lockproxy until then.
var libDrivers = []struct {
	name string
	run  func(t *testing.T, e *env)
}{
	{"redis-semaphore_Mutex", func(t *testing.T, e *env) { e.runNode(t, "redis_semaphore.js", "mutex") }},
	{"redis-semaphore_RedlockMutex", func(t *testing.T, e *env) { e.runNode(t, "redis_semaphore.js", "redlock") }},
	{"sesamecare-redlock", func(t *testing.T, e *env) { e.runNode(t, "sesame_redlock.js") }},
}

// TestLibsPlainRedis: every driver of libDrivers against one plain
// redis-server.
func TestLibsPlainRedis(t *testing.T) {
	t.Parallel()
	e := plainRedis(t)
	for _, d := range libDrivers {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			d.run(t, e)
		})
	}
}
