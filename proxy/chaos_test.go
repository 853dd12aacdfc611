package proxy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// The mutual-exclusion checker. Workers contend on a few keys through
// lockproxy with short TTLs; a holder counts as holding from the moment it
// reads OK until it releases or its validity ends, validity measured from
// before it sent the request, minus the drift allowance:
//
//	[reply received, min(release, sent + ttl - drift(ttl))]
//
// Two holders of one key whose windows overlap are a violation. Meanwhile a
// fault injector pauses (SIGSTOP), kills and restarts masters without
// their data. The windows are compared in this process's monotonic clock
// and masters expire keys on the same machine's clock, so a correct lock
// service can produce no overlap, and the checker none that is not real.
//
// `go test` runs a short version; LOCKPROXY_CHAOS=long (make chaos) a long
// one. A negative control runs the same checker over a deliberately broken
// configuration (no restart quarantine while a majority restarts empty) and
// must see violations: it proves the checker can see them.

// chaosLong reports whether the long version was asked for.
func chaosLong() bool { return os.Getenv("LOCKPROXY_CHAOS") == "long" }

// resource is the thing the lock protects: it records who holds each key
// and catches overlapping holders.
type resource struct {
	mu         sync.Mutex // protects the fields below
	holders    map[string]*holding
	violations []string
	granted    int
}

type holding struct {
	who   string
	from  time.Time // reply received
	until time.Time // validity end; moved earlier by release
}

// enter records that who holds key from from until until; it reports a
// violation if the previous holder's window is still open at from.
func (r *resource) enter(key, who string, from, until time.Time) *holding {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.granted++
	if prev := r.holders[key]; prev != nil && prev.until.After(from) {
		r.violations = append(r.violations, fmt.Sprintf("key %s: %s holds from %s while %s (holding since %s) still holds for %v",
			key, who, from.Format("15:04:05.000"), prev.who, prev.from.Format("15:04:05.000"), prev.until.Sub(from)))
	}
	h := &holding{who: who, from: from, until: until}
	r.holders[key] = h
	return h
}

// leave ends h's window now (before the release is sent).
func (r *resource) leave(h *holding) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); now.Before(h.until) {
		h.until = now
	}
}

type chaosStats struct {
	acquired, contended, noquorum, otherErr, expired atomic.Int64
}

// runWorkers contends on keys until stop closes.
func runWorkers(t *testing.T, cl *redis.Client, res *resource, st *chaosStats, workers int, keys []string, stop <-chan struct{}) *sync.WaitGroup {
	rel := redis.NewScript(releaseScript)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				tok := fmt.Sprintf("w%d-%d", w, i)
				ttl := time.Duration(200+rng.IntN(800)) * time.Millisecond
				sent := time.Now()
				ok, err := cl.SetNX(ctx, key, tok, ttl).Result()
				got := time.Now()
				switch {
				case err != nil && strings.HasPrefix(err.Error(), "NOQUORUM"):
					st.noquorum.Add(1)
					time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
					continue
				case err != nil:
					st.otherErr.Add(1)
					t.Logf("worker %d: %v", w, err)
					time.Sleep(10 * time.Millisecond)
					continue
				case !ok:
					st.contended.Add(1)
					time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
					continue
				}
				until := sent.Add(ttl - quorum.Drift(ttl, 0.01))
				if !got.Before(until) {
					st.expired.Add(1) // granted, but no validity left to use
				} else {
					st.acquired.Add(1)
					h := res.enter(key, tok, got, until)
					// Mostly short work, so that many holds are checked;
					// one in five holds for most of the validity, or past
					// it (the holder must then consider the lock lost: its
					// window ends at until whatever it does).
					work := time.Duration(rng.IntN(30)) * time.Millisecond
					if rng.IntN(5) == 0 {
						work = time.Duration(rng.Float64() * 1.1 * float64(until.Sub(got)))
					}
					time.Sleep(work)
					res.leave(h)
				}
				rel.Run(ctx, cl, []string{key}, tok)
			}
		})
	}
	return &wg
}

// fault is one injected failure, done synchronously.
type fault func(rng *rand.Rand, masters []*redisproc.Server) string

func pauseSome(k int, d time.Duration) fault {
	return func(rng *rand.Rand, ms []*redisproc.Server) string {
		pick := rng.Perm(len(ms))[:k]
		for _, i := range pick {
			ms[i].Pause()
		}
		time.Sleep(d)
		for _, i := range pick {
			ms[i].Resume()
		}
		return fmt.Sprintf("paused %v for %v", pick, d)
	}
}

