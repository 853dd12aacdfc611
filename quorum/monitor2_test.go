package quorum_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestLegacyMarkerNeverShortensQuarantine: during a rolling upgrade a
// proxy of the previous version (marker "<end>", max_ttl 1s) notices a
// majority of masters restarted empty and writes its marker first. A new
// proxy with max_ttl 6s, whose 5s lock is still valid, reads it back as
// start = end - its own max_ttl (6s) and so keeps the 1s quarantine: the
// restarted masters vote again 1s after the restart and the lock is granted
// twice. (The old proxy also rewrites a "q:<start>:<end>" marker it cannot
// parse as a fresh quarantine of its own length, with the same effect.)
func TestLegacyMarkerNeverShortensQuarantine(t *testing.T) {
	masters := redisproc.ForTest(t, 5)
	long := func(c *quorum.Config) { c.MaxTTL = 6 * time.Second }
	a := startEngine(t, masters, bootstrap, long)
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	sent := time.Now()
	if r := acquire(t, a, "k", "tokA", 5*time.Second); r.Err != nil || !r.Reply.IsOK() {
		t.Fatalf("A's acquire: %v %v", r.Reply, r.Err)
	}
	validUntil := sent.Add(5*time.Second - quorum.Drift(5*time.Second, 0.01))
	a.Close()
	for _, m := range masters[:3] {
		m.Kill()
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	restarted := time.Now()
	// What the previous version's marker script writes on a missing marker
	// (max_ttl 1s): the end alone, in unix ms of the master's clock.
	const oldScript = `redis.call('SELECT', 1)
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], string.format('%d', now + tonumber(ARGV[1])))
return 1`
	for _, m := range masters[:3] {
		if _, err := m.Do("EVAL", oldScript, "1", quorum.MarkerKey, "1000"); err != nil {
			t.Fatal(err)
		}
	}
	a2 := startEngine(t, masters, long)
	poll(t, "A2 checked every master", func() bool {
		ms := a2.Masters()
		for _, m := range ms[:3] {
			if m.QuarantineWhy != quorum.WhyRestarted && m.QuarantineWhy != 0 {
				return false
			}
		}
		return ms[3].Voting() && ms[4].Voting()
	})
	for time.Since(restarted) < 1500*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
	}
	if time.Now().After(validUntil) {
		t.Fatal("test too slow: A's lock already expired")
	}
	for i, m := range a2.Masters()[:3] {
		t.Logf("master %d: voting %v, quarantined until +%v", i, m.Voting(), m.QuarantinedUntil.Sub(restarted))
	}
	// A stranger retries, as lock clients do (one attempt may meet a
	// scheduling hiccup on a loaded machine).
	var r outcome
	for try := 0; try < 10 && time.Until(validUntil) > time.Second; try++ {
		if r = acquire(t, a2, "k", "tokB", 500*time.Millisecond); r.Err == nil {
			break
		}
	}
	t.Logf("B: %v %v", r.Reply, r.Err)
	if r.Err == nil && r.Reply.IsOK() {
		t.Fatalf("A2 (max_ttl 6s) granted k %v after a majority restarted empty, while A's lock is valid for %v more",
			time.Since(restarted), time.Until(validUntil))
	}
}

// TestUncheckableMasterDoesNotVote: the commit says a master's
// votes count only while this proxy's max_ttl record on it is fresh. A
// master whose checks never succeed (here an ACL that lets the pipeline in
// but not the monitor's SELECT 1) stays "unverified", which failed() never
// bars; once the provisional quarantine (max_ttl) lapses it votes with no
// record, no marker and no eviction check, and the log still says an
// unchecked master does not vote.
func TestUncheckableMasterDoesNotVote(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	for _, m := range masters {
		if _, err := m.Do("ACL", "SETUSER", "lp", "on", ">pw", "~*", "&*", "+@all", "-select"); err != nil {
			t.Fatal(err)
		}
	}
	e := startEngine(t, masters, func(c *quorum.Config) {
		c.MaxTTL = time.Second
		c.MasterUsername, c.MasterPassword = "lp", "pw"
	})
	poll(t, "pipelines up", func() bool {
		for _, m := range e.Masters() {
			if !m.Up {
				return false
			}
		}
		return true
	})
	time.Sleep(1500 * time.Millisecond) // past the provisional quarantine
	for i, m := range masters {
		if v, _ := m.Do("EVAL", "redis.call('SELECT', 1) return redis.call('ZCARD', KEYS[1])", "1", quorum.MaxTTLKey); v != "0" {
			t.Fatalf("master %d carries %s records: the monitor did check it", i, v)
		}
	}
	if r := acquire(t, e, "k", "tok", 500*time.Millisecond); r.Err == nil && r.Reply.IsOK() {
		t.Fatalf("granted with votes of masters never checked (no marker, no max_ttl record, policy unknown): %v", e.Masters())
	}
}

// TestEvictionTaintSurvivesAFailedMarkerWrite: the quarantine that
// follows an evicting policy is recorded by the marker script (taint=1).
// Under memory pressure, which is when volatile-* evicts lock keys, that
// script's writes fail (OOM). The master must stay barred until the taint
// is recorded, and then be quarantined: it must not vote once its policy
// reads noeviction again while it may have evicted keys of valid locks.
func TestEvictionTaintSurvivesAFailedMarkerWrite(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	e := startEngine(t, masters, bootstrap)
	poll(t, "all voting", func() bool { return allVoting(e) })
	m := masters[0]
	// Application data without TTL, then a maxmemory below it: every write
	// is refused with OOM (CONFIG GET and reads still work).
	big := strings.Repeat("x", 64<<10)
	for i := 0; i < 64; i++ {
		if _, err := m.Do("SET", "fill:"+strconv.Itoa(i), big); err != nil {
			t.Fatal(err)
		}
	}
	info, err := m.Do("INFO", "memory")
	if err != nil {
		t.Fatal(err)
	}
	used := 0
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
			used, _ = strconv.Atoi(v)
		}
	}
	if _, err := m.Do("CONFIG", "SET", "maxmemory", strconv.Itoa(used-2<<20)); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Do("SET", "probe", "1"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("want OOM on writes, got %v", err)
	}
	if _, err := m.Do("CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	poll(t, "master 0 barred as evicting", func() bool { return strings.Contains(e.Masters()[0].Excluded, "volatile-lru") })
	// Lock keys (they all have a TTL) may be evicted from here on.
	if _, err := m.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	fixed := time.Now()
	poll(t, "policy read back as noeviction, still barred (taint not recorded)", func() bool {
		return strings.Contains(e.Masters()[0].Excluded, "has not yet recorded its quarantine")
	})
	// The operator also frees memory: writes (and yes votes) work again.
	if _, err := m.Do("CONFIG", "SET", "maxmemory", "0"); err != nil {
		t.Fatal(err)
	}
	poll(t, "quarantined for having evicted", func() bool {
		st := e.Masters()[0]
		return st.Excluded == "" && st.QuarantineWhy == quorum.WhyEvicting && !st.QuarantinedUntil.IsZero()
	})
	for time.Since(fixed) < time.Second {
		if st := e.Masters()[0]; st.Voting() {
			t.Fatalf("master 0 votes %v after its policy went back to noeviction, within max_ttl (2s) of evicting: %+v", time.Since(fixed), st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
