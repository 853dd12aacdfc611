package catalog

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestBuiltinsAgreeWithAnalyzer: every built-in catalog entry is what the
// analyzer finds its body does. The catalog is a fast path (its scripts
// are preloaded and need no analysis) and a few policies of its own, each
// named here with why; apart from those, the two must not differ.
func TestBuiltinsAgreeWithAnalyzer(t *testing.T) {
	cat, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	// Where the catalog deliberately differs, and why.
	policy := map[string]string{
		// The analyzer: take a free lock or re-set the caller's TTL
		// (acquire-or-extend, never undone). The catalog undoes a failed
		// obtain: bsm/redislock tells the caller it does not hold the lock
		// then, so deleting what the attempt wrote is safe, and frees the key.
		"bsm-redislock v0.9 obtain": "kind",
		// redsync keeps believing in its lock after a failed extend: never
		// undone, as the analyzer's acquire-or-extend would be too; the
		// catalog calls it extend, whose vote needs the key held.
		"redsync v4.18 touchWithSetNX": "kind",
		// The analyzer refuses a TTL added to the remaining one; the
		// catalog runs lockproxy's capped copy instead (RunAs).
		"redis-py extend": "refused",
	}
	for _, s := range cat.Scripts() {
		sem, err := analyze.Analyze([]byte(s.Body), analyze.Options{})
		if err != nil {
			t.Errorf("%s: the analyzer refuses a built-in: %v", s.Name, err)
			continue
		}
		u, err := fromSemantics([]byte(s.Body), s.SHA1, sem, time.Minute, 0.01)
		if policy[s.Name] == "refused" {
			if err == nil {
				t.Errorf("%s: understood as %s, but the catalog's reason for its own copy is gone", s.Name, sem)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", s.Name, err)
			continue
		}
		if s.Kind != u.Kind && policy[s.Name] != "kind" {
			t.Errorf("%s: kind %v in the catalog, %v understood (%s)", s.Name, s.Kind, u.Kind, sem)
		}
		if !s.Yes.Same(&u.Yes) {
			t.Errorf("%s: yes %+v in the catalog, %+v understood", s.Name, s.Yes, u.Yes)
		}
		if !s.NoReply.Equal(u.NoReply) {
			t.Errorf("%s: no reply %v in the catalog, %v understood", s.Name, s.NoReply, u.NoReply)
		}
		if s.Force != u.Force {
			t.Errorf("%s: force %v in the catalog, %v understood", s.Name, s.Force, u.Force)
		}
		if (s.Kind == quorum.Acquire || s.Kind == quorum.Extend) && (s.TTLArg != u.TTLArg || s.TTLUnit != u.TTLUnit || u.TTLInKeys) {
			t.Errorf("%s: TTL ARGV[%d] %v in the catalog, %d %v (in KEYS %v) understood", s.Name, s.TTLArg, s.TTLUnit, u.TTLArg, u.TTLUnit, u.TTLInKeys)
		}
		if s.Kind == quorum.Acquire && s.TokenArg != u.TokenArg {
			t.Errorf("%s: token ARGV[%d] in the catalog, %d understood", s.Name, s.TokenArg, u.TokenArg)
		}
		if s.Counter != u.Counter {
			t.Errorf("%s: fencing counter %+v in the catalog, %+v understood", s.Name, s.Counter, u.Counter)
		}
		if len(s.OtherTTLs) != len(u.OtherTTLs) {
			t.Errorf("%s: other TTLs %+v in the catalog, %+v understood", s.Name, s.OtherTTLs, u.OtherTTLs)
		}
	}
}
