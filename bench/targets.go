package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	goredsync "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Target is what a workload's lock operations go to.
type Target string

// The targets a run compares.
const (
	// Lockproxy is a single-node client pointed at lockproxy.
	Lockproxy Target = "lockproxy"
	// Redsync is go-redsync/redsync v4 over go-redis pools, one per master.
	Redsync Target = "redsync"
	// Direct is a single-node client against the first master alone.
	Direct Target = "direct"
	// Twemproxy is redis-benchmark against twemproxy (nutcracker) in front
	// of the first master alone (twemproxy.go). Only scenario 1 measures
	// it, and only when the twemproxy scenario is selected: it is a
	// forwarding proxy, so the Go lock workloads through it would measure
	// direct Redis plus one hop.
	Twemproxy Target = "twemproxy"
	// LockproxyOne is redis-benchmark against a second lockproxy whose
	// only master is the first one (a quorum of 1): the job twemproxy
	// does, so that scenario 1 can tell lockproxy's cost per request
	// apart from the cost of its fan-out (proxycpu.go). It runs whenever
	// scenario 1 measures twemproxy and lockproxy; it is not a -targets
	// choice of its own.
	LockproxyOne Target = "lockproxy1"
	// Floor is redis-benchmark against the floor fan-out proxy (package
	// bench/floor) over all the masters: the fan-out alone, with none of
	// lockproxy's safety work, so that scenario 1 can tell what lockproxy's
	// own work costs above the least a fan-out costs on this machine. It
	// runs with lockproxy1 when Config.FloorBin is set; it is not a
	// -targets choice of its own.
	Floor Target = "floor"
)

// AllTargets lists every target in report order.
var AllTargets = []Target{Lockproxy, Redsync, Direct, Twemproxy}

// lockTTL is the TTL of every lock the workloads take (PX 10000).
const lockTTL = 10 * time.Second

// releaseScript is the compare-and-delete release most single-node lock code
// uses. Run sends EVALSHA and falls back to EVAL on NOSCRIPT.
var releaseScript = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

// errNotReleased means a release found the lock no longer held by its token.
var errNotReleased = errors.New("bench: release found the lock gone")

// locker takes and gives back one lock at a time; each worker owns one.
type locker interface {
	// lock tries to take key: false without error means somebody else
	// holds it. A retrying locker keeps trying until it succeeds or ctx
	// ends.
	lock(ctx context.Context, key string) (bool, error)
	// unlock releases the lock the last successful lock took.
	unlock(ctx context.Context) error
}

// newClient returns a go-redis client as a benchmark user would configure it
// (RESP3, CLIENT SETINFO on connect), with a pool as large as the number of
// workers, no automatic retries (they would hide errors) and deadlines so no
// call can hang the run.
func newClient(addr string, poolSize int) *redis.Client {
	return redis.NewClient(clientOptions(addr, poolSize))
}

// clientOptions are newClient's options, for a client that needs to change
// one (the protocol).
func clientOptions(addr string, poolSize int) *redis.Options {
	return &redis.Options{
		Addr:                     addr,
		PoolSize:                 poolSize,
		MaxRetries:               -1,
		DialTimeout:              2 * time.Second,
		ReadTimeout:              2 * time.Second,
		WriteTimeout:             2 * time.Second,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	}
}

// backoff is the pause between two attempts on a contended key: 0.5–1.5ms,
// jittered so that waiting workers do not retry in lockstep.
func backoff(int) time.Duration {
	return 500*time.Microsecond + rand.N(time.Millisecond)
}

// retryMode says what a locker does when the key is held.
type retryMode int

const (
	// noRetry makes one attempt.
	noRetry retryMode = iota
	// retryBackoff retries after backoff() until the lock is taken.
	retryBackoff
	// retryDefault retries as the client library does by default: redsync
	// 32 tries 50–250ms apart; single-node clients have no retry of their
	// own, so for them it is retryBackoff.
	retryDefault
)

// lockerFactory makes the lockers of one target and owns their clients.
type lockerFactory struct {
	newLocker func(worker int, retry retryMode) locker
	close     func()
}

// newSingleFactory makes go-redis lockers against one address (lockproxy or
// a direct master).
func newSingleFactory(addr string, workers int) *lockerFactory {
	c := newClient(addr, workers)
	return &lockerFactory{
		newLocker: func(worker int, retry retryMode) locker {
			l := &singleLocker{c: c, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(worker)))}
			if retry != noRetry {
				return retrying{l}
			}
			return l
		},
		close: func() { _ = c.Close() },
	}
}

