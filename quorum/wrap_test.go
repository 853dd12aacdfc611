package quorum_test

import (
	"fmt"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestWrappedScriptsOnRedis runs the wrappers on a real Redis: the
// client's reply is kept (nil included), the re-entrant wrapper adds the
// token's count, and the zero-PTTL wrapper turns a 0 that wrote nothing
// (a holder's PTTL in its last millisecond, here a body that answers 0
// without writing) into 1, while a 0 that took the lock stays 0.
func TestWrappedScriptsOnRedis(t *testing.T) {
	t.Parallel()
	m := redisproc.ForTest(t, 1)[0]
	k1, a2 := quorum.Arg{Keys: true, Index: 1}, quorum.Arg{Index: 2}
	eval := func(body string, args ...string) string {
		t.Helper()
		v, err := m.Do(append([]string{"EVAL", body, "1", "k"}, args...)...)
		if err != nil {
			return "error: " + err.Error()
		}
		return v
	}
	reent, err := quorum.WrapReentrant(`if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); return nil
end
return redis.call('pttl', KEYS[1])`, k1, a2)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"(nil) 1", "(nil) 2"} {
		if got := eval(reent, "5000", "tok"); got != want {
			t.Errorf("re-entrant acquire %d: %s, want %s", i+1, got, want)
		}
	}
	got := eval(reent, "5000", "other")
	var pttl int
	if n, err := fmt.Sscanf(got, "%d (nil)", &pttl); n != 1 || err != nil || pttl <= 0 || pttl > 5000 {
		t.Errorf("another token's acquire: %s, want <pttl> (nil), the holder's PTTL and no count", got)
	}
	if _, err := m.Do("DEL", "k"); err != nil {
		t.Fatal(err)
	}
	noWrite, err := quorum.WrapZeroPTTL("return 0", k1)
	if err != nil {
		t.Fatal(err)
	}
	if got := eval(noWrite); got != "1" {
		t.Errorf("a 0 that wrote nothing: %s, want 1", got)
	}
	took, err := quorum.WrapZeroPTTL("#!lua\nredis.call('SET', KEYS[1], '1', 'PX', 5000)\nreturn 0", k1)
	if err != nil {
		t.Fatal(err)
	}
	if got := eval(took); got != "0" {
		t.Errorf("a 0 that took the lock (shebang kept first): %s, want 0", got)
	}
}

// TestRaiseScriptOnRedis: the raise writes the level only where the token
// holds less, never lowers a count, never creates a field, and answers 1
// where the token now holds at least the level.
func TestRaiseScriptOnRedis(t *testing.T) {
	t.Parallel()
	m := redisproc.ForTest(t, 1)[0]
	if _, err := m.Do("HSET", "h", "low", "1", "high", "5"); err != nil {
		t.Fatal(err)
	}
	body := quorum.RaiseScriptBody()
	for _, tc := range []struct{ token, level, want, count string }{
		{"low", "3", "1", "3"},
		{"high", "3", "1", "5"},
		{"none", "3", "0", "(nil)"},
	} {
		got, err := m.Do("EVAL", body, "1", "h", tc.token, tc.level)
		if err != nil || got != tc.want {
			t.Errorf("raise %s to %s: %q %v, want %s", tc.token, tc.level, got, err, tc.want)
		}
		if c, _ := m.Do("HGET", "h", tc.token); c != tc.count {
			t.Errorf("raise %s to %s left count %s, want %s", tc.token, tc.level, c, tc.count)
		}
	}
}
