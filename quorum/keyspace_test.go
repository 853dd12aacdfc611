package quorum_test

import (
	"bytes"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// A SWAPDB 0 5 empties database 0, leaves the marker (database 1) "ok" and
// every connection up, and is not pushed (a FLUSHDB is: A's flush watch
// would notice it itself). The master's own command counts, recorded on it
// by one lockproxy's checks, tell a second lockproxy that starts afterwards
// (a restart of the first, or another sharing the masters) that it lost
// its keys: it is quarantined for max_ttl, then votes again, and the next
// checks, which see no new SWAPDB, leave it voting.
func TestKeyspaceLossSharedAndAcrossProxyRestart(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	// A checks once at start, then not for an hour: it cannot be the
	// one that notices.
	a := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.QuarantineCheck = time.Hour })
	poll(t, "A: all voting", func() bool { return allVoting(a) })
	poll(t, "A's record on master 0", func() bool { return seen(t, masters[0]) != "0" })
	if _, err := masters[0].Do("SWAPDB", "0", "5"); err != nil {
		t.Fatal(err)
	}
	flushed := time.Now()
	if m := marker(t, masters[0]); m != "ok" {
		t.Fatalf("marker on master 0 after SWAPDB: %q, want ok (the sequence is the one the marker misses)", m)
	}
	b := startEngine(t, masters, bootstrap)
	// Not only not voting: unchecked masters do not vote either.
	poll(t, "B: master 0 quarantined for the SWAPDB, 1 and 2 voting", func() bool {
		v := voting(b)
		return b.Masters()[0].QuarantineWhy == quorum.WhyRestarted && !v[0] && v[1] && v[2]
	})
	_, end, ok := quarantineOf(marker(t, masters[0]))
	if !ok {
		t.Fatalf("marker on master 0: %q, want a quarantine", marker(t, masters[0]))
	}
	if d := end.Sub(flushed); d < 1900*time.Millisecond || d > 3*time.Second {
		t.Fatalf("quarantine ends %v after the SWAPDB, want about max_ttl (2s)", d)
	}
	if why := b.Masters()[0].QuarantineWhy; why != quorum.WhyRestarted {
		t.Fatalf("B: master 0 quarantined for %v, want WhyRestarted", why)
	}
	a.Close()
	poll(t, "B: quarantine over", func() bool { return allVoting(b) })
	if time.Now().Before(end) {
		t.Fatal("B lifted the quarantine before its end")
	}
	// Later checks see no new SWAPDB: it stays voting.
	time.Sleep(500 * time.Millisecond)
	if !allVoting(b) {
		t.Fatalf("B: %+v, want every master voting once the quarantine ended", b.Masters())
	}
}

