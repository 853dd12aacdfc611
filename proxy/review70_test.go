package proxy_test

import (
	"testing"
)

// TestH70HashCountIsNoToken: A holds a Redisson-shaped hash lock (field
// its token, value the count "1"). B's release in helper-68's force band,
// with the token "1", must not pass for A: lockproxy_holds matched any
// hash value, so the guard dumped nothing and the DEL stood.
func TestH70HashCountIsNoToken(t *testing.T) {
	c := startCluster(t, 3)
	for i, m := range c.masters {
		if _, err := m.Do("HSET", "k", "uuidA:1", "1"); err != nil {
			t.Fatalf("HSET on master %d: %v", i, err)
		}
		if _, err := m.Do("PEXPIRE", "k", "20000"); err != nil {
			t.Fatalf("PEXPIRE on master %d: %v", i, err)
		}
	}
	b := c.client()
	rep, err := h69Eval(t, b, releaseForceBand, []string{"k"}, "1", "force")
	t.Logf("B's release with token \"1\" answered %v %v", rep, err)
	for i, m := range c.masters {
		if typ, _ := m.Do("TYPE", "k"); typ != "hash" {
			t.Errorf("master %d: A's hash lock is %q after B's release (deleted)", i, typ)
		}
	}
}
