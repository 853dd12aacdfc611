package pubsub

import (
	"crypto/sha1"
	"encoding/hex"
	"testing"
)

// The unlock scripts that publish, verbatim from the clients' corpus
// (../shared/clients/scripts, which is not beside every checkout: the
// sha1s of its MANIFEST.json prove the copies exact).
const (
	// KEYS: lock, channel. ARGV: message, lease ms, lock id, publish command.
	redisson323Unlock = "if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); return 0; else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); return 1; end; return nil;"
	// KEYS: lock, channel, unlock latch. ARGV: message, lease ms, lock id,
	// publish or spublish, latch ms.
	redisson4Unlock = "local val = redis.call('get', KEYS[3]); if val ~= false then return tonumber(val);end; if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then return nil;end; local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1); if (counter > 0) then redis.call('pexpire', KEYS[1], ARGV[2]); redis.call('set', KEYS[3], 0, 'px', ARGV[5]); return 0; else redis.call('del', KEYS[1]); redis.call(ARGV[4], KEYS[2], ARGV[1]); redis.call('set', KEYS[3], 1, 'px', ARGV[5]); return 1; end; "
	// KEYS: lock. ARGV: client id, channel; publishes the lock key.
	spring7Unlock = "local lockClientId = redis.call('GET', KEYS[1])\nif (lockClientId == ARGV[1] and redis.call('UNLINK', KEYS[1]) == 1) then\n\tredis.call('PUBLISH', ARGV[2], KEYS[1])\n\treturn true\nend\nreturn false\n"
)

func TestScriptsAreVerbatim(t *testing.T) {
	for body, want := range map[string]string{
		redisson323Unlock: "778cea8aada230ae060b432fc333adaec85f2f4c",
		redisson4Unlock:   "6866459238a13a701d42f4971f12d9f3a50e2442",
		spring7Unlock:     "7a71e9443a2a41539fb115a5a27d5a748a871aed",
	} {
		if sum := sha1.Sum([]byte(body)); hex.EncodeToString(sum[:]) != want {
			t.Errorf("script copy differs from the corpus (sha1 %x, want %s)", sum, want)
		}
	}
}
