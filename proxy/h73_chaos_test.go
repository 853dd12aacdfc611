package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestH73MixedChaos (opt-in, LOCKPROXY_H73=1): the mutual-exclusion checker
// with the lock flows real clients use, not only SET NX and a release:
// acquisitions by SET NX, bsm/redislock's obtain (a re-take of the same
// token), Spring's obtain and Redisson's re-entrant hash lock, retried with
// the same token after NOQUORUM; extends by SET XX, bsm refresh,
// redis-py extend, redsync touchWithSetNX, rueidislock's PEXPIREAT, Spring
// renew, Redisson renewal and re-entry; releases by script, WATCH/MULTI/EXEC
// and Redisson unlock. Each token goes through one proxy. Masters are
// paused, killed and restarted empty; the binary proxy is paused and killed.
// Not PEXPIRE: tokenless, it extends whoever holds the key when the masters
// run it, which a paused master or a key's queue can put after the holder's
// expiry and another client's SET NX (it did, twice in four 90s runs).
// LOCKPROXY_H73_DURATION (20s) and LOCKPROXY_H73_MASTERS (5) set the run.
func TestH73MixedChaos(t *testing.T) {
	if os.Getenv("LOCKPROXY_H73") == "" {
		t.Skip("opt-in: LOCKPROXY_H73=1")
	}
	d := 20 * time.Second
	if v, err := time.ParseDuration(os.Getenv("LOCKPROXY_H73_DURATION")); err == nil {
		d = v
	}
	n := 5
	if v, err := strconv.Atoi(os.Getenv("LOCKPROXY_H73_MASTERS")); err == nil {
		n = v
	}
	settings := proxySettings{maxTTL: time.Second, quarantine: true}
	ms := redisproc.ForTest(t, n)
	var clients []*redis.Client
	for _, useTLS := range []bool{false, true} {
		c := startFront(t, ms, useTLS, settings.opt())
		c.waitVoting(n)
		clients = append(clients, c.client(func(o *redis.Options) { o.PoolSize = 16 }))
	}
	bin := buildLockproxy(t)
	p := startBinProxy(t, bin, ms, settings)
	p.waitVoting(n)
	bcl := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, PoolSize: 16})
	t.Cleanup(func() { bcl.Close() })
	clients = append(clients, bcl)
	bins := []*binProxy{p}

	res := newResource()
	st := &chaosStats{}
	stop := make(chan struct{})
	sc := loadH73Scripts(t)
	var wg sync.WaitGroup
	for w := 0; w < 18; w++ {
		wg.Go(func() { h73Worker(t, sc, clients, w, res, st, stop) })
	}
	in := injection{duration: d, pauseBetween: 300 * time.Millisecond, faults: append(masterFaults(), proxyFaults(bins)...)}
	log := inject(in, ms, res, st)
	close(stop)
	_ = p.Resume()
	wg.Wait()
	reportChaos(t, res, st, log)
	failOnViolations(t, res)
	t.Logf("hash-lock holds %d, re-entries %d, extends granted %d, refused %d, NOQUORUM %d",
		h73st.hashHolds.Load(), h73st.reentries.Load(), h73st.extOK.Load(), h73st.extNo.Load(), h73st.extNQ.Load())
	if vs, _ := res.snapshot(); len(vs) > 0 {
		for _, l := range log {
			t.Log("fault: " + l)
		}
		// Every operation on the first violation's key around it.
		lo, hi := vs[0].first.from.Add(-3*time.Second), vs[0].then.until.Add(time.Second)
		h73tr.mu.Lock()
		for _, o := range h73tr.ops {
			if o.key == vs[0].key && o.sent.After(lo) && o.sent.Before(hi) {
				t.Logf("op: %s %s sent %s got %s: %v %v", o.tok, o.what, o.sent.Format("05.000"), o.got.Format("05.000"), o.out, o.err)
			}
		}
		h73tr.mu.Unlock()
	}
}

type h73Scripts struct {
	obtain, refresh, spring, springRenew, pyExtend, touchNX, rueExtend, release, rTry, rRenew, rUnlock *redis.Script
}

