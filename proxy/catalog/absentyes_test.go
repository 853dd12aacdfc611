package catalog

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// TestAbsentYesRun: a release that answers where there is no lock as where
// it deleted it (analyze's AbsentIsYes) runs on the masters behind
// quorum.WrapAbsentYes with that reply as ScriptOp.AbsentYes, which the
// engine keeps in a byte: a reply that is not :1, :0, +OK or nil is
// refused, saying why.
func TestAbsentYesRun(t *testing.T) {
	b, err := os.ReadFile("../analyze/testdata/redisson/unlockInner-2.2.4.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, refusal string }{
		{"Redisson 2.6.0-3.10.5's unlock", string(b), ""},
		{"an array reply",
			`if redis.call('exists', KEYS[1]) == 0 then return {1} end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return {1} end
			 return {0}`,
			"only when it is :1, :0, +OK or nil"},
		{"a bulk reply",
			`if redis.call('exists', KEYS[1]) == 0 then return 'released' end
			 if redis.call('get', KEYS[1]) == ARGV[1] then redis.call('del', KEYS[1]); return 'released' end
			 return 'not-owner'`,
			"only when it is :1, :0, +OK or nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := runFromAnalysis(t, c.body, "0000000000000000000000000000000000000005", c.refusal, func(sem *analyze.Semantics) bool { return sem.AbsentIsYes })
			if s == nil {
				return
			}
			op := s.Op()
			if op.AbsentYes == nil || !op.AbsentYes.Equal(resp.Reply{Type: resp.Integer, Int: 1}) {
				t.Errorf("AbsentYes %v, want :1", op.AbsentYes)
			}
			if want := "if redis.call('EXISTS', KEYS[1]) == 0 then return 1 end"; !strings.Contains(op.Body, want) {
				t.Errorf("the masters run %q, want it to hold %q", op.Body, want)
			}
		})
	}
}

// TestDeletedYesRun: a re-entrant release whose yes reply where it deleted
// the lock differs from the one where a count is left (analyze's
// DeletedReply) runs with that reply as ScriptOp.DeletedYes; one the engine cannot keep in a byte is refused, saying why, since the
// engine could not keep it from outvoting a count left.
func TestDeletedYesRun(t *testing.T) {
	b, err := os.ReadFile("../analyze/testdata/redisson/unlockInner-3.24.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, body, refusal string }{
		{"Redisson 3.24's unlock", string(b), ""},
		{"a 2 where it deleted",
			`if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return nil end
			 local c = redis.call('hincrby', KEYS[1], ARGV[1], -1)
			 if c > 0 then return 0 end
			 redis.call('del', KEYS[1]); return 2`,
			"only when that reply is :1, :0, +OK or nil"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := runFromAnalysis(t, c.body, "0000000000000000000000000000000000000006", c.refusal, func(sem *analyze.Semantics) bool { return sem.DeletedReply != nil })
			if s == nil {
				return
			}
			op := s.Op()
			if op.DeletedYes == nil || !op.DeletedYes.Equal(resp.Reply{Type: resp.Integer, Int: 1}) {
				t.Errorf("DeletedYes %v, want :1", op.DeletedYes)
			}
			if op.AbsentYes != nil {
				t.Errorf("AbsentYes %v, want none: the masters without the lock answer nil", op.AbsentYes)
			}
		})
	}
}

// runFromAnalysis analyzes body, which must be understood with want
// holding of its semantics, and builds its Script; with refusal set, the
// build must be refused saying it, and the Script is nil.
func runFromAnalysis(t *testing.T, body, sha, refusal string, want func(*analyze.Semantics) bool) *Script {
	t.Helper()
	sem, err := analyze.Analyze([]byte(body), analyze.Options{})
	if err != nil {
		t.Fatalf("the analyzer refused it: %v", err)
	}
	if !want(sem) {
		t.Fatalf("understood as %s", sem)
	}
	s, err := fromSemantics([]byte(body), sha, sem, time.Minute, 0.01)
	if refusal != "" {
		if err == nil || !strings.Contains(err.Error(), refusal) {
			t.Fatalf("got %v, want a refusal saying %q", err, refusal)
		}
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}
