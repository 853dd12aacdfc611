package quorum_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// A check reads the master's persistence settings (CONFIG GET) before its
// script runs. A master restarted between the two, into a process that
// loaded an RDB snapshot (appendonly no), got the script (rueidis resends
// it on the new connection) with the old process's settings, appendfsync
// always: the restart looked safe, and the script's record then named the
// new process, so no later check saw the restart either. The script reads
// the new process's aof_enabled itself.
func TestKeyspaceRestartBetweenConfigAndScript(t *testing.T) {
	dir := t.TempDir()
	m0, err := redisproc.Start(redisproc.Options{Dir: dir, ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m0.Stop() })
	masters := append([]*redisproc.Server{m0}, redisproc.ForTest(t, 2)...)
	e := startEngine(t, masters, bootstrap, func(c *quorum.Config) { c.MaxTTL = 20 * time.Second })
	poll(t, "all voting", func() bool { return allVoting(e) })
	poll(t, "the record on master 0", func() bool { return seen(t, m0) != "0" })
	if _, err := m0.Do("SAVE"); err != nil { // marker "ok", the record: durable
		t.Fatal(err)
	}
	var armed, done atomic.Bool
	var next atomic.Pointer[redisproc.Server]
	armed.Store(true)
	quorum.SetMarkerHook(func(en *quorum.Engine, master int, mode string) {
		if en != e || master != 0 || mode != "check" || !armed.CompareAndSwap(true, false) {
			return
		}
		// After this check's CONFIG GET, before its script.
		m0.Kill()
		m, err := redisproc.Start(redisproc.Options{Dir: dir, Port: m0.Port, ExtraArgs: []string{"--appendonly", "no"}})
		if err != nil {
			t.Error(err)
		} else {
			next.Store(m)
		}
		done.Store(true)
	})
	t.Cleanup(func() { quorum.SetMarkerHook(nil) })
	poll(t, "master 0 restarted from its snapshot", done.Load)
	if m := next.Load(); m != nil {
		t.Cleanup(func() { m.Stop() })
	} else {
		t.FailNow()
	}
	restarted := time.Now()
	poll(t, "master 0 checked after its restart", func() bool {
		m := e.Masters()[0]
		return m.Voting() || m.QuarantineWhy == quorum.WhyRestarted
	})
	time.Sleep(300 * time.Millisecond) // more checks: none may lift it
	if m := e.Masters()[0]; m.QuarantineWhy != quorum.WhyRestarted || m.QuarantinedUntil.Sub(restarted) < 19*time.Second {
		t.Fatalf("master 0 after a restart from an RDB snapshot: %+v, want quarantined for max_ttl (20s)", m)
	}
}
