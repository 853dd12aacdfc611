package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// Additive extends (the new TTL is an argument plus the key's remaining
// one) are refused for what they are: repeated, they keep a lock past
// max_ttl, on which the restart quarantine reasons. @upstash/lock 0.2.1's
// extend adds seconds to TTL's answer; it used to be refused by the
// analyzer for an unrelated reason (its expiry read as a constant), and a
// user got an error that did not say why.
func TestAdditiveExtendRefusedForWhatItIs(t *testing.T) {
	for name, body := range map[string]string{
		"seconds (@upstash/lock 0.2.1)": `
      -- Check if the current UUID still holds the lock
      if redis.call("get", KEYS[1]) ~= ARGV[1] then
        return 0
      end

      -- Get the current TTL and extend it by the specified amount
      local ttl = redis.call("ttl", KEYS[1])
      if ttl > 0 then
        return redis.call("expire", KEYS[1], ttl + ARGV[2])
      else
        return 0
      end
     `,
		"milliseconds": `if redis.call("get", KEYS[1]) ~= ARGV[1] then return 0 end
local ttl = redis.call("pttl", KEYS[1])
if ttl > 0 then return redis.call("pexpire", KEYS[1], ttl + ARGV[2]) end
return 0`,
	} {
		sem, err := analyze.Analyze([]byte(body), analyze.Options{})
		if err != nil {
			t.Errorf("%s: the analyzer refused it: %v", name, err)
			continue
		}
		_, err = fromSemantics([]byte(body), "0000000000000000000000000000000000000004", sem, time.Minute, 0.01)
		if err == nil || !strings.Contains(err.Error(), "plus the key's remaining TTL") {
			t.Errorf("%s: got %v, want a refusal naming the remaining TTL", name, err)
		}
	}
}
