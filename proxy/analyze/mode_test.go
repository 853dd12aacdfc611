package analyze

import (
	"strings"
	"testing"
)

// redlockRbLock is redlock-rb's lock script: a lock call passes ARGV[3] =
// "yes" (take a free key, or re-take the caller's own), an extend call
// "no" (re-set the TTL of the caller's own lock only).
const redlockRbLock = `if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") or redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2])
end`

// TestModeArgumentWidens: a script that compares an argument with one of
// its constants to choose between taking a free key and only re-setting
// the caller's own lock is understood as the wider mode, the narrower one
// declining where the wider takes a free key. Before, the probes' numbers
// saw only the narrower mode and the script was refused: "with ARGV[3] =
// "yes" the script answers +OK, where otherwise it answers nil".
func TestModeArgumentWidens(t *testing.T) {
	for _, c := range []struct{ name, body, want string }{
		{"redlock-rb lock", redlockRbLock,
			"acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=status \"OK\" no=nil"},
		{"the flag compared first, with if/else",
			`local v = redis.call('get', KEYS[1])
if v == ARGV[1] then redis.call('pexpire', KEYS[1], ARGV[2]) return 1 end
if ARGV[3] == 'new' and not v then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`,
			"acquire-or-extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms yes=integer 1 no=:0"},
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

// TestModeArgumentLookalikesRefused: the wider mode is analyzed as any
// script is, and every other value of the argument must do the same or
// decline: a mode that is unsafe in either direction stays refused.
func TestModeArgumentLookalikesRefused(t *testing.T) {
	for _, c := range []struct{ name, body string }{
		{"the wider mode sets no expiry",
			`if (redis.call("exists", KEYS[1]) == 0 and ARGV[3] == "yes") then return redis.call("set", KEYS[1], ARGV[1]) end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`},
		{"the wider mode extends whoever holds it",
			`if ARGV[3] == "yes" and redis.call("exists", KEYS[1]) == 1 then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`},
		{"the wider mode deletes whoever holds it",
			`if ARGV[3] == "yes" then redis.call("del", KEYS[1]) end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`},
		{"the narrower mode writes a free key without expiry",
			`if redis.call("exists", KEYS[1]) == 0 then
  if ARGV[3] == "yes" then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end
  redis.call("set", KEYS[1], ARGV[1]) return nil
end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) end`},
		{"the wider mode counts",
			`if ARGV[3] == "yes" then local n = redis.call("incr", KEYS[1]) redis.call("pexpire", KEYS[1], ARGV[2]) return n end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err == nil {
				t.Fatalf("understood as %s; want refused", sem)
			}
			t.Logf("refused: %v", err)
		})
	}
}