func restartSome(k int, down time.Duration) fault {
	return func(rng *rand.Rand, ms []*redisproc.Server) string {
		pick := rng.Perm(len(ms))[:k]
		for _, i := range pick {
			ms[i].Kill()
		}
		time.Sleep(down)
		var wg sync.WaitGroup
		for _, i := range pick {
			wg.Go(func() { ms[i].Restart() })
		}
		wg.Wait()
		return fmt.Sprintf("restarted %v empty after %v down", pick, down)
	}
}

type chaosRun struct {
	masters, workers, keys int
	duration               time.Duration
	faults                 []fault
	pauseBetween           time.Duration
	stopOnViolation        bool
	opts                   []clusterOpt
}

func runChaos(t *testing.T, cr chaosRun) (*resource, *chaosStats, []string) {
	c := startCluster(t, cr.masters, cr.opts...)
	c.waitVoting(cr.masters)
	cl := c.client(func(o *redis.Options) { o.PoolSize = cr.workers + 4 })
	res := &resource{holders: map[string]*holding{}}
	st := &chaosStats{}
	var keys []string
	for i := 0; i < cr.keys; i++ {
		keys = append(keys, fmt.Sprint("chaos:", i))
	}
	stop := make(chan struct{})
	wg := runWorkers(t, cl, res, st, cr.workers, keys, stop)
	rng := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	var log []string
	end := time.Now().Add(cr.duration)
	for time.Now().Before(end) {
		time.Sleep(cr.pauseBetween/2 + time.Duration(rng.Int64N(int64(cr.pauseBetween))))
		f := cr.faults[rng.IntN(len(cr.faults))]
		log = append(log, time.Now().Format("15:04:05.000")+" "+f(rng, c.masters))
		if cr.stopOnViolation {
			res.mu.Lock()
			v := len(res.violations)
			res.mu.Unlock()
			if v > 0 {
				time.Sleep(100 * time.Millisecond)
				break
			}
		}
	}
	close(stop)
	wg.Wait()
	return res, st, log
}

func reportChaos(t *testing.T, res *resource, st *chaosStats, log []string) {
	t.Logf("%d faults; %d holds checked, %d contended, %d NOQUORUM, %d granted too late to use, %d other errors; %d violations",
		len(log), st.acquired.Load(), st.contended.Load(), st.noquorum.Load(), st.expired.Load(), st.otherErr.Load(), len(res.violations))
	if testing.Verbose() {
		for _, l := range log {
			t.Log("fault: " + l)
		}
	}
}

func TestChaosMutualExclusion(t *testing.T) {
	cr := chaosRun{
		masters: 5, workers: 12, keys: 4,
		duration:     8 * time.Second,
		pauseBetween: 300 * time.Millisecond,
		// A majority restarted empty stops the service for max_ttl, so
		// it is rarer than the faults the quorum rides through.
		faults: []fault{
			pauseSome(1, 300*time.Millisecond),
			pauseSome(1, 100*time.Millisecond),
			pauseSome(2, 200*time.Millisecond),
			pauseSome(2, 50*time.Millisecond),
			pauseSome(3, 150*time.Millisecond),
			restartSome(1, 0),
			restartSome(1, 200*time.Millisecond),
			restartSome(2, 0),
			restartSome(3, 0),
		},
		// max_ttl bounds the TTLs (≤ 1s here) and is the quarantine.
		opts: []clusterOpt{withQuarantine(time.Second)},
	}
	if chaosLong() {
		cr.duration, cr.workers, cr.keys = 5*time.Minute, 32, 6
	}
	res, st, log := runChaos(t, cr)
	reportChaos(t, res, st, log)
	for i, v := range res.violations {
		if i == 20 {
			t.Errorf("… %d more", len(res.violations)-20)
			break
		}
		t.Error(v)
	}
	if st.acquired.Load() < 100 {
		t.Fatalf("only %d holds checked: the run proves little", st.acquired.Load())
	}
}

// The negative control: the same checker over a lockproxy whose restart
// quarantine is off while a majority of masters restarts empty must see two
// holders at once.
func TestChaosCheckerCatchesBrokenQuorum(t *testing.T) {
	cr := chaosRun{
		masters: 5, workers: 12, keys: 3,
		duration:        10 * time.Second, // stops at the first violation
		pauseBetween:    300 * time.Millisecond,
		faults:          []fault{restartSome(3, 0)},
		stopOnViolation: true,
		opts: []clusterOpt{withQuarantine(time.Second), func(_ *proxy.Config, qc *quorum.Config) {
			qc.Quarantine = false // the deliberate bug
		}},
	}
	res, st, log := runChaos(t, cr)
	reportChaos(t, res, st, log)
	if len(res.violations) == 0 {
		t.Fatal("the checker saw no violation over a broken configuration: it cannot be trusted")
	}
	t.Logf("first violation caught: %s", res.violations[0])
}
