package analyze

import (
	"strings"
	"testing"
)

// TestSharedHashState: a hash lock script is also run on a hash that holds
// the caller's token and another's (one field each) and must do there what
// it does held by the caller alone. An exclusive lock never leaves two
// holders in one hash, but another script of the same key can leave a
// second field (Redisson's write lock writes a "mode" field), and a script
// with a branch on HLEN was understood from the single-field probes alone:
// these lookalikes of Redisson's renewal and tryLock make the lock
// permanent once the hash has two fields, and were served (2026-11-28,
// found reading Redisson 3.44's ReadLockTask, whose renewal branches on
// HLEN > 1).
func TestSharedHashState(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"renewal that persists", "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then redis.call('pexpire', KEYS[1], ARGV[1]); " +
			"if redis.call('hlen', KEYS[1]) > 1 then redis.call('persist', KEYS[1]) end; return 1 end; return 0"},
		{"tryLock that persists", "if (redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then " +
			"redis.call('hincrby', KEYS[1], ARGV[2], 1); redis.call('pexpire', KEYS[1], ARGV[1]); " +
			"if redis.call('hlen', KEYS[1]) > 1 then redis.call('persist', KEYS[1]) end; return nil; end; return redis.call('pttl', KEYS[1]);"},
		{"unlock that spares a shared hash", "if (redis.call('hexists', KEYS[1], ARGV[2]) == 0) then return nil; end; " +
			"if redis.call('hlen', KEYS[1]) > 1 then return 1 end; redis.call('del', KEYS[1]); return 1;"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sem, err := Analyze([]byte(tc.body), Options{})
			if err == nil {
				t.Fatalf("understood as %v, want a refusal", sem)
			}
			if !strings.Contains(err.Error(), "and another token (hash, count 1 each)") {
				t.Fatalf("refused for another reason: %v", err)
			}
			t.Log(err)
		})
	}
}
