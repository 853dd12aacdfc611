package analyze

import (
	"strings"
	"testing"
)

// Scripts whose behaviour depends on an input the probes used to hold
// fixed (review, helper-58, class A): the content of the lock key's name
// and of the token, and the held lock's remaining TTL. Each was accepted
// as a plain lock and gave a double grant through lockproxy; each must be
// refused, saying which value showed it.
var hiddenInputScripts = []struct {
	name, body, reason string
}{
	// the key's name
	{"key longer than 20 bytes forces", `if #KEYS[1] > 20 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "with the key KEYS[1] = "},
	{"key prefix constant forces", `if string.sub(KEYS[1], 1, 6) == 'force:' then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, `with the key KEYS[1] = "force:`},
	{"key suffix constant forces", `if string.sub(KEYS[1], -5) == ':anon' then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, `with the key KEYS[1] = `},
	{"hash tag in the key shortens the lock", `if string.find(KEYS[1], '{short}', 1, true) then
  return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', 10)
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, `with the key KEYS[1] = "{short}`},
	{"key named in ARGV, long name forces", `if #ARGV[3] > 100 then
  return redis.call('set', ARGV[3], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', ARGV[3], ARGV[1], 'nx', 'px', ARGV[2])`, "with the key ARGV[3] = "},
	// the token's content
	{"token prefix constant forces", `if string.sub(ARGV[1], 1, 6) == 'force:' then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, `with the token ARGV[1] = "force:`},
	{"token of a sha1's length forces", `if #ARGV[1] == 40 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "with the token ARGV[1] = "},
	{"token of 100 bytes or more forces (a length from a constant)", `if string.len(ARGV[1]) >= 100 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, "with the token ARGV[1] = "},
	{"token equal to a constant releases anyone's lock", `if ARGV[1] == 'admin' or redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`, `with the token ARGV[1] = "admin"`},
	// the held lock's remaining TTL
	{"steal a lease with less than 1 s left", `if redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2]) then return 1 end
if redis.call('pttl', KEYS[1]) < 1000 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) return 1
end
return 0`, "with the held lock's remaining TTL at "},
	{"steal a lease with TTL under 3 s (seconds, rounded)", `local v = redis.call('get', KEYS[1])
if v == false or redis.call('ttl', KEYS[1]) < 3 then
  return redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
end
return nil`, "with the held lock's remaining TTL at "},
	{"extend answers yes without extending a lease about to expire", `if redis.call('get', KEYS[1]) == ARGV[1] then
  if redis.call('pttl', KEYS[1]) < 250 then return 1 end
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0`, "with the held lock's remaining TTL at "},
}

func TestHiddenInputsRefused(t *testing.T) {
	for _, c := range hiddenInputScripts {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err == nil {
				t.Fatalf("accepted as %s; want a refusal saying %q", sem, c.reason)
			}
			if !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("refused with %v; want the reason to say %q", err, c.reason)
			}
			t.Logf("refused: %v", err)
		})
	}
}

// A script that reads its key's or token's content without acting on it
// otherwise, or the held lock's PTTL only to answer it, is still
// understood.
func TestHiddenInputsHarmlessAccepted(t *testing.T) {
	for _, c := range []struct{ name, body, sem string }{
		{"token length only checked for an error", `if #ARGV[1] > 512 then return redis.error_reply('token too long') end
return redis.call('set', KEYS[1], ARGV[1], 'nx', 'px', ARGV[2])`, `acquire string keys=KEYS[1] token=ARGV[1] ttl=ARGV[2] ms`},
		{"holder's PTTL answered on a no (Redisson style)", `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1) redis.call('pexpire', KEYS[1], ARGV[1]) return nil
end
return redis.call('pttl', KEYS[1])`, `reentrant-acquire hash keys=KEYS[1] token=ARGV[2] ttl=ARGV[1] ms`},
	} {
		t.Run(c.name, func(t *testing.T) {
			sem, err := Analyze([]byte(c.body), Options{})
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !strings.HasPrefix(sem.String(), c.sem) {
				t.Fatalf("understood as %s; want %s...", sem, c.sem)
			}
		})
	}
}
