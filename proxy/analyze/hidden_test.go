package analyze

import (
	"fmt"
	"testing"
)

// A script may behave otherwise with argument values the probes do not
// use: its TTL clamped by a threshold every probe value crosses, or a
// branch taken only when two arguments are equal or one is long. The
// analysis must see those branches (alternatives.go) and refuse a script
// whose lock TTL they change; these scripts were found by a review to
// slip through, each leaving a lock on the masters that max_ttl did not
// bound.

// TestClampedTTLRefused: the lock's TTL is ARGV[2] unless it exceeds
// len(ARGV[1])^4 ms, then 1s. The probes' large values always take the
// 1s branch; an alternative value of ARGV[2] shows the lock's TTL
// following it, which must refuse the script rather than record 1s as the
// TTL (a 36-byte token would have taken a 10-minute lock).
func TestClampedTTLRefused(t *testing.T) {
	body := `local ttl = tonumber(ARGV[2])
if ttl > string.len(ARGV[1]) ^ 4 then ttl = 1000 end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl)`
	sem, err := Analyze([]byte(body), Options{})
	if err == nil {
		t.Fatalf("understood as %v (TTL %+v), but its TTL is ARGV[2] whenever ARGV[2] <= len(ARGV[1])^4", sem, *sem.TTL)
	}
	t.Logf("refused: %v", err)
}

// TestHiddenAdditiveExtendSeen: an extend that adds the key's remaining
// TTL when ARGV[3] equals the token, or is long, is additive (which the
// proxy refuses: repeated, it outlives max_ttl), not a plain extend.
func TestHiddenAdditiveExtendSeen(t *testing.T) {
	for _, body := range []string{
		`if redis.call('get', KEYS[1]) == ARGV[1] then local t = tonumber(ARGV[2]) if ARGV[3] == ARGV[1] then t = t + redis.call('pttl', KEYS[1]) end return redis.call('pexpire', KEYS[1], t) end return 0`,
		`if redis.call('get', KEYS[1]) == ARGV[1] then local t = tonumber(ARGV[2]) if string.len(ARGV[3]) > 20 then t = t + redis.call('pttl', KEYS[1]) end return redis.call('pexpire', KEYS[1], t) end return 0`,
	} {
		sem, err := Analyze([]byte(body), Options{})
		if err != nil {
			t.Logf("refused: %v", err)
			continue
		}
		if sem.TTL == nil || !sem.TTL.AddsRemaining {
			t.Errorf("understood as %v, but it adds the remaining TTL in a branch the probes do not take:\n%s", sem, body)
		}
	}
}

// TestHiddenNoExpiryRefused: an acquire that sets the lock with no expiry
// when ARGV[3] equals the token is refused.
func TestHiddenNoExpiryRefused(t *testing.T) {
	body := `if ARGV[3] == ARGV[1] then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`
	if sem, err := Analyze([]byte(body), Options{}); err == nil {
		t.Fatalf("understood as %v, but with ARGV[3] == ARGV[1] it sets the lock with no expiry", sem)
	}
}

// TestDerivedTTLsRefused: TTLs computed from an argument, other than the
// argument itself in ms or s, are refused; so is an acquire that answers
// yes without taking the lock.
func TestDerivedTTLsRefused(t *testing.T) {
	for _, body := range []string{
		`return redis.call('set', KEYS[1], ARGV[1], 'NX', 'EX', math.floor(tonumber(ARGV[2]) / 1000))`,
		`return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', math.floor(tonumber(ARGV[2]) * 0.9))`,
		`return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', tonumber(ARGV[2]) - string.len(ARGV[1]))`,
		`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], math.floor(tonumber(ARGV[2]) / 2)) end return 0`,
		`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.status_reply('OK') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("accepted: %s\n  %v", body, sem)
		}
	}
}

// TestTTLArgumentLadderRefusesHiddenBranches: the TTL argument is probed at
// about 1.8e12 and the token is 13 bytes long; a branch on the values
// clients send (a TTL shrunk or clamped below a threshold, a UUID token)
// shows only when they are tried (roles.go). A free argument compared with
// a number above every probe value, or with a constant past the first 32,
// likewise (found by a review: each was accepted, and each takes a lock
// that lives otherwise than lockproxy accounts).
func TestTTLArgumentLadderRefusesHiddenBranches(t *testing.T) {
	pad := "local pad = {"
	for i := 1; i <= 33; i++ {
		pad += fmt.Sprintf("'a%02d',", i)
	}
	pad += "}\n"
	for name, body := range map[string]string{
		// EVAL ... 30000: the lock would live 3 s, validity ~29.7 s.
		"ttl shrunk below a threshold": `local ttl = tonumber(ARGV[2])
if ttl < 100000 then ttl = math.floor(ttl / 10) end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl)`,
		"ttl clamped to a constant below a threshold": `local ttl = tonumber(ARGV[2])
if ttl < 60000 then ttl = 1000 end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl)`,
		"free argument above every probe value": `if tonumber(ARGV[3]) ~= nil and tonumber(ARGV[3]) > 5000000000000 then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		"a constant past the first 32": pad + `if ARGV[3] == 'zforever' then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		"a free argument equal to the lock key": `if ARGV[3] == KEYS[1] then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		// The probe token is 13 bytes; a UUID is 36.
		"no expiry for a long token": `if string.len(ARGV[1]) > 30 then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		"a short token not taken": `if string.len(ARGV[1]) < 8 then return redis.call('set', KEYS[1], 'x', 'NX', 'PX', ARGV[2]) end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("%s: accepted as %v, TTL %+v", name, sem.Kind, *sem.TTL)
		}
	}
}
