package analyze

import (
	"os"
	"testing"
)

// TestDeletedReply: a release whose yes reply where it deleted the lock
// differs from its yes reply where a count is left reports the deleting
// one (Semantics.DeletedReply), so that the engine never lets it outvote
// a count left while a quorum may still hold the token (quorum's
// releaseYes). One reply for both, or a release that only deletes,
// reports none: the client hears the same whichever masters answer.
func TestDeletedReply(t *testing.T) {
	file := func(name string) string {
		b, err := os.ReadFile("testdata/redisson/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct{ name, body, want string }{
		{"Redisson 3.24's unlock", file("unlockInner-3.24"), ":1"},
		{"Redisson 3.24's spin lock unlock", file("spinlock-unlockInner-3.24"), ":1"},
		{"Redisson 2.6's unlock (absent-is-yes)", file("unlockInner-2.2.4"), ":1"},
		{"a re-entrant release answering the count left",
			`if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end
			 local c = redis.call('hincrby', KEYS[1], ARGV[1], -1)
			 if c > 0 then return c end
			 redis.call('del', KEYS[1]); return 0`,
			":0"},
		{"a re-entrant release answering 1 either way",
			`if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 0 end
			 local c = redis.call('hincrby', KEYS[1], ARGV[1], -1)
			 if c <= 0 then redis.call('del', KEYS[1]) end
			 return 1`,
			""},
		{"a compare-and-delete", `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`, ""},
		{"a compare-and-delete answering 1 where absent",
			`if redis.call('exists', KEYS[1]) == 0 then return 1 end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 1 end
			 return 0`,
			":1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			got := ""
			if sem.DeletedReply != nil {
				got = sem.DeletedReply.String()
			}
			if got != c.want {
				t.Errorf("DeletedReply %q, want %q (%s)", got, c.want, sem)
			}
		})
	}
}
