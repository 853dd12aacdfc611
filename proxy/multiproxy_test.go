package proxy_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

// Mutual exclusion through several lockproxy processes on one master set,
// as users scale out: the checker of checker_test.go with workers spread
// over the proxies, so that one key passes from a holder of one proxy to a
// holder of another, while masters are paused, killed and restarted empty
// and proxies are paused (SIGSTOP) and killed.
//
// One proxy runs in this process (so the race detector watches the engine
// and front end under several proxies' load); the others are the lockproxy
// binary, which can be paused and killed like the real thing. A paused
// proxy wakes up to replies that are late, masters that restarted under
// it, and clients that gave up.
//
// `go test` runs about 8s; LOCKPROXY_CHAOS=long (make chaos) 5 minutes.
// The negative control turns the restart quarantine off on every proxy
// while majorities restart empty, and must catch two holders granted by
// different proxies.

type multiRun struct {
	masters, workers, keys int
	inProcess, binaries    int // proxies of each kind; in-process ones come first
	settings               proxySettings
	injection
	// proxyFaults are faults on the binary proxies, added to
	// injection.faults once the proxies run.
	proxyFaults func(bins []*binProxy) []fault
}

func runMulti(t *testing.T, mr multiRun) (*resource, *chaosStats, []string) {
	ms := redisproc.ForTest(t, mr.masters)
	var bin string
	if mr.binaries > 0 {
		bin = buildLockproxy(t)
	}
	perProxy := mr.workers/(mr.inProcess+mr.binaries) + 4
	var clients []*redis.Client
	for i := 0; i < mr.inProcess; i++ {
		c := startFront(t, ms, false, mr.settings.opt())
		c.waitVoting(mr.masters)
		clients = append(clients, c.client(func(o *redis.Options) { o.PoolSize = perProxy }))
	}
	var bins []*binProxy
	for i := 0; i < mr.binaries; i++ {
		p := startBinProxy(t, bin, ms, mr.settings)
		p.waitVoting(mr.masters)
		bins = append(bins, p)
		cl := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, PoolSize: perProxy})
		t.Cleanup(func() { cl.Close() })
		clients = append(clients, cl)
	}
	in := mr.injection
	if mr.proxyFaults != nil {
		in.faults = append(append([]fault(nil), in.faults...), mr.proxyFaults(bins)...)
	}
	res := newResource()
	st := &chaosStats{}
	var keys []string
	for i := 0; i < mr.keys; i++ {
		keys = append(keys, fmt.Sprint("multi:", i))
	}
	stop := make(chan struct{})
	wg := runWorkers(t, clients, res, st, mr.workers, keys, stop)
	log := inject(in, ms, res, st)
	close(stop)
	// A worker may wait on a proxy that a fault left paused; none does
	// (every fault resumes what it paused), but make sure before waiting.
	for _, p := range bins {
		_ = p.Resume()
	}
	wg.Wait()
	return res, st, log
}

// proxyFaults pause and kill binary proxies, alone or while masters fail.
func proxyFaults(bins []*binProxy) []fault {
	return []fault{
		pauseProxies(bins, 1, 100*time.Millisecond),
		pauseProxies(bins, 1, 400*time.Millisecond),
		pauseProxies(bins, 2, 250*time.Millisecond),
		// Longer than every TTL (≤ 1s): the paused proxy's grants in
		// flight reach their clients with no validity left.
		pauseProxies(bins, 1, 1500*time.Millisecond),
		// The proxy wakes up to masters that restarted empty under it, or
		// to the late replies of paused ones.
		whileProxyPaused(bins, restartSome(3, 0)),
		whileProxyPaused(bins, restartSome(1, 0)),
		whileProxyPaused(bins, pauseSome(2, 200*time.Millisecond)),
		killProxy(bins, 200*time.Millisecond),
	}
}

