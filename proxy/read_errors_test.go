package proxy_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestReadErrorsNotTakenForAbsent: a quorum read whose masters answered
// errors cannot tell whether the key is held, so the client gets their
// error, which says what failed, not nil ("not held"). Before, a master
// user whose ACL lacks TYPE (docs/operations.md asked for less than
// lockproxy uses) made GET answer nil for a held lock, and a GET of a list
// answered nil where Redis answers WRONGTYPE.
func TestReadErrorsNotTakenForAbsent(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	for _, m := range masters {
		if _, err := m.Do("ACL", "SETUSER", "lp", "on", ">pw", "~*", "&*", "+@all", "-type"); err != nil {
			t.Fatal(err)
		}
	}
	c := startFront(t, masters, false, func(_ *proxy.Config, qc *quorum.Config) {
		qc.MasterUsername, qc.MasterPassword = "lp", "pw"
	})
	c.waitUp(3)
	c.waitVoting(3)
	r := dialRaw(t, c.addr)
	if got := r.do("SET", "lock", "tok", "NX", "PX", "10000"); got != "+OK\r\n" {
		t.Fatalf("SET NX = %q, want +OK", got)
	}
	if got := r.do("GET", "lock"); !strings.HasPrefix(got, "-") || !strings.Contains(got, "NOPERM") && !strings.Contains(got, "can't run this command") {
		t.Errorf("GET of a held lock with TYPE refused to lockproxy's user = %q, want the masters' permission error (not nil: the lock is held)", got)
	}

}

// TestReadOfOtherTypesAsRedis: GET, HGET and HEXISTS of a key of the wrong
// type answer Redis's WRONGTYPE (they answered nil and 0), and PTTL/TTL of a lock that is not a
// string (Redisson's hash) answer its remaining time as on one Redis (they
// answered -2, "no such key", while EXISTS and HGET said it was held).
func TestReadOfOtherTypesAsRedis(t *testing.T) {
	c := startCluster(t, 3)
	r := dialRaw(t, c.addr)
	for _, m := range c.masters {
		if _, err := m.Do("RPUSH", "list", "x"); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range [][]string{{"GET", "list"}, {"HGET", "list", "f"}, {"HEXISTS", "list", "f"}} {
		if got := r.do(cmd...); !strings.HasPrefix(got, "-WRONGTYPE") {
			t.Errorf("%q of a list on every master = %q, want -WRONGTYPE as Redis", cmd, got)
		}
	}
	// A hash lock on a quorum (2 of 3), as Redisson's tryLockInner leaves it.
	for _, m := range c.masters[:2] {
		if _, err := m.Do("HSET", "hlock", "uuid:1", "1"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Do("PEXPIRE", "hlock", "30000"); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.do("EXISTS", "hlock"); got != ":1\r\n" {
		t.Fatalf("EXISTS of a hash lock on a quorum = %q, want :1", got)
	}
	got := r.do("PTTL", "hlock")
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(got, ":"), "\r\n"))
	if err != nil || n < 25000 || n > 30000 {
		t.Errorf("PTTL of a hash lock held by a quorum for 30s = %q, want about 30000 (as Redis)", got)
	}
	if got := r.do("TTL", "hlock"); got != ":29\r\n" && got != ":30\r\n" {
		t.Errorf("TTL of a hash lock held by a quorum for 30s = %q, want 29 or 30", got)
	}
	// Two holders' hashes: X's on a quorum (10s and 12s), Y's leftover on
	// the third master (30s). The quorum holds X's for 10s; counting every
	// hash as one value would answer 12s, longer than any quorum holds it.
	for i, ttl := range []string{"10000", "12000", "30000"} {
		field := "uuid-x:1"
		if i == 2 {
			field = "uuid-y:1"
		}
		if _, err := c.masters[i].Do("HSET", "mixed", field, "1"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.masters[i].Do("PEXPIRE", "mixed", ttl); err != nil {
			t.Fatal(err)
		}
	}
	// With master 0 (X's 10s copy) paused, the two answers are X's 12s and
	// Y's 30s: no quorum holds one holder's hash among them.
	c.masters[0].Pause()
	got = r.do("PTTL", "mixed")
	c.masters[0].Resume()
	if n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(got, ":"), "\r\n")); err != nil || n > 10000 {
		t.Errorf("PTTL of a hash lock held by a quorum for 10s beside another holder's 30s copy = %q, want at most 10000", got)
	}
	// On a minority only: no quorum holds it.
	if _, err := c.masters[0].Do("HSET", "minority", "uuid:1", "1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.masters[0].Do("PEXPIRE", "minority", "30000"); err != nil {
		t.Fatal(err)
	}
	if got := r.do("PTTL", "minority"); got != ":-2\r\n" {
		t.Errorf("PTTL of a hash on 1 master of 3 = %q, want -2", got)
	}
}
