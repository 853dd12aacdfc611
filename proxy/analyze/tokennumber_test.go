package analyze

import "testing"

// TestTokensComparedAsNumbersRefused: the probes' tokens, the caller's and
// other holders', are all numbers. A script that compares tokens through
// tonumber tells them apart, but real tokens (UUIDs, random strings) are
// no numbers: tonumber gives nil for the caller's and for every other
// holder's, nil == nil, and the script takes or deletes whoever's lock.
// The contents tried for the token (content.go) were words against
// numeric other holders, so such a release was understood as a release
// and such an acquire as an acquire, where both act on other clients'
// locks (found by review, helper-95).
func TestTokensComparedAsNumbersRefused(t *testing.T) {
	for _, body := range []string{
		`if tonumber(redis.call('get', KEYS[1])) == tonumber(ARGV[1]) then return redis.call('del', KEYS[1]) end
return 0`,
		`local v = redis.call('get', KEYS[1])
if v == false or tonumber(v) == tonumber(ARGV[1]) then return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return false`,
		`if tonumber(redis.call('hget', KEYS[1], 'owner')) == tonumber(ARGV[1]) then return redis.call('pexpire', KEYS[1], ARGV[2]) end
return 0`,
	} {
		if sem, err := Analyze([]byte(body), Options{}); err == nil {
			t.Errorf("understood as %v, but with tokens that are no numbers it acts on other holders' locks:\n%s", sem, body)
		} else {
			t.Logf("refused: %v", err)
		}
	}
}

// TestTokensComparedAsStringsStillUnderstood: the usual comparison of the
// token as a string is still understood with word tokens everywhere.
func TestTokensComparedAsStringsStillUnderstood(t *testing.T) {
	for _, body := range []string{
		`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`,
		`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0`,
		`return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
	} {
		if _, err := Analyze([]byte(body), Options{}); err != nil {
			t.Errorf("refused: %v\n%s", err, body)
		}
	}
}
