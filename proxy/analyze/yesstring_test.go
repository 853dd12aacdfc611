package analyze

import (
	"strings"
	"testing"
)

// TestYesStringCarriesArgument: scripts that answer the token, or a string
// built from an argument, when they take or release the lock are
// understood, with "any bulk string" as the yes rule. Before, the rule was
// the probe's exact text, which differs with every call (and between the
// analyses with one and two KEYS, which refused the script: "with 2 KEYS
// the script behaves otherwise than with 1").
func TestYesStringCarriesArgument(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"acquire answering the token",
			`if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end return nil`,
			"acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=bulk (any) no=nil"},
		{"release answering the token",
			`if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]) return ARGV[1] end return nil`,
			"release string keys=KEYS[1] token=ARGV[1] yes=bulk (any) no=nil"},
		{"acquire answering a name built from an argument (Laravel funnel's reply, read with GET)",
			`if not redis.call('get', KEYS[1]) then redis.call('set', KEYS[1], ARGV[3], 'EX', ARGV[2]) return ARGV[1] .. '1' end`,
			"acquire string keys=KEYS[1] token=ARGV[3] ttl=ARGV[2] s yes=bulk (any) no=nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !strings.HasPrefix(sem.String(), c.want) {
				t.Fatalf("understood as %s; want %s", sem, c.want)
			}
		})
	}
}

// TestYesStringLookalikesRefused: a string yes rule must still tell the
// yes replies from the no replies, and the effects are judged as before.
func TestYesStringLookalikesRefused(t *testing.T) {
	for _, c := range []struct{ name, body, reason string }{
		{"answers the token whether it took the lock or not",
			`redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) return ARGV[1]`,
			"no reply rule tells"},
		{"answers a string when held too",
			`if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return ARGV[1] end return 'held'`,
			""},
		{"answers the holder's token when held",
			`local v = redis.call('get', KEYS[1]) if not v then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return ARGV[1] end return v`,
			"no reply rule tells"},
		{"takes a lock held by another, answering the token",
			`redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return ARGV[1]`,
			""},
		{"deletes whoever holds it, answering the token",
			`if redis.call('get', KEYS[1]) then redis.call('del', KEYS[1]) return ARGV[1] end return nil`,
			""},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err == nil && !sem.Force {
				t.Fatalf("accepted as %s", sem)
			}
			if err == nil {
				// A force operation is a class of its own, understood with an
				// integer reply before (rueidislock's
				// fcqms, python-redis-lock's reset): it is not a lookalike
				// of a token lock, and the proxy treats it as force.
				t.Logf("understood as a force operation: %s", sem)
				return
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("refused with %v; want the reason to say %q", err, c.reason)
			}
			t.Logf("refused: %v", err)
		})
	}
}
