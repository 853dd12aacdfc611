package quorum_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
)

// lockedBuffer collects log output written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestEvictingMasterLoggedOnce: a master left with an evicting
// maxmemory-policy is re-tainted at every check, which moves its
// quarantine's end and records a new loss of its counters each time. That
// is no news while the policy still evicts: the policy's error said so,
// once (docs/operations.md, "Logs"). Before, each check (every 500ms in
// production) logged "master quarantined" and "counters restored" again,
// for as long as the policy stayed wrong.
func TestEvictingMasterLoggedOnce(t *testing.T) {
	t.Parallel()
	masters := redisproc.ForTest(t, 3)
	var logs lockedBuffer
	e := startEngine(t, masters, bootstrap, func(c *quorum.Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	poll(t, "all voting", func() bool { return allVoting(e) })
	if _, err := masters[0].Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru"); err != nil {
		t.Fatal(err)
	}
	poll(t, "master 0 excluded", func() bool { return strings.Contains(e.Masters()[0].Excluded, "allkeys-lru") })
	// Five checks with the policy still wrong: each moves the end.
	ends := map[time.Time]bool{}
	poll(t, "five checks of the evicting master", func() bool {
		ends[e.Masters()[0].QuarantinedUntil] = true
		return len(ends) > 5
	})
	out := logs.String()
	count := func(s, msg string) int { return strings.Count(s, msg) }
	if n := count(out, "master may evict lock keys"); n != 1 {
		t.Errorf("the policy's error logged %d times, want once:\n%s", n, out)
	}
	if n := count(out, `msg="master quarantined`); n > 1 {
		t.Errorf("master quarantined logged %d times in 5 checks of one evicting policy, want at most once:\n%s", n, out)
	}
	if n := count(out, "counters restored"); n > 1 {
		t.Errorf("counters restored logged %d times in 5 checks of one evicting policy, want at most once:\n%s", n, out)
	}
	// Back to noeviction: one line says so and one gives the quarantine's
	// real end, which counts from now.
	before := len(out)
	if _, err := masters[0].Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
		t.Fatal(err)
	}
	poll(t, "master 0 quarantined for having evicted", func() bool {
		st := e.Masters()[0]
		return st.Excluded == "" && st.QuarantineWhy == quorum.WhyEvicting
	})
	poll(t, "its counters restored after the return", func() bool {
		return strings.Contains(logs.String()[before:], "counters restored")
	})
	after := logs.String()[before:]
	if n := count(after, "noeviction again"); n != 1 {
		t.Errorf("the return to noeviction logged %d times, want once:\n%s", n, after)
	}
	if n := count(after, `msg="master quarantined`); n != 1 {
		t.Errorf("after the return to noeviction, master quarantined logged %d times, want once (its real end):\n%s", n, after)
	}
}
