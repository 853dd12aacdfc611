package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The three ways a client waits for a lock someone else holds, each as its
// library does it, with the library's own scripts (scripts/, verbatim from
// the clients' corpus: waitstyles_test.go checks their sha1s):
//
//   - pub/sub, as Redisson 4 does: tryLockInner (a hash lock), and when it
//     answers the lock's PTTL, SUBSCRIBE to redisson_lock__channel:{name},
//     try again, then wait for a message (at most the PTTL) and try again
//     after each; once taken, UNSUBSCRIBE. The holder releases with
//     unlockInner, ARGV[4] = "publish": the script PUBLISHes 0 on the
//     channel; then it deletes its unlock latch, as Redisson does;
//   - BLPOP, as python-redis-lock does: SET lock:<name> id NX EX, and while
//     refused BLPOP lock-signal:<name> (timeout: the lock's expiry), then
//     try again. The holder releases with its unlock script, which DELs,
//     LPUSHes and PEXPIREs the signal list before deleting the lock;
//   - polling, the baseline: SET NX PX every 50ms until granted; the
//     holder releases with the compare-and-delete script.
//
// Every wait ends after waitTimeout at the latest, counted as missed: a
// library would wait longer (Redisson the lock's PTTL, python-redis-lock
// its expiry), which only makes a missed wake-up cost more.

var (
	//go:embed scripts/redisson-4.x_tryLockInner.lua
	redissonTryLockBody string
	//go:embed scripts/redisson-4.x_unlockInner.lua
	redissonUnlockBody string
	//go:embed scripts/python-redis-lock_unlock.lua
	pyLockUnlockBody string

	redissonTryLock = redis.NewScript(redissonTryLockBody)
	redissonUnlock  = redis.NewScript(redissonUnlockBody)
	pyLockUnlock    = redis.NewScript(pyLockUnlockBody)
)

// WaitStyle names how a waiter learns that a lock was released.
type WaitStyle string

// The waiting styles of the waiters scenario, in report order.
const (
	WaitPubSub WaitStyle = "pubsub"    // Redisson 4
	WaitBLPOP  WaitStyle = "blpop"     // python-redis-lock
	WaitPoll   WaitStyle = "poll-50ms" // SET NX PX every 50ms
)

// WaitStyles lists the styles in the order each round runs them.
var WaitStyles = []WaitStyle{WaitPubSub, WaitBLPOP, WaitPoll}

// Settings of the libraries, as they ship.
const (
	pollInterval = 50 * time.Millisecond
	// waitTimeout bounds one wait for a wake-up (see above).
	waitTimeout = time.Second
	// redissonLatchMs is the PX of Redisson's unlock latch, ARGV[5]:
	// (timeout 3000 + retryInterval 1500) × retryAttempts 3, its defaults.
	redissonLatchMs = 13500
	// pySignalExpireMs is python-redis-lock's signal_expire default.
	pySignalExpireMs = 1000
)

// wake is how a wait ended.
type wake uint8

const (
	wokeHint    wake = iota // a message, a popped signal
	wokeTimeout             // waitTimeout passed without a hint
	wokePoll                // a poller's interval passed
)

// waitLock is one client of one lock, on one proxy, in one style.
type waitLock interface {
	// try makes one acquisition attempt: false without error means held.
	try(ctx context.Context) (bool, error)
	// park readies the client to wait after a refused attempt; a style
	// whose library tries again once ready reports triesAfterPark.
	park(ctx context.Context) error
	triesAfterPark() bool
	// wait blocks until a hint that the lock may be free, or a timeout.
	wait(ctx context.Context) (wake, error)
	// unpark ends waiting once the lock is taken; a pub/sub client counts
	// the messages of that wait in c.
	unpark(ctx context.Context, c *WaitCounts) error
	release(ctx context.Context) error
	close()
}

// newWaitLock returns a client of lock name through the proxy at addr.
func newWaitLock(style WaitStyle, addr, name string) (waitLock, error) {
	id := strconv.FormatUint(rand.Uint64(), 16)
	switch style {
	case WaitPubSub:
		// Redisson speaks RESP2 unless told otherwise.
		o := clientOptions(addr, 2)
		o.Protocol = 2
		c := redis.NewClient(o)
		return &redissonLock{c: c, ps: c.Subscribe(context.Background()), key: name,
			channel: "redisson_lock__channel:{" + name + "}", id: id + ":1"}, nil
	case WaitBLPOP:
		return &pyLock{c: newClient(addr, 2), key: "lock:" + name, signal: "lock-signal:" + name, id: id}, nil
	case WaitPoll:
		return &pollLock{c: newClient(addr, 2), key: name}, nil
	}
	return nil, fmt.Errorf("bench: unknown wait style %q", style)
}

// redissonLock is Redisson 4's RLock.lock() and unlock().
type redissonLock struct {
	c            *redis.Client
	ps           *redis.PubSub // its own connection, as Redisson's pub/sub pool
	key, channel string
	id           string // Redisson's "<client uuid>:<thread id>"
	msgs         int64  // messages on channel since park
}

func (l *redissonLock) try(ctx context.Context) (bool, error) {
	err := redissonTryLock.Run(ctx, l.c, []string{l.key}, lockTTL.Milliseconds(), l.id).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return true, nil // nil: taken (or re-entered)
	case err == nil:
		return false, nil // the holder's PTTL
	}
	return false, err
}

func (l *redissonLock) triesAfterPark() bool { return true }

