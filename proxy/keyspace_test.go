package proxy_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// A master whose keyspace an operator empties or replaces without
// restarting it (FLUSHDB, SWAPDB, REPLICAOF and back, CONFIG RESETSTAT to
// hide it): its connections never break and its marker in database 1 may
// survive, so only what the master reports about itself (INFO
// commandstats, replication, run_id) tells lockproxy it may have lost lock
// keys. Each case: A holds k on exactly a bare majority (masters 0-2), the
// operator's command runs on master 0, then B must not get k while A
// holds it.

// keyspaceOps are the operator sequences, run on master 0; other is
// master 3, a lockproxy master that never held A's lock.
var keyspaceOps = []struct {
	name string
	run  func(t *testing.T, m0, other *redisproc.Server)
}{
	{"FLUSHDB", func(t *testing.T, m0, _ *redisproc.Server) { do(t, m0, "FLUSHDB") }},
	{"FLUSHDB ASYNC from a script", func(t *testing.T, m0, _ *redisproc.Server) {
		do(t, m0, "EVAL", "redis.call('FLUSHDB', 'ASYNC') return 1", "0")
	}},
	{"FLUSHALL", func(t *testing.T, m0, _ *redisproc.Server) { do(t, m0, "FLUSHALL") }},
	{"SWAPDB 0 5", func(t *testing.T, m0, _ *redisproc.Server) { do(t, m0, "SWAPDB", "0", "5") }},
	{"SWAPDB 0 1", func(t *testing.T, m0, _ *redisproc.Server) { do(t, m0, "SWAPDB", "0", "1") }},
	{"CONFIG RESETSTAT then FLUSHDB", func(t *testing.T, m0, _ *redisproc.Server) {
		do(t, m0, "CONFIG", "RESETSTAT")
		do(t, m0, "FLUSHDB")
	}},
	{"FLUSHDB then CONFIG RESETSTAT", func(t *testing.T, m0, _ *redisproc.Server) {
		do(t, m0, "FLUSHDB")
		do(t, m0, "CONFIG", "RESETSTAT")
	}},
	{"REPLICAOF another master then NO ONE", func(t *testing.T, m0, other *redisproc.Server) {
		replicate(t, m0, other)
		do(t, m0, "REPLICAOF", "NO", "ONE")
	}},
	{"REPLICAOF then NO ONE then CONFIG RESETSTAT", func(t *testing.T, m0, other *redisproc.Server) {
		replicate(t, m0, other)
		do(t, m0, "REPLICAOF", "NO", "ONE")
		do(t, m0, "CONFIG", "RESETSTAT")
	}},
}

