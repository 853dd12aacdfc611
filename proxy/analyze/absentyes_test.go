package analyze

import (
	"strings"
	"testing"
)

// TestAbsentAnswersYesLookalikes: a release may answer its success reply
// where there is no lock (Redisson before 3.10.6, TestVersionScripts)
// only when that reply tells nothing else apart: it must still tell every
// other "not released" from a release, it must be the reply of a release
// that deleted the lock, and the script must write nothing there (the
// masters that lack the lock do not run it, quorum.WrapAbsentYes).
func TestAbsentAnswersYesLookalikes(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"a string lock's compare-and-delete answering 1 when absent",
			`if redis.call('exists', KEYS[1]) == 0 then return 1 end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 1 end
			 return 0`,
			`release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0 absent-is-yes`},
		{"answering a stranger as its last release",
			`if redis.call('exists', KEYS[1]) == 0 then redis.call('publish', KEYS[2], ARGV[1]); return 1 end
			 if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return 1 end
			 local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
			 if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end
			 redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1`,
			"refused"},
		{"re-creating the lock where it is absent",
			`if redis.call('exists', KEYS[1]) == 0 then redis.call('hincrby', KEYS[1], ARGV[3], 1); return 1 end
			 if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
			 local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
			 if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end
			 redis.call('del', KEYS[1]); return 1`,
			"refused"},
		{"answering where it is absent what no release answers",
			`if redis.call('exists', KEYS[1]) == 0 then return 2 end
			 if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
			 local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
			 if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end
			 redis.call('del', KEYS[1]); return 1`,
			"refused"},
		{"deleting another key where it is absent",
			`if redis.call('exists', KEYS[1]) == 0 then redis.call('del', KEYS[3]); redis.call('publish', KEYS[2], ARGV[1]); return 1 end
			 if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end
			 local c = redis.call('hincrby', KEYS[1], ARGV[3], -1)
			 if c > 0 then redis.call('pexpire', KEYS[1], ARGV[2]); return 0 end
			 redis.call('del', KEYS[1]); redis.call('publish', KEYS[2], ARGV[1]); return 1`,
			"refused"},
		{"counting where it is absent",
			`if redis.call('exists', KEYS[1]) == 0 then redis.call('incr', KEYS[2]); return 1 end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 1 end
			 return 0`,
			"refused"},
		{"an error where it is absent",
			`if redis.call('exists', KEYS[1]) == 0 then return redis.error_reply('no lock') end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 1 end
			 return 0`,
			`release string keys=KEYS[1] token=ARGV[1] yes=integer 1 no=:0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if c.want == "refused" {
				if err == nil {
					t.Fatalf("understood as %s; want a refusal", sem)
				}
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if got := sem.String(); !strings.HasPrefix(got, c.want) {
				t.Fatalf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}
