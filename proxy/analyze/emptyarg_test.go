package analyze

import "testing"

// TestEmptyTokenOrKeyBranchesRefused: Redis takes an empty string as a
// token and as a key name, and a client can send one. The contents tried
// for the token and the keys (content.go) started at one byte, so a
// script that does otherwise with an empty one was understood by its
// other branch: a force acquisition passed as a plain acquire (past
// allow_force_acquire = false), a lock shorter or without an expiry where
// lockproxy accounted ARGV[2], a force release passed as a release
// (found by review, helper-95).
func TestEmptyTokenOrKeyBranchesRefused(t *testing.T) {
	for _, body := range []string{
		// takes another's lock when the token is empty
		`if ARGV[1] == '' then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		// a 1 ms lock, validity accounted for ARGV[2]
		`local ttl = ARGV[2] if ARGV[1] == '' then ttl = 1 end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ttl)`,
		// no expiry for an empty key name
		`if KEYS[1] == '' then return redis.call('set', KEYS[1], ARGV[1], 'NX') end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		// deletes whoever holds it when the token is empty
		`if ARGV[1] == '' or redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0`,
		// by length: a token of 0 bytes extends nothing, yet answers 1
		`if redis.call('get', KEYS[1]) == ARGV[1] then if #ARGV[1] > 0 then redis.call('pexpire', KEYS[1], ARGV[2]) end return 1 end
return 0`,
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("understood as %v, but it does otherwise with an empty token or key:\n%s", sem, body)
		} else {
			t.Logf("refused: %v", err)
		}
	}
}

// TestTokenEqualToKeyNameBranchesRefused: a client may pass its lock key's
// name as its token (SET k k NX PX …). The contents tried for the token
// left out every other argument's value, so a script doing otherwise
// when the token is the key's name was understood by its other branch: a
// force acquisition as an acquire, a 1 ms lock with validity accounted
// for ARGV[2], a force release as a release (found by review, helper-95).
func TestTokenEqualToKeyNameBranchesRefused(t *testing.T) {
	for _, body := range []string{
		`if ARGV[1] == KEYS[1] then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		`local t = ARGV[2] if ARGV[1] == KEYS[1] then t = 1 end
return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', t)`,
		`if ARGV[1] == KEYS[1] or redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0`,
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("understood as %v, but it does otherwise when the token is the key's name:\n%s", sem, body)
		} else {
			t.Logf("refused: %v", err)
		}
	}
}
