package analyze

import "testing"

// Review (helper-68): scripts accepted although, on a path the probes
// never run, they delete a lock whoever holds it. The probes set a free
// argument to the script's constants only with the held lock at
// 7,000,003 ms (first analysis) or 2e15 ms (long-held analysis), and at
// realistic remaining TTLs only with the arguments at probe values or one
// argument at a time around each TTL: a constant (or a second argument)
// together with a realistic remaining TTL is never tried. Releases and
// reads are not checked on the masters (quorum.WrapCheck covers acquires
// and extends), so each is a double grant through lockproxy
// (proxy/review68_test.go, TestReleaseConstantTimesTTLBand).
var constantTimesBand = []struct{ name, body string }{
	{"release: a constant and a realistic band delete anyone's lock", `local t = redis.call("PTTL", KEYS[1])
if ARGV[2] == "force" and t > 0 and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`},
	{"guarded release: a constant and a realistic band (long-held analysis)", `local t = redis.call("PTTL", KEYS[1])
if t == -2 then return -2 end
if t < tonumber(ARGV[2]) then return 0 end
if ARGV[3] == "force" and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`},
	{"guarded release: a second numeric argument opens a realistic band (long-held analysis)", `local t = redis.call("PTTL", KEYS[1])
if t == -2 then return -2 end
if t < tonumber(ARGV[2]) then return 0 end
if t > tonumber(ARGV[3]) and t < 30000 then
  return redis.call("DEL", KEYS[1])
end
if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("DEL", KEYS[1])
end
return 0`},
	{"read: a constant and a realistic band delete anyone's lock", `local t = redis.call("PTTL", KEYS[1])
if ARGV[2] == "gc" and t > 0 and t < 30000 then
  redis.call("DEL", KEYS[1])
  return 0
end
if redis.call("GET", KEYS[1]) == ARGV[1] then return t end
return -2`},
}

func TestConstantTimesTTLBandRefused(t *testing.T) {
	for _, c := range constantTimesBand {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err == nil {
				t.Fatalf("accepted as %s: it deletes another holder's lock with a free argument at a constant (or low) and the lock's remaining TTL under 30 s", sem)
			}
			t.Logf("refused: %v", err)
		})
	}
}