// pauseProxies SIGSTOPs k of the binary proxies for d.
func pauseProxies(bins []*binProxy, k int, d time.Duration) fault {
	return func(rng *rand.Rand, _ []*redisproc.Server) string {
		pick := rng.Perm(len(bins))[:min(k, len(bins))]
		for _, i := range pick {
			bins[i].Pause()
		}
		time.Sleep(d)
		for _, i := range pick {
			bins[i].Resume()
		}
		return fmt.Sprintf("paused binary proxies %v for %v", pick, d)
	}
}

// whileProxyPaused runs f with one binary proxy paused, and resumes it
// 100ms after f is done.
func whileProxyPaused(bins []*binProxy, f fault) fault {
	return func(rng *rand.Rand, ms []*redisproc.Server) string {
		i := rng.IntN(len(bins))
		bins[i].Pause()
		what := f(rng, ms)
		time.Sleep(100 * time.Millisecond)
		bins[i].Resume()
		return fmt.Sprintf("binary proxy %d paused while: %s", i, what)
	}
}

// killProxy SIGKILLs a binary proxy, possibly in the middle of
// acquisitions, and starts it again after down.
func killProxy(bins []*binProxy, down time.Duration) fault {
	return func(rng *rand.Rand, _ []*redisproc.Server) string {
		i := rng.IntN(len(bins))
		bins[i].Kill()
		time.Sleep(down)
		if err := bins[i].Restart(); err != nil {
			return fmt.Sprintf("killed binary proxy %d; restart failed: %v", i, err)
		}
		return fmt.Sprintf("killed binary proxy %d, restarted after %v", i, down)
	}
}

func TestChaosMultiProxyMutualExclusion(t *testing.T) {
	mr := multiRun{
		masters: 5, workers: 15, keys: 4,
		inProcess: 1, binaries: 2,
		settings: proxySettings{maxTTL: time.Second, quarantine: true},
		injection: injection{
			duration:     8 * time.Second,
			pauseBetween: 300 * time.Millisecond,
			faults:       masterFaults(),
			minHolds:     100,
		},
		proxyFaults: proxyFaults,
	}
	if chaosLong() {
		mr.duration, mr.workers, mr.keys = 5*time.Minute, 33, 6
	}
	res, st, log := runMulti(t, mr)
	reportChaos(t, res, st, log)
	failOnViolations(t, res)
	for _, l := range log {
		if strings.Contains(l, "failed") {
			t.Errorf("fault: %s", l)
		}
	}
	if st.acquired.Load() < mr.minHolds {
		t.Fatalf("only %d holds checked: the run proves little", st.acquired.Load())
	}
	for p := 0; p < mr.inProcess+mr.binaries; p++ {
		if st.byProxy[p].Load() == 0 {
			t.Errorf("no hold through proxy %d: the workers were not spread over the proxies", p)
		}
	}
	res.mu.Lock()
	cross := res.crossHandoffs
	res.mu.Unlock()
	if cross < 20 {
		t.Errorf("only %d hand-overs of a key between proxies: the proxies hardly contended", cross)
	}
}

// The negative control: the same run with the restart quarantine off on
// every proxy, while majorities restart empty, must catch two holders of
// one key granted by different proxies; it stops at the first one.
func TestChaosMultiProxyCheckerCatchesBrokenQuorum(t *testing.T) {
	mr := multiRun{
		masters: 5, workers: 15, keys: 3,
		inProcess: 1, binaries: 2,
		settings: proxySettings{maxTTL: time.Second, quarantine: false}, // the deliberate bug
		injection: injection{
			duration:     10 * time.Second,
			pauseBetween: 300 * time.Millisecond,
			faults:       []fault{restartSome(3, 0)},
			stop:         func(r *resource) bool { _, cross := r.snapshot(); return cross > 0 },
		},
	}
	res, st, log := runMulti(t, mr)
	reportChaos(t, res, st, log)
	vs, cross := res.snapshot()
	if cross == 0 {
		t.Fatalf("the checker saw no two holders from different proxies over a broken configuration (%d from one proxy): it cannot be trusted", len(vs))
	}
	for _, v := range vs {
		if v.crossProxy() {
			t.Logf("first violation across proxies: %s", v)
			break
		}
	}
}