// replicate makes m a replica of primary and waits until it synced (a
// full sync: m's data is now primary's, marker included).
func replicate(t *testing.T, m, primary *redisproc.Server) {
	t.Helper()
	do(t, primary, "CONFIG", "SET", "repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(primary.Addr, ":")
	do(t, m, "REPLICAOF", host, port)
	for deadline := time.Now().Add(5 * time.Second); ; {
		info := do(t, m, "INFO", "replication")
		if strings.Contains(info, "master_link_status:up") {
			return
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(m.LogFile)
			t.Fatalf("%s never synced from %s: %s\n%s", m.Addr, primary.Addr, info, log)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// do runs a command on m, which must not fail.
func do(t *testing.T, m *redisproc.Server, args ...string) string {
	t.Helper()
	out, err := m.Do(args...)
	if err != nil {
		t.Fatalf("%s on %s: %v", strings.Join(args, " "), m.Addr, err)
	}
	return out
}

// holdOnMajority leaves A's lock on masters 0-2 only, as an acquisition
// made while masters 3 and 4 were cut off leaves it (a paused master
// would still receive the SET queued for it when it resumes).
func holdOnMajority(t *testing.T, c *cluster, ttl time.Duration) {
	t.Helper()
	c.holdOn("k", "tokA", ttl, 0, 1, 2)
	if ok, err := c.client().SetNX(context.Background(), "k", "tokB", ttl).Result(); err != nil || ok {
		t.Fatalf("B's acquire while A holds k on 3 masters: %v %v, want nil", ok, err)
	}
}

func TestKeyspaceLossWithoutRestartCannotDoubleGrant(t *testing.T) {
	for _, op := range keyspaceOps {
		t.Run(op.name, func(t *testing.T) {
			c := startCluster(t, 5, withQuarantine(time.Minute))
			c.waitVoting(5)
			holdOnMajority(t, c, 30*time.Second)
			op.run(t, c.masters[0], c.masters[3])
			if got := c.onMasters("k")[0]; got != "(nil)" {
				t.Fatalf("master 0 still holds A's lock (%q): the sequence lost nothing", got)
			}
			// Give the monitor (a check every 50ms) time to quarantine it
			// (a flush's push stops its votes at once, as unchecked).
			waitForOrNot(func() bool { return c.engine.Masters()[0].QuarantineWhy == quorum.WhyRestarted }, 2*time.Second)
			ok, err := c.client().SetNX(context.Background(), "k", "tokB", 10*time.Second).Result()
			if ok {
				t.Fatalf("B got k while A holds it (masters now: %v): master 0 voted with A's key gone", c.onMasters("k"))
			}
			if err != nil {
				t.Fatalf("B's acquire: %v, want nil (masters 1 and 2 hold A's lock; 0 does not vote)", err)
			}
			st := c.engine.Masters()[0]
			if st.QuarantinedUntil.IsZero() || st.QuarantineWhy != quorum.WhyRestarted {
				t.Fatalf("master 0: %+v, want quarantined as one that lost its data", st)
			}
		})
	}
}

// waitForOrNot polls cond until it holds or d has passed.
func waitForOrNot(cond func() bool, d time.Duration) {
	deadline := time.Now().Add(d)
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond)
	}
}

// TestKeyspaceCommandsNeverReachMasters: no command a client sends
// through lockproxy, alone, inside MULTI or from a script, may empty,
// swap, move or replace a master's keys, or change what the monitor reads
// of the master (CONFIG RESETSTAT): each is refused and the masters see
// nothing.
func TestKeyspaceCommandsNeverReachMasters(t *testing.T) {
	c := startCluster(t, 3)
	ctx := context.Background()
	cl := c.client()
	c.holdOn("k", "v", time.Minute, 0, 1, 2)
	before := make([]string, len(c.masters))
	for i, m := range c.masters {
		before[i], _ = m.Do("INFO", "commandstats")
	}
	for _, args := range [][]any{
		{"FLUSHDB"}, {"FLUSHDB", "ASYNC"}, {"FLUSHALL", "SYNC"}, {"SWAPDB", "0", "1"}, {"SELECT", "1"},
		{"MOVE", "k", "1"}, {"COPY", "k", "k2", "DB", "1"}, {"RENAME", "k", "k2"}, {"RENAMENX", "k", "k2"},
		{"OBJECT", "FREQ", "k"}, {"RESTORE", "k", "0", "x", "REPLACE"}, {"MIGRATE", "127.0.0.1", "1", "k", "0", "100"},
		{"DUMP", "k"}, {"REPLICAOF", "127.0.0.1", "1"}, {"SLAVEOF", "NO", "ONE"}, {"FAILOVER"},
		{"CONFIG", "RESETSTAT"}, {"DEBUG", "RELOAD"}, {"FUNCTION", "FLUSH"}, {"FCALL", "f", "0"},
		{"EVAL", `redis.call("select", 1) return redis.call("del", KEYS[1])`, 1, "k"},
		{"EVAL", `return redis.call("swapdb", 0, 1)`, 0},
		{"EVAL", `return redis.call("move", KEYS[1], 1)`, 1, "k"},
		{"EVAL", `return redis.call("flushdb")`, 0},
		{"EVAL", `return redis.call("config", "resetstat")`, 0},
	} {
		if _, err := cl.Do(ctx, args...).Result(); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
	// Inside MULTI, with and without WATCH.
	out, _ := c.exchange(encode("MULTI")+encode("FLUSHDB")+encode("SWAPDB", "0", "1")+encode("EXEC")+
		encode("WATCH", "k")+encode("GET", "k")+encode("MULTI")+encode("FLUSHDB")+encode("EXEC")+encode("QUIT"), 5*time.Second)
	if strings.Count(out, "-ERR unknown or unsupported command") != 3 || strings.Count(out, "-EXECABORT") != 2 {
		t.Errorf("FLUSHDB and SWAPDB inside MULTI: %q, want them refused", out)
	}
	if got := c.onMasters("k"); count(got, "v") != 3 {
		t.Fatalf("the key on the masters: %v, want it everywhere", got)
	}
	for i, m := range c.masters {
		after, _ := m.Do("INFO", "commandstats")
		for _, name := range []string{"flushdb", "flushall", "swapdb", "select", "move", "copy", "rename", "renamenx",
			"object|freq", "restore", "migrate", "dump", "replicaof", "slaveof", "failover", "config|resetstat",
			"debug", "function|flush", "fcall", "del", "eval", "multi", "exec"} {
			if b, a := cmdCalls(before[i], name), cmdCalls(after, name); a != b {
				t.Errorf("master %d ran %s %d times since the test started", i, strings.ToUpper(name), a-b)
			}
		}
	}
}

// cmdCalls is the call count of name in an INFO commandstats answer.
func cmdCalls(info, name string) int {
	_, rest, ok := strings.Cut(info, "cmdstat_"+name+":calls=")
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
	return n
}