func loadH73Scripts(t *testing.T) h73Scripts {
	return h73Scripts{
		obtain:      corpusScript(t, "bsm-redislock-v0.9.4_obtain"),
		refresh:     corpusScript(t, "bsm-redislock_refresh"),
		spring:      corpusScript(t, "spring-int-7_obtain"),
		springRenew: corpusScript(t, "spring-int-7_renew"),
		pyExtend:    corpusScript(t, "redis-py_extend"),
		touchNX:     corpusScript(t, "redsync-v4.18_touchWithSetNX"),
		rueExtend:   corpusScript(t, "rueidislock_extend"),
		release:     redis.NewScript(releaseScript),
		rTry:        corpusScript(t, "redisson-4.x_tryLockInner"),
		rRenew:      corpusScript(t, "redisson-3.40_renewExpiration"),
		rUnlock:     corpusScript(t, "redisson-3.23_unlockInner"),
	}
}

// h73Trace records every operation, to show those on a violation's key.
type h73Trace struct {
	mu  sync.Mutex
	ops []h73Op
}

type h73Op struct {
	key, tok, what string
	sent, got      time.Time
	out            any
	err            error
}

func (tr *h73Trace) add(key, tok, what string, sent time.Time, out any, err error) {
	tr.mu.Lock()
	tr.ops = append(tr.ops, h73Op{key, tok, what, sent, time.Now(), out, err})
	tr.mu.Unlock()
}

var (
	h73tr = &h73Trace{}
	h73st struct{ hashHolds, reentries, extOK, extNo, extNQ atomic.Int64 }
)

func isNoQuorum(err error) bool { return err != nil && strings.HasPrefix(err.Error(), "NOQUORUM") }

// yesOf reads a script's reply as a yes: OK, 1, true.
func yesOf(v any, err error) (bool, error) {
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch x := v.(type) {
	case string:
		return x == "OK", nil
	case int64:
		return x == 1, nil
	case bool:
		return x, nil
	}
	return false, nil
}

