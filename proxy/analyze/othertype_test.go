package analyze

import (
	"strings"
	"testing"
)

// laravelFunnel is Laravel's ConcurrencyLimiter lock script
// (Illuminate\Redis\Limiters, 8.83): the first of KEYS that MGET reads as
// empty is taken. MGET answers nil for a key of another type, so the
// script overwrites a hash or sorted-set lock of another holder at that
// name: on one Redis as through lockproxy. With one key it is otherwise
// an acquire; it stays refused, and the reason must say which key and why.
const laravelFunnel = `for index, value in pairs(redis.call('mget', unpack(KEYS))) do
    if not value then
        redis.call('set', KEYS[index], ARGV[3], "EX", ARGV[2])
        return ARGV[1]..index
    end
end`

// TestOverwritesAnotherTypeRefused: an acquire that takes a key of another
// type is refused with a reason naming the key and why. (The same acquire
// reading the key with GET, WRONGTYPE on another type, is understood:
// TestYesStringCarriesArgument.)
func TestOverwritesAnotherTypeRefused(t *testing.T) {
	_, err := Analyze([]byte(laravelFunnel), Options{})
	if err == nil {
		t.Fatal("Laravel's funnel script accepted: it overwrites a lock of another type")
	}
	for _, want := range []string{"the script took it (KEYS[1]), where it must leave the lock alone", "(hash)"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("refused with %v; want the reason to say %q", err, want)
		}
	}
	t.Logf("refused: %v", err)
}
