package proxy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// A master restarted from an RDB snapshot taken before A's lock was
// granted (a crash with RDB persistence, or appendfsync everysec losing
// its last second) comes back with its marker "ok" and lockproxy's record
// of the old process, but without A's key: it has lost the lock as surely
// as an empty one. Its votes must not count for max_ttl, or B wins k on it
// and the two masters A never reached.
func TestKeyspaceStaleSnapshotRestartCannotDoubleGrant(t *testing.T) {
	c := startCluster(t, 5, withQuarantine(time.Minute))
	c.waitVoting(5)
	// Every master has been checked: the snapshot carries the marker "ok"
	// and the record of master 0's process.
	if m := do(t, c.masters[0], "EVAL", "redis.call('SELECT', 1) return redis.call('GET', KEYS[1])", "1", quorum.MarkerKey); m != "ok" {
		t.Fatalf("marker on master 0: %q, want ok in the snapshot", m)
	}
	do(t, c.masters[0], "SAVE")
	holdOnMajority(t, c, 30*time.Second)
	if err := c.masters[0].Restart(); err != nil { // SIGKILL, then loads dump.rdb
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		info, err := c.masters[0].Do("INFO", "persistence")
		return err == nil && strings.Contains(info, "loading:0")
	}, "master 0 loaded its snapshot")
	if got := c.onMasters("k")[0]; got != "(nil)" {
		t.Fatalf("master 0 holds A's lock after the restart (%q): the snapshot was not older than the lock", got)
	}
	// Let the monitor (a check every 50ms) see the reconnection and check.
	waitForOrNot(func() bool {
		st := c.engine.Masters()[0]
		return st.Up && (st.Voting() || st.QuarantineWhy == quorum.WhyRestarted)
	}, 5*time.Second)
	ok, err := c.client().SetNX(context.Background(), "k", "tokB", 10*time.Second).Result()
	if ok {
		t.Fatalf("B got k while A holds it (masters now: %v): master 0, restarted from a snapshot older than the lock, voted", c.onMasters("k"))
	}
	if err != nil {
		t.Fatalf("B's acquire: %v, want nil (masters 1 and 2 hold A's lock; 0 does not vote)", err)
	}
	if st := c.engine.Masters()[0]; st.QuarantinedUntil.IsZero() || st.QuarantineWhy != quorum.WhyRestarted {
		t.Fatalf("master 0: %+v, want quarantined as one that lost its data", st)
	}
}