func h73Worker(t *testing.T, sc h73Scripts, clients []*redis.Client, w int, res *resource, st *chaosStats, stop <-chan struct{}) {
	p := w % len(clients)
	cl := clients[p]
	rng := rand.New(rand.NewPCG(uint64(w), 73))
	ctx := context.Background()
	drift := func(ttl time.Duration) time.Duration { return ttl - quorum.Drift(ttl, 0.01) }
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		hash := rng.IntN(4) == 0
		flavour := rng.IntN(3)
		var key string
		if hash {
			key = fmt.Sprint("h73h:", rng.IntN(3))
		} else {
			key = fmt.Sprint("h73s:", rng.IntN(5))
		}
		tok := fmt.Sprintf("p%d-w%d-%d", p, w, i)
		ttl := time.Duration(200+rng.IntN(800)) * time.Millisecond
		ms := strconv.FormatInt(ttl.Milliseconds(), 10)
		var sent time.Time
		var ok bool
		var err error
		for try := 0; try < 3; try++ { // same token, as bsm and Redisson retry
			sent = time.Now()
			switch {
			case hash:
				_, err = sc.rTry.Run(ctx, cl, []string{key}, ms, tok).Result()
				ok = errors.Is(err, redis.Nil)
				if ok || err == nil {
					err = nil
				}
			case flavour == 0:
				ok, err = cl.SetNX(ctx, key, tok, ttl).Result()
			case flavour == 1:
				ok, err = yesOf(sc.obtain.Run(ctx, cl, []string{key}, tok, strconv.Itoa(len(tok)), ms).Result())
			default:
				ok, err = yesOf(sc.spring.Run(ctx, cl, []string{key}, tok, ms).Result())
			}
			h73tr.add(key, tok, fmt.Sprintf("acquire h%v f%d try%d", hash, flavour, try), sent, ok, err)
			if ok || (err != nil && !isNoQuorum(err)) {
				break
			}
			time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
		}
		got := time.Now()
		switch {
		case isNoQuorum(err):
			st.noquorum.Add(1)
			releaseH73(ctx, sc, cl, key, tok, hash, 1)
			continue
		case err != nil:
			if st.otherErr.Add(1) <= loggedErrors {
				t.Logf("worker %d (proxy %d): %v", w, p, err)
			}
			time.Sleep(10 * time.Millisecond)
			releaseH73(ctx, sc, cl, key, tok, hash, 1)
			continue
		case !ok:
			st.contended.Add(1)
			time.Sleep(time.Duration(1+rng.IntN(10)) * time.Millisecond)
			continue
		}
		until := sent.Add(drift(ttl))
		if !got.Before(until) {
			st.expired.Add(1)
			releaseH73(ctx, sc, cl, key, tok, hash, 1)
			continue
		}
		st.acquired.Add(1)
		st.byProxy[p].Add(1)
		if hash {
			h73st.hashHolds.Add(1)
		}
		h := res.enter(key, tok, p, got, until)
		depth := 1
		// Extends while held: each granted one moves the window's end to
		// its own send + its TTL - drift.
		for n := rng.IntN(4); n > 0; n-- {
			left := time.Until(h.until)
			if left <= 0 {
				break
			}
			time.Sleep(time.Duration(rng.Float64() * 0.8 * float64(left)))
			if !time.Now().Before(h.until) {
				break
			}
			ettl := time.Duration(200+rng.IntN(800)) * time.Millisecond
			ems := strconv.FormatInt(ettl.Milliseconds(), 10)
			esent := time.Now()
			var eok bool
			var eerr error
			ecase := rng.IntN(8)
			if hash {
				if rng.IntN(2) == 0 {
					eok, eerr = yesOf(sc.rRenew.Run(ctx, cl, []string{key}, ems, tok).Result())
				} else {
					_, eerr = sc.rTry.Run(ctx, cl, []string{key}, ems, tok).Result()
					eok = errors.Is(eerr, redis.Nil)
					if eok {
						eerr = nil
						depth++
						h73st.reentries.Add(1)
					}
				}
			} else {
				switch ecase {
				case 0:
					eok, eerr = yesOf(cl.Do(ctx, "SET", key, tok, "XX", "PX", ems).Result())
				case 1:
					// Not PEXPIRE (see above).
					eok, eerr = yesOf(cl.Do(ctx, "SET", key, tok, "PX", ems, "XX").Result())
				case 2:
					eok, eerr = yesOf(sc.refresh.Run(ctx, cl, []string{key}, tok, ems).Result())
				case 3:
					eok, eerr = yesOf(sc.pyExtend.Run(ctx, cl, []string{key}, tok, ems, "1").Result())
				case 4:
					eok, eerr = yesOf(sc.touchNX.Run(ctx, cl, []string{key}, tok, ems).Result())
				case 5:
					at := strconv.FormatInt(esent.Add(ettl).UnixMilli(), 10)
					eok, eerr = yesOf(sc.rueExtend.Run(ctx, cl, []string{key}, tok, at).Result())
				case 6:
					eok, eerr = yesOf(sc.springRenew.Run(ctx, cl, []string{key}, tok, ems).Result())
				default:
					eok, eerr = yesOf(sc.obtain.Run(ctx, cl, []string{key}, tok, strconv.Itoa(len(tok)), ems).Result())
				}
			}
			h73tr.add(key, tok, fmt.Sprintf("extend e%d ttl %v", ecase, ettl), esent, eok, eerr)
			if eerr != nil && !isNoQuorum(eerr) && st.otherErr.Add(1) <= loggedErrors {
				t.Logf("worker %d (proxy %d) extend: %v", w, p, eerr)
			}
			switch {
			case eok:
				h73st.extOK.Add(1)
			case isNoQuorum(eerr):
				h73st.extNQ.Add(1)
			default:
				h73st.extNo.Add(1)
			}
			if eok {
				// The old window ends now; the extension's is checked
				// against every other holder as a new holding.
				nu := esent.Add(drift(ettl))
				res.leave(h)
				if now := time.Now(); now.Before(nu) {
					h = res.enter(key, tok+"+", p, now, nu)
				}
			}
		}
		left := time.Until(h.until)
		if left > 0 {
			work := time.Duration(rng.IntN(30)) * time.Millisecond
			if rng.IntN(5) == 0 {
				work = time.Duration(rng.Float64() * 1.1 * float64(left))
			}
			time.Sleep(work)
		}
		res.leave(h)
		h73tr.add(key, tok, "release", time.Now(), nil, nil)
		releaseH73(ctx, sc, cl, key, tok, hash, depth)
	}
}

// releaseH73 releases tok's lock on key: for a hash, depth unlocks.
func releaseH73(ctx context.Context, sc h73Scripts, cl *redis.Client, key, tok string, hash bool, depth int) {
	if hash {
		for ; depth > 0; depth-- {
			sc.rUnlock.Run(ctx, cl, []string{key, "redisson_lock__channel:{" + key + "}"}, "0", "1000", tok, "publish")
		}
		return
	}
	if len(tok)%2 == 0 {
		sc.release.Run(ctx, cl, []string{key}, tok)
		return
	}
	cl.Watch(ctx, func(tx *redis.Tx) error {
		v, err := tx.Get(ctx, key).Result()
		if err != nil || v != tok {
			return err
		}
		_, err = tx.TxPipelined(ctx, func(pp redis.Pipeliner) error {
			pp.Del(ctx, key)
			return nil
		})
		return err
	}, key)
}