// Masters flushed before a new deployment starts (a common clean-up) are
// not held back: bootstrap lets them vote at once. A master whose marker
// says "ok" but that carries no record of an earlier check (an upgrade):
// one that ran FLUSHALL before is not quarantined (an upgrade would
// quarantine every master flushed at set-up at once); one that was a
// replica since it started is (its keys, marker included, may be another
// server's).
func TestKeyspaceFirstSight(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	for _, m := range masters {
		if _, err := m.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
	a := startEngine(t, masters, bootstrap)
	poll(t, "A: all voting on flushed new masters", func() bool { return allVoting(a) })
	a.Close()
	// Master 2 was a replica once; then the upgrade: no records.
	host, port, _ := strings.Cut(masters[0].Addr, ":")
	if _, err := masters[2].Do("REPLICAOF", host, port); err != nil {
		t.Fatal(err)
	}
	if _, err := masters[2].Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	for _, m := range masters {
		if _, err := m.Do("EVAL", "redis.call('SELECT', ARGV[1]) redis.call('SET', KEYS[2], 'ok') return redis.call('DEL', KEYS[1])", "2", quorum.SeenKey, quorum.MarkerKey, strconv.Itoa(quorum.MarkerDB)); err != nil {
			t.Fatal(err)
		}
	}
	b := startEngine(t, masters, bootstrap)
	poll(t, "B: masters 0 and 1 voting, 2 quarantined", func() bool {
		v := voting(b)
		return b.Masters()[2].Up && v[0] && v[1] && !v[2]
	})
	time.Sleep(300 * time.Millisecond)
	if v := voting(b); !v[0] || !v[1] {
		t.Fatalf("B: %+v, want masters 0 and 1 voting", b.Masters())
	}
}

// seen reads how many fields the monitor's record (SeenKey) has on m.
func seen(t *testing.T, m *redisproc.Server) string {
	t.Helper()
	v, err := m.Do("EVAL", "redis.call('SELECT', ARGV[1]) return redis.call('HLEN', KEYS[1])", "1", quorum.SeenKey, strconv.Itoa(quorum.MarkerDB))
	if err != nil {
		t.Fatalf("record on %s: %v", m.Addr, err)
	}
	return v
}

// A master whose ACL refuses INFO to lockproxy's user (as some managed
// Redis do) does not vote: its version cannot be read (batching's
// CheckVersion, on every pipeline connection), nor can a FLUSHDB on it be
// noticed. Each master's state names the permission to grant. (The
// keyspace check's own path for a refused INFO, which logs "refuses INFO
// inside scripts" and lets the marker vouch alone, is then not reached
// with an ACL; it stays for a server that refuses INFO to scripts only.)
func TestKeyspaceInfoRefused(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	for _, m := range masters {
		if _, err := m.Do("ACL", "SETUSER", "lp", "on", ">pw", "~*", "&*", "+@all", "-info"); err != nil {
			t.Fatal(err)
		}
	}
	e := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.MasterUsername, c.MasterPassword = "lp", "pw"
	})
	poll(t, "each master's state naming +info", func() bool {
		for _, m := range e.Masters() {
			if m.Up || m.Err == nil || !strings.Contains(m.Err.Error(), "needs +info") {
				return false
			}
		}
		return true
	})
	time.Sleep(300 * time.Millisecond) // more checks and redials: still none votes
	if allVoting(e) {
		t.Fatalf("masters whose version cannot be read vote: %+v", e.Masters())
	}
	for _, m := range e.Masters() {
		if m.Up {
			t.Fatalf("master %s is up although INFO is refused: %+v", m.Addr, m)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// A FLUSHDB is pushed to the monitor (CLIENT TRACKING): the master stops
// voting at once, not at the next check (an hour away here), and is then
// quarantined for it.
func TestKeyspaceFlushPushed(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	e := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.QuarantineCheck = time.Hour })
	poll(t, "all voting", func() bool { return allVoting(e) })
	for _, cmd := range [][]string{{"FLUSHDB"}, {"FLUSHALL"}} {
		i := map[string]int{"FLUSHDB": 0, "FLUSHALL": 1}[cmd[0]]
		if _, err := masters[i].Do(cmd...); err != nil {
			t.Fatal(err)
		}
		flushed := time.Now()
		for e.Masters()[i].Voting() {
			if time.Since(flushed) > time.Second {
				t.Fatalf("%s: master %d still voting 1s after it (the next check is an hour away)", cmd[0], i)
			}
			time.Sleep(100 * time.Microsecond)
		}
		t.Logf("%s: master %d stopped voting %v after it", cmd[0], i, time.Since(flushed))
		poll(t, "quarantined for it", func() bool {
			m := e.Masters()[i]
			return m.QuarantineWhy == quorum.WhyRestarted && m.QuarantinedUntil.Sub(flushed) > 1900*time.Millisecond
		})
	}
}

