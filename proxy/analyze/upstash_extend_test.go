package analyze

import (
	"strings"
	"testing"
)

// @upstash/lock 0.2.1's extend, as the library sends it: EXPIRE of the
// key's TTL (whole seconds, rounded) plus ARGV[2] seconds when the token
// matches. It is an additive extend in seconds; it was refused because
// its expiry, matched by no rule, read as a constant that changed with
// every probe value ("with 2 KEYS the script behaves otherwise than with
// 1"), a reason that was not its own. Understood as additive, the proxy
// refuses it for what it is (proxy/catalog: a TTL plus the remaining one
// cannot be bounded by max_ttl).
const upstashExtend = `
      -- Check if the current UUID still holds the lock
      if redis.call("get", KEYS[1]) ~= ARGV[1] then
        return 0
      end

      -- Get the current TTL and extend it by the specified amount
      local ttl = redis.call("ttl", KEYS[1])
      if ttl > 0 then
        return redis.call("expire", KEYS[1], ttl + ARGV[2])
      else
        return 0
      end
     `

func TestAdditiveExtendInSeconds(t *testing.T) {
	sem, err := Analyze([]byte(upstashExtend), Options{})
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	if sem.Kind != Extend || sem.TTL == nil || sem.TTL.Arg != (Arg{Index: 2}) || sem.TTL.Unit != Seconds || !sem.TTL.AddsRemaining {
		t.Fatalf("got %v, want an extend whose TTL is ARGV[2] s plus the remaining TTL", sem)
	}
	if sem.Token.Arg != (Arg{Index: 1}) {
		t.Fatalf("token %v, want ARGV[1]", sem.Token)
	}
}

// Lookalikes of the additive extend in seconds that must stay refused:
// each could extend a lock the caller does not hold, or set a TTL that is
// not the argument plus the remaining one.
func TestAdditiveExtendInSecondsLookalikes(t *testing.T) {
	for name, body := range map[string]string{
		"no token": `local ttl = redis.call("ttl", KEYS[1])
if ttl > 0 then return redis.call("expire", KEYS[1], ttl + ARGV[2]) end
return 0`,
		"token checked only under 20 s left": `local ttl = redis.call("ttl", KEYS[1])
if ttl < 20 and redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
if ttl > 0 then return redis.call("expire", KEYS[1], ttl + ARGV[2]) end
return 0`,
		"token checked only over 20 s left": `local ttl = redis.call("ttl", KEYS[1])
if ttl > 20 and redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
if ttl > 0 then return redis.call("expire", KEYS[1], ttl + ARGV[2]) end
return 0`,
		"remaining TTL added in ms to a TTL in s": `if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = redis.call("pttl", KEYS[1])
if ttl > 0 then return redis.call("expire", KEYS[1], ttl + ARGV[2]) end
return 0`,
		"doubles the remaining TTL": `if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = redis.call("ttl", KEYS[1])
if ttl > 0 then return redis.call("expire", KEYS[1], 2 * ttl + ARGV[2]) end
return 0`,
		"takes a free key": `local v = redis.call("get", KEYS[1])
if v and v ~= ARGV[1] then return 0 end
local ttl = redis.call("ttl", KEYS[1])
if ttl < 0 then ttl = 0 end
redis.call("set", KEYS[1], ARGV[1], "EX", ttl + ARGV[2])
return 1`,
	} {
		sem, err := Analyze([]byte(body), Options{})
		if err == nil && name != "takes a free key" {
			t.Errorf("%s: understood as %v, want refused", name, sem)
			continue
		}
		if err == nil && (sem.Kind != AcquireOrExtend || !sem.TTL.AddsRemaining) {
			t.Errorf("%s: understood as %v", name, sem)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "script refused") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
