package proxy_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// The mutual-exclusion checker, shared by the chaos tests of one lockproxy
// (chaos_test.go) and of several lockproxy processes on one master set
// (multiproxy_test.go). Workers contend on a few keys through lockproxy
// with short TTLs; a holder counts as holding from the moment it reads OK
// until it releases or its validity ends, validity measured from before it
// sent the request, minus the drift allowance:
//
//	[reply received, min(release, sent + ttl - drift(ttl))]
//
// Every holder of every proxy enters the same resource, in this process:
// two holders of one key whose windows overlap are a violation, whichever
// proxies granted them. The windows are compared in this process's
// monotonic clock and masters expire keys on the same machine's clock, so a
// correct lock service can produce no overlap, and the checker none that is
// not real.

// resource is the thing the lock protects: it records who holds each key
// and catches overlapping holders.
type resource struct {
	mu sync.Mutex // protects the fields below
	// held keeps, per key, the holdings that may still overlap one entered
	// later: each is compared with every one of them, not only the last,
	// because a worker may enter its holding after another that got its
	// reply later (the goroutine was descheduled between the reply and
	// enter).
	held       map[string][]*holding
	violations []violation
	granted    int
	// handoffs counts holdings that followed another on their key, and
	// crossHandoffs those whose predecessor came through another proxy:
	// proof that the proxies really contend with each other.
	handoffs, crossHandoffs int
}

func newResource() *resource { return &resource{held: map[string][]*holding{}} }

type holding struct {
	who   string
	proxy int       // index of the lockproxy that granted it
	from  time.Time // reply received
	until time.Time // validity end; moved earlier by release
}

// violation is two holders of one key at once.
type violation struct {
	key         string
	first, then holding // copies, as they were when the overlap was seen
}

// crossProxy reports whether the two holders came through different proxies.
func (v violation) crossProxy() bool { return v.first.proxy != v.then.proxy }

func (v violation) String() string {
	f, n := v.first, v.then
	from, until := f.from, f.until
	if n.from.After(from) {
		from = n.from
	}
	if n.until.Before(until) {
		until = n.until
	}
	return fmt.Sprintf("key %s: %s (proxy %d) holds %s–%s while %s (proxy %d) holds %s–%s: both for %v",
		v.key, n.who, n.proxy, n.from.Format("15:04:05.000"), n.until.Format("15:04:05.000"),
		f.who, f.proxy, f.from.Format("15:04:05.000"), f.until.Format("15:04:05.000"), until.Sub(from))
}

// keepHeld is how long a holding stays in resource.held after its window
// ended: far longer than a worker can take between its reply and enter.
const keepHeld = 5 * time.Second

