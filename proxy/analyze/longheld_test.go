package analyze

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
	"time"
)

// redlockUniversalAtomicExtend is redlock-universal 0.8.5's ATOMIC_EXTEND
// (dist/index.cjs, ATOMIC_EXTEND_SCRIPT after its .trim()), byte for byte:
// the library sends it with EVALSHA of this text's sha1.
const redlockUniversalAtomicExtend = `local current_ttl = redis.call("PTTL", KEYS[1])
local min_ttl = tonumber(ARGV[2])
local new_ttl = tonumber(ARGV[3])

-- Check if key exists
if current_ttl == -2 then
  return {-1, -2}  -- Key doesn't exist
end

-- Check if we have enough time remaining for safe extension
if current_ttl < min_ttl then
  return {0, current_ttl}  -- Too late, include actual TTL for logging
end

-- Check value and extend atomically
local current_value = redis.call("GET", KEYS[1])
if current_value == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], new_ttl)
  return {1, current_ttl}  -- Success with original TTL
else
  return {-1, current_ttl}  -- Value mismatch (lock stolen)
end`

// guardHead is ATOMIC_EXTEND's guard: nothing when less than ARGV[2] ms
// is left.
const guardHead = `local current_ttl = redis.call("PTTL", KEYS[1])
local min_ttl = tonumber(ARGV[2])
if current_ttl == -2 then return {-1, -2} end
if current_ttl < min_ttl then return {0, current_ttl} end
`

// Lookalikes of ATOMIC_EXTEND that act on another holder's lock in real
// use, each behind the same guard: every one must stay refused.
var longHeldRefused = []struct{ name, body, reason string }{
	{"extends regardless of the token", guardHead + `redis.call("PEXPIRE", KEYS[1], ARGV[3])
return {1, current_ttl}`, ""},
	{"checks the token only when much time is left", guardHead + `if current_ttl < 3600000 or redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "remaining TTL at"},
	{"a realistic band extends anyone's lock", guardHead + `if current_ttl > 5000 and current_ttl < 7000 then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "remaining TTL at"},
	{"a band relative to the argument deletes anyone's lock", guardHead + `if current_ttl < min_ttl * 2 then
  redis.call("DEL", KEYS[1]) return {0, current_ttl}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "remaining TTL at"},
	{"a command name from an unread argument on a realistic band", guardHead + `if current_ttl < 30000 then
  redis.call(ARGV[4], KEYS[1], ARGV[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "reads other arguments"},
	{"a realistic band takes a lock of another type", guardHead + `if current_ttl < 60000 and redis.call("TYPE", KEYS[1])["ok"] == "hash" then
  redis.call("DEL", KEYS[1]) return {1, current_ttl}
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "remaining TTL at"},
	{"mixed holders: a realistic TTL skips the second key's token", `local t = redis.call("PTTL", KEYS[1])
if t < tonumber(ARGV[2]) then return 0 end
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 end
if t >= 60000 and redis.call("GET", KEYS[2]) ~= ARGV[1] then return 0 end
redis.call("PEXPIRE", KEYS[1], ARGV[3])
redis.call("PEXPIRE", KEYS[2], ARGV[3])
return 1`, "the script answers :1"},
	{"a command name read from an argument, run on a realistic band", guardHead + `local cmd = ARGV[4]
if current_ttl < 30000 then
  redis.call(cmd, KEYS[1], ARGV[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[3]) return {1, current_ttl}
end
return {-1, current_ttl}`, "takes a command name"},
	// Not guarded: understood by the first analysis before the remaining
	// TTL was tried against the argument (ttlArgAlternatives).
	{"takes a lease within a second above an argument", `if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end
local t = redis.call("PTTL", KEYS[1])
local m = tonumber(ARGV[3])
if t > m and t < m + 1000 then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2]) return 1
end
return 0`, "and ARGV[3] = "},
	{"the guard in seconds, then anyone's lock", `local t = redis.call("TTL", KEYS[1])
if t < tonumber(ARGV[2]) then return 0 end
if t < 100 then redis.call("PEXPIRE", KEYS[1], ARGV[3]) return 1 end
if redis.call("GET", KEYS[1]) == ARGV[1] then redis.call("PEXPIRE", KEYS[1], ARGV[3]) return 1 end
return 0`, "remaining TTL at"},
}

func TestLongHeldLookalikesRefused(t *testing.T) {
	for _, c := range longHeldRefused {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err == nil {
				t.Fatalf("accepted as %s", sem)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("refused with %v; want the reason to say %q", err, c.reason)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// TestRedlockUniversalAtomicExtend: the library's exact script is
// understood as an extend of KEYS[1] by the token ARGV[1] for ARGV[3] ms,
// yes when the reply's first element is 1, within the analysis budget.
func TestRedlockUniversalAtomicExtend(t *testing.T) {
	sum := sha1.Sum([]byte(redlockUniversalAtomicExtend))
	if got := hex.EncodeToString(sum[:]); got != "c000e088bd4aca36ab429d3b7a16fc736f4cb6f1" {
		t.Fatalf("sha1 %s: not the library's text", got)
	}
	start := time.Now()
	sem, err := Analyze([]byte(redlockUniversalAtomicExtend), Options{})
	if err != nil {
		t.Fatalf("refused: %v", err)
	}
	const want = `extend string keys=KEYS[1] token=ARGV[1] ttl=ARGV[3] ms yes=array whose first element is integer 1 no=[:-1 :0] (PTTL at 2)`
	if !strings.HasPrefix(sem.String(), want) {
		t.Fatalf("understood as %s; want %s", sem, want)
	}
	t.Logf("%s in %v, %d probe runs", sem, time.Since(start), sem.Probes)
}
