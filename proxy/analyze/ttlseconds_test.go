package analyze

import "testing"

// TestReadTTLSeconds: a read whose yes is the lock's TTL in seconds
// (aioredlock's GET_LOCK_TTL_SCRIPT) carries data, as a PTTL does: its
// rule is no single value. The probes' one TTL made it "integer 7000", and
// every real call's TTL then counted as a no.
func TestReadTTLSeconds(t *testing.T) {
	body := `
    local identifier = redis.call('get', KEYS[1])
    if not identifier then
        return redis.error_reply('ERROR')
    elseif identifier == ARGV[1] then
        return redis.call("TTL", KEYS[1])
    else
        return redis.error_reply('ERROR')
    end`
	sem := checkSemantics(t, []byte(body), corpusWant{sem: `read string keys=KEYS[1] token=ARGV[1] yes=integer >= 0 no=-ERR ERROR`})
	if sem != nil && !sem.Yes.Match(&Reply{Type: IntReply, Int: 29}, 1) {
		t.Fatalf("a TTL of 29 s is not a yes to %s", sem.Yes.String())
	}
}