// enter records that who, through proxy, holds key from from until until;
// it reports a violation for every recorded holding of key whose window
// overlaps [from, until).
func (r *resource) enter(key, who string, proxy int, from, until time.Time) *holding {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.granted++
	h := &holding{who: who, proxy: proxy, from: from, until: until}
	kept := r.held[key][:0]
	var last *holding
	for _, o := range r.held[key] {
		if o.until.Before(from.Add(-keepHeld)) {
			continue
		}
		kept = append(kept, o)
		if o.from.Before(until) && from.Before(o.until) {
			r.violations = append(r.violations, violation{key: key, first: *o, then: *h})
		}
		if o.from.Before(from) && (last == nil || o.from.After(last.from)) {
			last = o
		}
	}
	if last != nil {
		r.handoffs++
		if last.proxy != proxy {
			r.crossHandoffs++
		}
	}
	r.held[key] = append(kept, h)
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

// snapshot returns the violations so far and how many came through
// different proxies.
func (r *resource) snapshot() (vs []violation, cross int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.violations {
		if v.crossProxy() {
			cross++
		}
	}
	return append([]violation(nil), r.violations...), cross
}

// maxProxies bounds the proxies one run spreads its workers over.
const maxProxies = 4

type chaosStats struct {
	acquired, contended, noquorum, otherErr, expired atomic.Int64
	byProxy                                          [maxProxies]atomic.Int64 // holds checked per proxy
}

// loggedErrors bounds the other errors runWorkers logs one by one (a
// killed proxy makes many); all are counted.
const loggedErrors = 5

// runWorkers contends on keys until stop closes. Worker w goes through
// clients[w % len(clients)], one client per proxy, acquisitions and
// releases alike.
func runWorkers(t *testing.T, clients []*redis.Client, res *resource, st *chaosStats, workers int, keys []string, stop <-chan struct{}) *sync.WaitGroup {
	if len(clients) > maxProxies {
		t.Fatalf("%d proxies, at most %d", len(clients), maxProxies)
	}
	rel := redis.NewScript(releaseScript)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			p := w % len(clients)
			cl := clients[p]
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := keys[rng.IntN(len(keys))]
				tok := fmt.Sprintf("p%d-w%d-%d", p, w, i)
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
					if st.otherErr.Add(1) <= loggedErrors {
						t.Logf("worker %d (proxy %d): %v", w, p, err)
					}
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
					st.byProxy[p].Add(1)
					h := res.enter(key, tok, p, got, until)
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

// injection says how faults are injected while the workers run.
type injection struct {
	duration     time.Duration
	pauseBetween time.Duration // on average between two faults
	faults       []fault       // picked at random
	// stop, when set, ends the run early once it holds (checked after
	// each fault): a negative control stops at its first catch.
	stop func(*resource) bool
	// minHolds: a run that checked fewer holds proves little. On a loaded
	// machine the workers get fewer in, so the faults go on past duration
	// until they did (up to three times duration); the test then fails if
	// they still did not.
	minHolds int64
	// settled, when set, must hold before each fault: the injector waits
	// for it (until the run's time is up). A scenario whose faults are
	// meant to leave something intact between them says so here; on a
	// loaded machine the cluster recovers more slowly than faults paced
	// by time alone come.
	settled func() bool
}

// inject runs faults on masters for in.duration (longer for in.minHolds,
// counted in st) and returns what it did.
func inject(in injection, masters []*redisproc.Server, res *resource, st *chaosStats) []string {
	rng := rand.New(rand.NewPCG(42, uint64(time.Now().UnixNano())))
	var log []string
	end := time.Now().Add(in.duration)
	longest := end.Add(2 * in.duration)
	running := func() bool {
		now := time.Now()
		return now.Before(end) || now.Before(longest) && st.acquired.Load() < in.minHolds
	}
	for running() {
		time.Sleep(in.pauseBetween/2 + time.Duration(rng.Int64N(int64(in.pauseBetween))))
		for in.settled != nil && !in.settled() && running() {
			time.Sleep(5 * time.Millisecond)
		}
		f := in.faults[rng.IntN(len(in.faults))]
		log = append(log, time.Now().Format("15:04:05.000")+" "+f(rng, masters))
		if in.stop != nil && in.stop(res) {
			time.Sleep(100 * time.Millisecond) // let the holders in flight be checked
			break
		}
	}
	return log
}

// reportChaos logs the counts of a run, and every fault with -v.
func reportChaos(t *testing.T, res *resource, st *chaosStats, log []string) {
	vs, cross := res.snapshot()
	res.mu.Lock()
	handoffs, crossHandoffs := res.handoffs, res.crossHandoffs
	res.mu.Unlock()
	var per []string
	for p := range st.byProxy {
		if n := st.byProxy[p].Load(); n > 0 {
			per = append(per, fmt.Sprintf("proxy %d: %d", p, n))
		}
	}
	t.Logf("%d faults; %d holds checked (%s), %d hand-overs of which %d across proxies, %d contended, %d NOQUORUM, %d granted too late to use, %d other errors; %d violations (%d across proxies)",
		len(log), st.acquired.Load(), strings.Join(per, ", "), handoffs, crossHandoffs, st.contended.Load(), st.noquorum.Load(),
		st.expired.Load(), st.otherErr.Load(), len(vs), cross)
	if testing.Verbose() {
		for _, l := range log {
			t.Log("fault: " + l)
		}
	}
}

// failOnViolations reports up to 20 violations as test errors.
func failOnViolations(t *testing.T, res *resource) {
	vs, _ := res.snapshot()
	for i, v := range vs {
		if i == 20 {
			t.Errorf("… %d more", len(vs)-20)
			break
		}
		t.Error(v)
	}
}

// TestCheckerOverlaps tests the checker itself: overlaps with any recorded
// holding of the key count, in whatever order the holders entered; windows
// that only touch, or belong to other keys, do not.
func TestCheckerOverlaps(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type hold struct {
		key       string
		proxy     int
		from, end int // ms after t0
	}
	for _, tc := range []struct {
		name            string
		holds           []hold // in the order they enter
		violations      int
		cross, handoffs int
	}{
		{"one after the other", []hold{{"k", 0, 0, 10}, {"k", 1, 10, 20}, {"k", 0, 20, 30}}, 0, 0, 2},
		{"other keys", []hold{{"a", 0, 0, 10}, {"b", 1, 5, 20}}, 0, 0, 0},
		{"overlap", []hold{{"k", 0, 0, 10}, {"k", 1, 5, 20}}, 1, 1, 1},
		// The later reply entered first: only a real overlap counts.
		{"entered out of order", []hold{{"k", 0, 20, 30}, {"k", 1, 0, 10}}, 0, 0, 0},
		{"out of order, overlapping", []hold{{"k", 0, 20, 30}, {"k", 1, 0, 25}}, 1, 1, 0},
		// Overlapping an earlier holder, not the last one entered.
		{"not the last", []hold{{"k", 0, 0, 100}, {"k", 0, 100, 110}, {"k", 1, 50, 60}}, 1, 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResource()
			for i, h := range tc.holds {
				r.enter(h.key, fmt.Sprint("h", i), h.proxy, at(h.from), at(h.end))
			}
			vs, cross := r.snapshot()
			if len(vs) != tc.violations || cross != tc.cross || r.handoffs != tc.handoffs {
				t.Errorf("%d violations (%d across proxies), %d hand-overs; want %d (%d), %d: %v",
					len(vs), cross, r.handoffs, tc.violations, tc.cross, tc.handoffs, vs)
			}
		})
	}
	// A release moves the window's end: a holder entering after it is no
	// violation.
	r := newResource()
	h := r.enter("k", "a", 0, time.Now(), time.Now().Add(time.Hour))
	r.leave(h)
	r.enter("k", "b", 1, time.Now(), time.Now().Add(time.Hour))
	if vs, _ := r.snapshot(); len(vs) != 0 {
		t.Errorf("a holder after a release: %v", vs)
	}
}