// A master that restarts with its data is a new process whose record is
// the old one's. With appendfsync always its data hold every write it
// acknowledged: with no sign that it was a replica, its marker "ok" stands
// and it votes again at its first check. With appendfsync everysec (or an
// RDB snapshot) they may predate locks it granted, and where CONFIG GET is
// refused lockproxy cannot tell: it is quarantined for max_ttl, as one
// that came back empty.
func TestKeyspacePersistentRestartVotes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, fsync string
		noConfig    bool // lockproxy's user may not run CONFIG GET
		votes       bool
	}{
		{"always", "always", false, true},
		{"everysec", "everysec", false, false},
		{"always, CONFIG GET refused", "always", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"--appendonly", "yes", "--appendfsync", tc.fsync}
			if tc.noConfig { // in its arguments: ACL SETUSER is not persisted
				args = append(args, "--user", "lp", "on", ">pw", "~*", "&*", "+@all", "-config")
			}
			m0, err := redisproc.Start(redisproc.Options{Dir: t.TempDir(), ExtraArgs: args})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m0.Stop() })
			masters := append([]*redisproc.Server{m0}, redisproc.ForTest(t, 2)...)
			opts := []func(*quorum.Config){bootstrap, func(c *quorum.Config) { c.MaxTTL = 20 * time.Second }}
			if tc.noConfig {
				for _, m := range masters[1:] {
					if _, err := m.Do("ACL", "SETUSER", "lp", "on", ">pw", "~*", "&*", "+@all", "-config"); err != nil {
						t.Fatal(err)
					}
				}
				opts = append(opts, func(c *quorum.Config) { c.MasterUsername, c.MasterPassword = "lp", "pw" })
			}
			e := startEngine(t, masters, opts...)
			poll(t, "all voting", func() bool { return allVoting(e) })
			poll(t, "the record on master 0", func() bool { return seen(t, m0) != "0" })
			if _, err := m0.Do("SET", "kept", "1"); err != nil {
				t.Fatal(err)
			}
			rewriteAOF(t, m0)
			if err := m0.Restart(); err != nil {
				t.Fatal(err)
			}
			poll(t, "master 0 loaded", func() bool { return loaded(m0) })
			if v, err := m0.Do("GET", "kept"); err != nil || v != "1" {
				t.Fatalf("a key written before the restart: %q %v, want 1 (the test needs the data kept)", v, err)
			}
			restarted := time.Now()
			if !tc.votes {
				poll(t, "master 0 quarantined for its restart", func() bool {
					m := e.Masters()[0]
					return m.QuarantineWhy == quorum.WhyRestarted && m.QuarantinedUntil.Sub(restarted) > 19*time.Second
				})
				if m := marker(t, m0); !strings.HasPrefix(m, "q:") {
					t.Fatalf("marker on master 0: %q, want the quarantine", m)
				}
				return
			}
			for !allVoting(e) {
				if time.Since(restarted) > 5*time.Second {
					t.Fatalf("master 0 not voting 5s after a restart that kept its data (max_ttl 20s): %+v", e.Masters()[0])
				}
				time.Sleep(2 * time.Millisecond)
			}
			if m := marker(t, m0); m != "ok" {
				t.Fatalf("marker on master 0: %q, want ok", m)
			}
		})
	}
}

// rewriteAOF has m write all its data to a new AOF, on disk once it
// finished: a restart then reloads it whatever appendfsync says, and the
// test does not depend on when the last second was fsynced.
func rewriteAOF(t *testing.T, m *redisproc.Server) {
	t.Helper()
	poll(t, "BGREWRITEAOF accepted on "+m.Addr, func() bool {
		_, err := m.Do("BGREWRITEAOF")
		return err == nil
	})
	poll(t, "the AOF rewrite done on "+m.Addr, func() bool {
		info, err := m.Do("INFO", "persistence")
		return err == nil && strings.Contains(info, "aof_rewrite_in_progress:0") &&
			strings.Contains(info, "aof_rewrite_scheduled:0") && strings.Contains(info, "aof_last_bgrewrite_status:ok")
	})
}

// loaded reports whether m answers and has loaded its data.
func loaded(m *redisproc.Server) bool {
	info, err := m.Do("INFO", "persistence")
	return err == nil && strings.Contains(info, "loading:0")
}

// A master whose ACL refuses CLIENT TRACKING to lockproxy's user keeps
// voting (flushes are noticed at the checks), is said so once, and is not
// redialled at every check: the flush watch backs off.
func TestKeyspaceFlushWatchRefused(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	for _, m := range masters {
		if _, err := m.Do("ACL", "SETUSER", "lp", "on", ">pw", "~*", "&*", "+@all", "-client|tracking"); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var logs bytes.Buffer
	e := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.MasterUsername, c.MasterPassword = "lp", "pw"
		c.QuarantineCheck = 50 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	})
	const warning = "flush watch (CLIENT TRACKING"
	poll(t, "all voting and the warning for each master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return allVoting(e) && strings.Count(logs.String(), warning) == 3
	})
	before := connections(t, masters[0])
	for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(time.Millisecond) {
		if !allVoting(e) {
			t.Fatalf("%+v: want every master voting", e.Masters())
		}
	}
	// 40 checks: a dial at each would be 40 connections; the back-off
	// (1s, then 2s) allows 2.
	if n := connections(t, masters[0]) - before; n > 3 {
		t.Fatalf("master 0 received %d connections in 2s, want at most 3 (the refused flush watch redialled at every check)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(logs.String(), warning); n != 3 {
		t.Fatalf("the warning logged %d times, want once per master:\n%s", n, logs.String())
	}
}

// connections is m's total_connections_received.
func connections(t *testing.T, m *redisproc.Server) int {
	t.Helper()
	info, err := m.Do("INFO", "stats")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(info, "total_connections_received:")
	n, err := strconv.Atoi(strings.TrimSpace(rest[:strings.IndexByte(rest, '\n')]))
	if err != nil {
		t.Fatalf("total_connections_received in %q: %v", info, err)
	}
	return n
}
