package analyze

import "testing"

// TestCounterReturnedInAnArray: Redisson's RFencedLock answers {-1, token}
// on a grant: the counter's value is the yes reply's second element, which
// the proxy must replace with the quorum's (catalog, quorum.withToken).
func TestCounterReturnedInAnArray(t *testing.T) {
	body := "if (redis.call('exists', KEYS[1]) == 0 or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then " +
		"local token = redis.call('incr', KEYS[2]); redis.call('hincrby', KEYS[1], ARGV[2], 1); " +
		"redis.call('pexpire', KEYS[1], ARGV[1]); return {-1, token}; end; return {redis.call('pttl', KEYS[1]), -1};"
	sem, err := Analyze([]byte(body), Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Counter{Key: Arg{Keys: true, Index: 2}, Returned: true, At: 2}
	if len(sem.Counters) != 1 || sem.Counters[0] != want {
		t.Fatalf("counters %+v, want [%+v]", sem.Counters, want)
	}
	if sem.Kind != ReentrantAcquire {
		t.Fatalf("kind %s, want reentrant-acquire", sem.Kind)
	}
}
