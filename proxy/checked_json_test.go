package proxy_test

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// jsonConstField takes a JSON lock, {"owner": token, "kind": "mutex"},
// and with "force", when the key has under 30 s left, sets it again: a
// band the probes' held keys never show. The masters took a copy with
// any top-level field equal to the caller's token as the caller's, so a
// client whose token is "mutex", the constant every copy carries, passed
// for every holder: its acquire was not guarded, and its copy counted.
// ("mutex" is built at run time: a token equal to one of the script's
// string constants is refused before it reaches the masters.)
const jsonConstField = `local t = redis.call("PTTL", KEYS[1])
if ARGV[3] == "force" and t > 0 and t < 30000 then
  redis.call("SET", KEYS[1], cjson.encode({owner = ARGV[1], kind = "mu" .. "tex"}), "PX", ARGV[2])
  return 1
end
if redis.call("SET", KEYS[1], cjson.encode({owner = ARGV[1], kind = "mu" .. "tex"}), "NX", "PX", ARGV[2]) then return 1 end
return 0`

func TestCheckedJSONConstantField(t *testing.T) {
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	tSend := time.Now()
	if rep, err := h69Eval(t, a, jsonConstField, []string{"k"}, "tokA", ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Fatalf("A's acquire: %v %v", rep, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	rep, err := h69Eval(t, b, jsonConstField, []string{"k"}, "mutex", ttl.Milliseconds(), "force")
	t.Logf("B's force-band acquire with the token \"mutex\" answered %v %v", rep, err)
	if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
		t.Errorf("DOUBLE GRANT: B granted k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
	for i, m := range c.masters {
		if v, _ := m.Do("GET", "k"); v != `{"owner":"tokA","kind":"mutex"}` && v != `{"kind":"mutex","owner":"tokA"}` {
			t.Errorf("master %d: A's lock holds %q after B's acquire", i, v)
		}
	}
	// A plain acquire of a free key still grants, a contender is told no.
	if rep, err := h69Eval(t, a, jsonConstField, []string{"k2"}, "tokA", ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Errorf("acquire of a free key answered %v %v", rep, err)
	}
	if rep, err := h69Eval(t, b, jsonConstField, []string{"k2"}, "tokB", ttl.Milliseconds(), "no"); err != nil || rep != int64(0) {
		t.Errorf("acquire of a held key answered %v %v, want 0", rep, err)
	}
}

// jsonConstFieldExtend extends a JSON lock whose owner field is the
// caller's token, and with "force" in the band under 30 s left sets it
// to the caller's: B, whose token is the constant "mutex", was granted
// an extend of A's lock.
const jsonConstFieldExtend = `local v = redis.call("GET", KEYS[1])
local t = redis.call("PTTL", KEYS[1])
if ARGV[3] == "force" and t > 0 and t < 30000 then
  redis.call("SET", KEYS[1], cjson.encode({owner = ARGV[1], kind = "mu" .. "tex"}), "PX", ARGV[2])
  return 1
end
if v and cjson.decode(v).owner == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ARGV[2])
  return 1
end
return 0`

func TestCheckedJSONConstantFieldExtend(t *testing.T) {
	const ttl = 20 * time.Second
	c := startCluster(t, 3)
	a, b := c.client(), c.client()
	tSend := time.Now()
	if rep, err := h69Eval(t, a, jsonConstField, []string{"k"}, "tokA", ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Fatalf("A's acquire: %v %v", rep, err)
	}
	validUntil := tSend.Add(ttl - quorum.Drift(ttl, 0.01))
	// Teach the analyzer the extend on A's own lock first.
	if rep, err := h69Eval(t, a, jsonConstFieldExtend, []string{"k"}, "tokA", ttl.Milliseconds(), "no"); err != nil || rep != int64(1) {
		t.Fatalf("A's extend: %v %v", rep, err)
	}
	rep, err := h69Eval(t, b, jsonConstFieldExtend, []string{"k"}, "mutex", ttl.Milliseconds(), "force")
	t.Logf("B's force-band extend with the token \"mutex\" answered %v %v", rep, err)
	if err == nil && rep == int64(1) && time.Now().Before(validUntil) {
		t.Errorf("DOUBLE GRANT: B granted an extend of k %v before A's validity ends", time.Until(validUntil).Round(time.Millisecond))
	}
}