func (l *redissonLock) park(ctx context.Context) error {
	l.msgs = 0
	if err := l.ps.Subscribe(ctx, l.channel); err != nil {
		return err
	}
	_, err := l.receiveUntil(ctx, waitTimeout, "subscribe")
	return err
}

// receiveUntil reads the subscription until a confirmation of kind (""
// for none: until a message) or timeout, counting the messages on the
// lock's channel. It reports whether a message came.
func (l *redissonLock) receiveUntil(ctx context.Context, timeout time.Duration, kind string) (bool, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, nil
		}
		v, err := l.ps.ReceiveTimeout(ctx, left)
		if err != nil {
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() && ctx.Err() == nil {
				if kind != "" {
					return false, fmt.Errorf("no %s confirmation within %v", kind, timeout)
				}
				return false, nil
			}
			return false, err
		}
		switch m := v.(type) {
		case *redis.Message:
			if m.Channel == l.channel {
				l.msgs++
				if kind == "" {
					return true, nil
				}
			}
		case *redis.Subscription:
			if kind != "" && m.Kind == kind && m.Channel == l.channel {
				return false, nil
			}
		}
	}
}

func (l *redissonLock) wait(ctx context.Context) (wake, error) {
	got, err := l.receiveUntil(ctx, waitTimeout, "")
	if err != nil || !got {
		return wokeTimeout, err
	}
	return wokeHint, nil
}

func (l *redissonLock) unpark(ctx context.Context, c *WaitCounts) error {
	if err := l.ps.Unsubscribe(ctx, l.channel); err != nil {
		return err
	}
	_, err := l.receiveUntil(ctx, waitTimeout, "unsubscribe")
	// One release happened while this client waited: one message, and
	// any other was a duplicate of it.
	c.Messages += l.msgs
	c.Extra += max(0, l.msgs-1)
	return err
}

func (l *redissonLock) release(ctx context.Context) error {
	latch := "redisson_unlock_latch:{" + l.key + "}:" + strconv.FormatUint(rand.Uint64(), 16)
	n, err := redissonUnlock.Run(ctx, l.c, []string{l.key, l.channel, latch},
		0, lockTTL.Milliseconds(), l.id, "publish", redissonLatchMs).Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return errNotReleased // nil: not held by this id
	case err != nil:
		return err
	}
	if n != 1 {
		// 0: Redisson reads "still held, re-entered": the lock stays
		// where lockproxy forwarded that master's reply from.
		return fmt.Errorf("unlockInner answered %d, not 1: the lock is still held (re-entered) on some master", n)
	}
	return l.c.Del(ctx, latch).Err()
}

func (l *redissonLock) close() { l.ps.Close(); l.c.Close() }

// pyLock is python-redis-lock's Lock.acquire() and release().
type pyLock struct {
	c           *redis.Client
	key, signal string
	id          string
}

func (l *pyLock) try(ctx context.Context) (bool, error) {
	return setNX(ctx, l.c, l.key, l.id, "EX", int64(lockTTL/time.Second))
}

func (l *pyLock) park(context.Context) error { return nil }
func (l *pyLock) triesAfterPark() bool       { return false }

func (l *pyLock) wait(ctx context.Context) (wake, error) {
	err := l.c.BLPop(ctx, waitTimeout, l.signal).Err()
	switch {
	case errors.Is(err, redis.Nil):
		return wokeTimeout, nil
	case err != nil:
		return wokeTimeout, err
	}
	return wokeHint, nil
}

func (l *pyLock) unpark(context.Context, *WaitCounts) error { return nil }

func (l *pyLock) release(ctx context.Context) error {
	n, err := pyLockUnlock.Run(ctx, l.c, []string{l.key, l.signal}, l.id, pySignalExpireMs).Int64()
	if err != nil {
		return err
	}
	if n != 0 { // 1: not the owner
		return errNotReleased
	}
	return nil
}

func (l *pyLock) close() { l.c.Close() }

// pollLock is single-node lock code that polls: SET NX PX, sleep, again.
type pollLock struct {
	c          *redis.Client
	key, token string
}

func (l *pollLock) try(ctx context.Context) (bool, error) {
	if l.token == "" {
		l.token = strconv.FormatUint(rand.Uint64(), 36) // one per acquisition
	}
	ok, err := setNX(ctx, l.c, l.key, l.token, "PX", lockTTL.Milliseconds())
	return ok, err
}

func (l *pollLock) park(context.Context) error { return nil }
func (l *pollLock) triesAfterPark() bool       { return false }

func (l *pollLock) wait(ctx context.Context) (wake, error) {
	sleepUntil(ctx, time.Now().Add(pollInterval))
	return wokePoll, ctx.Err()
}

func (l *pollLock) unpark(context.Context, *WaitCounts) error { return nil }

func (l *pollLock) release(ctx context.Context) error {
	tok := l.token
	l.token = ""
	n, err := releaseScript.Run(ctx, l.c, []string{l.key}, tok).Int64()
	if err != nil {
		return err
	}
	if n != 1 {
		return errNotReleased
	}
	return nil
}

func (l *pollLock) close() { l.c.Close() }

// setNX sends SET key value NX <unit> ttl: true for +OK, false for nil.
func setNX(ctx context.Context, c *redis.Client, key, value, unit string, ttl int64) (bool, error) {
	err := c.Do(ctx, "SET", key, value, "NX", unit, ttl).Err()
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, redis.Nil):
		return false, nil
	}
	return false, err
}
