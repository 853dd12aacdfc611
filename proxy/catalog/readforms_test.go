package catalog

import (
	"testing"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestReadFormValuePTTL: redlock-rb's get_remaining_ttl script, as the
// library sends it, is the value-and-PTTL read; scripts that differ in what
// they read or return are not.
func TestReadFormValuePTTL(t *testing.T) {
	c := newTestCatalog(t)
	for _, body := range []string{
		// redlock-rb 1.x and 2.x, byte for byte (PTTL_SCRIPT).
		"      return { redis.call(\"get\", KEYS[1]), redis.call(\"pttl\", KEYS[1]) }\n",
		"return {redis.pcall('GET', KEYS[1]), redis.pcall('PTTL', KEYS[1])}",
	} {
		s := c.Match([]byte(body))
		if s == nil || !s.ValuePTTL || s.Kind != quorum.Read || s.MinKeys != 1 {
			t.Errorf("%q: got %+v, want the value-and-PTTL read", body, s)
		}
	}
	for _, body := range []string{
		"return { redis.call('pttl', KEYS[1]), redis.call('get', KEYS[1]) }",
		"return { redis.call('get', KEYS[1]), redis.call('pttl', KEYS[2]) }",
		"return { redis.call('get', KEYS[1]), redis.call('ttl', KEYS[1]) }",
		"return { redis.call('get', KEYS[1]) }",
		"return { redis.call('get', KEYS[1]), redis.call('pttl', KEYS[1]), ARGV[1] }",
	} {
		if s := c.Match([]byte(body)); s != nil {
			t.Errorf("%q matched %q", body, s.Name)
		}
	}
	for _, s := range c.Scripts() {
		if s.ValuePTTL {
			t.Errorf("%s: a read form among the catalog's scripts, whose bodies the masters load", s.Name)
		}
	}
}
