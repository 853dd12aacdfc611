package proxy_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// The single-proxy chaos tests: the mutual-exclusion checker
// (checker_test.go) through one lockproxy, while a fault injector pauses
// (SIGSTOP), kills and restarts masters without their data.
//
// `go test` runs a short version; LOCKPROXY_CHAOS=long (make chaos) a long
// one. A negative control runs the same checker over a deliberately broken
// configuration (no restart quarantine while a majority restarts empty) and
// must see violations: it proves the checker can see them.

// chaosLong reports whether the long version was asked for.
func chaosLong() bool { return os.Getenv("LOCKPROXY_CHAOS") == "long" }

type chaosRun struct {
	masters, workers, keys int
	injection
	opts []clusterOpt
	tls  bool // clients over TLS (the stream transport)
}

func runChaos(t *testing.T, cr chaosRun) (*resource, *chaosStats, []string) {
	c := startClusterWith(t, cr.masters, cr.tls, cr.opts...)
	c.waitVoting(cr.masters)
	cl := c.client(func(o *redis.Options) { o.PoolSize = cr.workers + 4 })
	res := newResource()
	st := &chaosStats{}
	var keys []string
	for i := 0; i < cr.keys; i++ {
		keys = append(keys, fmt.Sprint("chaos:", i))
	}
	stop := make(chan struct{})
	wg := runWorkers(t, []*redis.Client{cl}, res, st, cr.workers, keys, stop)
	log := inject(cr.injection, c.masters, res, st)
	close(stop)
	wg.Wait()
	return res, st, log
}

func TestChaosMutualExclusion(t *testing.T) {
	cr := chaosRun{
		masters: 5, workers: 12, keys: 4,
		injection: injection{
			duration:     8 * time.Second,
			pauseBetween: 300 * time.Millisecond,
			faults:       masterFaults(),
			minHolds:     50,
		},
		// max_ttl bounds the TTLs (≤ 1s here) and is the quarantine.
		opts: []clusterOpt{withQuarantine(time.Second)},
	}
	if chaosLong() {
		cr.duration, cr.workers, cr.keys = 5*time.Minute, 32, 6
	}
	// Both transports: half the run's time each.
	cr.duration /= 2
	for _, useTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "loop", true: "tls"}[useTLS], func(t *testing.T) {
			cr.tls = useTLS
			res, st, log := runChaos(t, cr)
			reportChaos(t, res, st, log)
			failOnViolations(t, res)
			if st.acquired.Load() < cr.minHolds {
				t.Fatalf("only %d holds checked: the run proves little", st.acquired.Load())
			}
		})
	}
}

// masterFaults are the faults a quorum of 5 rides through, and restarts of
// a majority. A majority restarted empty stops the service for max_ttl, so
// it is rarer than the others.
func masterFaults() []fault {
	return []fault{
		pauseSome(1, 300*time.Millisecond),
		pauseSome(1, 100*time.Millisecond),
		pauseSome(2, 200*time.Millisecond),
		pauseSome(2, 50*time.Millisecond),
		pauseSome(3, 150*time.Millisecond),
		restartSome(1, 0),
		restartSome(1, 200*time.Millisecond),
		restartSome(2, 0),
		restartSome(3, 0),
	}
}

// The negative control: the same checker over a lockproxy whose restart
// quarantine is off while a majority of masters restarts empty must see two
// holders at once.
func TestChaosCheckerCatchesBrokenQuorum(t *testing.T) {
	cr := chaosRun{
		masters: 5, workers: 12, keys: 3,
		injection: injection{
			duration:     10 * time.Second, // stops at the first violation
			pauseBetween: 300 * time.Millisecond,
			faults:       []fault{restartSome(3, 0)},
			stop:         func(r *resource) bool { vs, _ := r.snapshot(); return len(vs) > 0 },
		},
		opts: []clusterOpt{withQuarantine(time.Second), func(_ *proxy.Config, qc *quorum.Config) {
			qc.Quarantine = false // the deliberate bug
		}},
	}
	res, st, log := runChaos(t, cr)
	reportChaos(t, res, st, log)
	vs, _ := res.snapshot()
	if len(vs) == 0 {
		t.Fatal("the checker saw no violation over a broken configuration: it cannot be trusted")
	}
	t.Logf("first violation caught: %s", vs[0])
}