// singleLocker is single-node lock code: SET NX PX, then compare-and-delete.
type singleLocker struct {
	c          *redis.Client
	rng        *rand.Rand
	key, token string
}

func (l *singleLocker) lock(ctx context.Context, key string) (bool, error) {
	l.token = strconv.FormatUint(l.rng.Uint64(), 36)
	err := l.c.Do(ctx, "SET", key, l.token, "NX", "PX", lockTTL.Milliseconds()).Err()
	switch {
	case err == redis.Nil:
		return false, nil
	case err != nil:
		return false, err
	}
	l.key = key
	return true, nil
}

func (l *singleLocker) unlock(ctx context.Context) error {
	n, err := releaseScript.Run(ctx, l.c, []string{l.key}, l.token).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errNotReleased
	}
	return nil
}

// retrying retries a single-node locker on "not acquired" after a backoff,
// the loop single-node lock code wraps around SET NX.
type retrying struct{ *singleLocker }

func (r retrying) lock(ctx context.Context, key string) (bool, error) {
	for {
		ok, err := r.singleLocker.lock(ctx, key)
		if ok || err != nil {
			return ok, err
		}
		t := time.NewTimer(backoff(0))
		select {
		case <-ctx.Done():
			t.Stop()
			return false, nil
		case <-t.C:
		}
	}
}

// newRedsyncFactory makes redsync lockers over one go-redis pool per master.
// Without retry a lock is one attempt (WithTries(1)). With retryBackoff
// redsync retries by itself with the same backoff as the single-node loop, so
// the comparison is between protocols, not retry policies; with retryDefault
// it keeps its default policy.
func newRedsyncFactory(masters []string, workers int) *lockerFactory {
	clients := make([]*redis.Client, len(masters))
	pools := make([]rsredis.Pool, len(masters))
	for i, addr := range masters {
		clients[i] = newClient(addr, workers)
		pools[i] = goredsync.NewPool(clients[i])
	}
	rs := redsync.New(pools...)
	opts := map[retryMode][]redsync.Option{
		noRetry:      {redsync.WithExpiry(lockTTL), redsync.WithTries(1)},
		retryBackoff: {redsync.WithExpiry(lockTTL), redsync.WithTries(math.MaxInt32), redsync.WithRetryDelayFunc(backoff)},
		retryDefault: {redsync.WithExpiry(lockTTL)},
	}
	return &lockerFactory{
		newLocker: func(_ int, r retryMode) locker {
			return &redsyncLocker{rs: rs, opts: opts[r]}
		},
		close: func() {
			for _, c := range clients {
				_ = c.Close()
			}
		},
	}
}

// redsyncLocker takes a new redsync mutex for every lock, as application
// code that locks a different resource each time does.
type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
	m    *redsync.Mutex
}

func (l *redsyncLocker) lock(ctx context.Context, key string) (bool, error) {
	m := l.rs.NewMutex(key, l.opts...)
	err := m.LockContext(ctx)
	if err == nil {
		l.m = m
		return true, nil
	}
	// Only a failure to talk to the masters is an error; a lock held by
	// somebody else (ErrTaken, ErrNodeTaken, ErrFailed) is "not acquired".
	var re *redsync.RedisError
	if errors.As(err, &re) {
		return false, err
	}
	return false, nil
}

func (l *redsyncLocker) unlock(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return errNotReleased
	}
	return nil
}

// newFactory returns the locker factory of target t on cluster c.
func newFactory(t Target, c *cluster, workers int) (*lockerFactory, error) {
	switch t {
	case Lockproxy:
		if c.proxy == nil {
			return nil, errors.New("bench: lockproxy is not running")
		}
		return newSingleFactory(c.proxy.addr, workers), nil
	case Direct:
		return newSingleFactory(c.masters[0].Addr, workers), nil
	case Redsync:
		addrs := make([]string, len(c.masters))
		for i, m := range c.masters {
			addrs[i] = m.Addr
		}
		return newRedsyncFactory(addrs, workers), nil
	case Twemproxy, LockproxyOne, Floor:
		return nil, fmt.Errorf("bench: %s is measured by redis-benchmark only (scenario 1)", t)
	}
	return nil, fmt.Errorf("bench: unknown target %q", t)
}
