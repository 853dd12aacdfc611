package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// TestCounterPlaces: an acquire script's fencing counter is handed out
// only where the proxy can put the quorum's value, an integer in one
// place of the reply. Returned as a string ({1, tostring(token)} or
// tostring(token)), one master's own INCR would reach the client and
// could go back after that master is cut off: refused, saying why
// (review, helper-50: {1, tostring(token)} was accepted).
func TestCounterPlaces(t *testing.T) {
	const acquire = "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local token = redis.call('incr', KEYS[2]); "
	for _, c := range []struct {
		name, tail, refusal string
		at                  int
	}{
		{"integer", "return token end return nil", "", 0},
		{"array", "return {1, token} end return nil", "", 2},
		{"string", "return tostring(token) end return nil", "", -1},
		{"string in an array", "return {1, tostring(token)} end return nil", "as a string", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(acquire + c.tail)
			sem, err := analyze.Analyze(body, analyze.Options{})
			if c.at < 0 {
				// The whole reply as a string: the analysis already
				// refuses it, as the reply changes with the counter.
				if err == nil {
					t.Fatalf("accepted: %s", sem)
				}
				return
			}
			if err != nil {
				t.Fatalf("analysis refused it: %v", err)
			}
			s, err := fromSemantics(body, "0000000000000000000000000000000000000002", sem, time.Hour, 0.01)
			if c.refusal == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if s.CounterAt != c.at {
					t.Fatalf("counter at %d, want %d", s.CounterAt, c.at)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Fatalf("fromSemantics = %v; want a refusal saying %q (%s)", err, c.refusal, sem)
			}
		})
	}
}

// TestCounterOutsideItsPlace: acquire scripts whose reply carries one
// master's own counter value (or a value made from it) outside the one
// integer place lockproxy replaces with the quorum's, or that store it, or
// return two counters: each is refused, by the analysis or the catalog.
// Each was accepted before the difference check (review, helper-51; the
// fencing tokens went back end to end: proxy/fencing_leak_test.go), and
// ioredfour's acquire, which keeps the counter in the lock as its token
// (review, helper-53).
func TestCounterOutsideItsPlace(t *testing.T) {
	const acquire = "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local token = redis.call('incr', KEYS[2]); "
	for _, tail := range []string{
		"return {1, token, tostring(token)} end return nil",    // the string after the integer: the loop stops at the integer
		"return {1, token, token} end return nil",              // only the first place gets the quorum's value
		"return {1, {token}} end return nil",                   // nested array: not looked into
		"return {1, {tostring(token)}} end return nil",         // nested string
		"return {1, 'fence:' .. token} end return nil",         // embedded in a string
		"return {1, cjson.encode({t = token})} end return nil", // JSON
		"return {1, redis.status_reply(tostring(token))} end return nil",
		"return {1, token + 1} end return nil", // derived
		"return {1, token, redis.call('get', KEYS[2])} end return nil",
		"local t2 = redis.call('incr', KEYS[3]); return {1, token, t2} end return nil",         // a second counter
		"if token > 5 then return {1, token} end return {2, token} end return nil",             // compared
		"if ARGV[3] == 'x' then return {1, token, token} end return {1, token} end return nil", // a copy for one argument's value (review, helper-54)
		"if redis.call('exists', KEYS[3]) == 1 then return {1, token, token} end return {1, token} end return nil",
		"local t = redis.call('decr', KEYS[2]); return {1, t} end return nil", // goes down
		"local t = redis.call('incrby', KEYS[2], -1); return {1, t} end return nil",
	} {
		body := []byte(acquire + tail)
		sem, err := analyze.Analyze(body, analyze.Options{})
		if err != nil {
			t.Logf("refused by the analysis: %s: %v", tail, err)
			continue
		}
		s, err := fromSemantics(body, "0000000000000000000000000000000000000002", sem, time.Hour, 0.01)
		if err == nil {
			t.Errorf("accepted (counter at %d): %s", s.CounterAt, tail)
			continue
		}
		t.Logf("refused: %s: %v", tail, err)
	}
}

// TestCounterStoredInTheLock: ioredfour's acquire keeps its INCR's value
// in the lock (hash field "index") as the token it later releases with.
// lockproxy handed the client the quorum's value while each master kept
// its own, so the client's token matched no master's (review, helper-53).
// It is refused, saying why.
func TestCounterStoredInTheLock(t *testing.T) {
	body := []byte(`local ttl=tonumber(ARGV[1]);
if redis.call("EXISTS", KEYS[1]) == 1 then
    return {0, -1, redis.call("PTTL", KEYS[1])};
end;
local index = redis.call("INCR", KEYS[2]);
redis.call("HMSET", KEYS[1], "index", index);
redis.call("PEXPIRE", KEYS[1], ttl);
return {1, index, ttl};`)
	sem, err := analyze.Analyze(body, analyze.Options{})
	if err != nil {
		return // refused by the analysis: as good
	}
	if _, err := fromSemantics(body, "0000000000000000000000000000000000000003", sem, time.Hour, 0.01); err == nil || !strings.Contains(err.Error(), "passes the counter KEYS[2]'s value to another command") {
		t.Fatalf("fromSemantics = %v; want a refusal saying the counter's value is stored (%s)", err, sem)
	}
}
