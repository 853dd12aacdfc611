package compat

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// Redisson's RLock and Spring Integration's RedisLockRegistry (pub/sub
// mode) wait for a release message instead of polling: the waiter
// subscribes on a connection of its own, and the unlock script publishes.
// These tests send, command for command, what the libraries send (their
// scripts from the corpus, their keys, channels, arguments and messages,
// as their sources build them), the holder through one lockproxy and the
// waiter through another on the same masters, and check that each
// subscriber hears one message per unlock, promptly, then that the waiter
// gets the lock. "plain" runs each flow against one redis-server.

// wake bounds unlock → message. Without the message a Redisson waiter
// would sleep until the lease ends (30s), a Spring one for its whole wait.
const wake = time.Second

// dupWait is how long a subscriber must then hear nothing: every master's
// copy of the message has arrived well before.
const dupWait = 300 * time.Millisecond

// TestLockPubSubFlows runs every flow through lockproxy (the holder on the
// shared proxy, the waiter on a second one) and against plain Redis.
func TestLockPubSubFlows(t *testing.T) {
	t.Parallel()
	e := setup(t)
	b := e.proxyFor(t, proxy.Config{}, nil)
	// publish is Redisson's ARGV[4]; "" marks a Spring flow, whose obtain
	// script is <name>_obtain.
	flows := []struct{ name, unlock, publish string }{
		{"redisson-4.x_publish", "redisson-4.x_unlockInner", "publish"},
		{"redisson-4.x_spublish", "redisson-4.x_unlockInner", "spublish"},
		{"redisson-3.23_publish", "redisson-3.23_unlockInner", "publish"},
		{"spring-int-6.5", "spring-int-6.5_pubsub_delete_unlock", ""},
		{"spring-int-7", "spring-int-7_pubsub_unlink_unlock", ""},
	}
	run := func(t *testing.T, e *env, a, b string, name, unlock, publish string) {
		if publish == "" {
			springFlow(t, e, a, b, name+"_obtain", unlock)
			return
		}
		redissonFlow(t, e, a, b, unlock, publish)
	}
	for _, f := range flows {
		t.Run(f.name+"/lockproxy", func(t *testing.T) {
			t.Parallel()
			run(t, e, e.addr, b, f.name, f.unlock, f.publish)
		})
		t.Run(f.name+"/plain", func(t *testing.T) {
			t.Parallel()
			p := ownRedis(t)
			run(t, p, p.addr, p.addr, f.name, f.unlock, f.publish)
		})
	}
}

// redissonFlow: RedissonLock.tryLock(wait, lease) of a waiter while another
// client holds the lock (re-entered once), and its unlocks. unlock names
// the corpus script; publish is its ARGV[4] (PublishSubscribeService.
// getPublishCommand: "spublish" when the client uses sharded pub/sub), and
// the waiter subscribes with SSUBSCRIBE then and hears an smessage.
func redissonFlow(t *testing.T, e *env, a, b, unlock, publish string) {
	tryLock := corpusScript(t, "redisson-4.x_tryLockInner") // 3.23's is the same
	unlockBody := corpusScript(t, unlock)
	latched := strings.HasPrefix(unlock, "redisson-4")
	name := prefixOf(t) + "lock"
	// RedissonObject.prefixName: the name in braces, unless it has some.
	channel := "redisson_lock__channel:{" + name + "}"
	const lease = "30000" // lockWatchdogTimeout, the default lease
	// getLockName(threadId): the client's UUID and the thread's id.
	holderID, waiterID := randomUUID()+":1", randomUUID()+":57"
	subCmd, kind := "SUBSCRIBE", "message"
	if publish == "spublish" {
		subCmd, kind = "SSUBSCRIBE", "smessage"
	}
	unlockArgs := func(lockName, request string) ([]string, []string) {
		keys := []string{name, channel}
		args := []string{"0", lease, lockName, publish} // LockPubSub.UNLOCK_MESSAGE is 0
		if latched {
			// getUnlockLatchName(requestId); its TTL is (timeout + retry
			// delay) × retry attempts: (3000 + 1000..2000) × 4 by default.
			keys = append(keys, "redisson_unlock_latch:{"+name+"}:"+request)
			args = append(args, "18000")
		}
		return keys, args
	}
	// Redisson deletes the latch after every unlock (unlockInnerAsync).
	unlockBy := func(c *rawConn, lockName, request string) string {
		keys, args := unlockArgs(lockName, request)
		r := c.eval(unlockBody, keys, args...)
		if latched {
			if d := c.do("DEL", keys[2]); !strings.HasPrefix(d, ":") {
				t.Fatalf("DEL of the unlock latch = %q", d)
			}
		}
		return r
	}

	holder := dialRaw(t, a)
	for i := 0; i < 2; i++ { // lock(), then re-entered by the same thread
		if r := holder.eval(tryLock, []string{name}, lease, holderID); r != "$-1\r\n" {
			t.Fatalf("holder's tryLock %d = %q, want nil (acquired)", i+1, r)
		}
	}
	must(t, e.checkHeld(t, name, holderID))
	if got := count(e.fields(t, name, holderID), func(v string) bool { return v == "2" }); got < e.quorum {
		t.Fatalf("re-entry count 2 on %d masters: %q", got, e.fields(t, name, holderID))
	}

	// The waiter: tryAcquire fails with the lock's PTTL, then it
	// subscribes (its own connection) and tries again before waiting.
	waiter := dialRaw(t, b)
	wantPTTL := func(r string) {
		t.Helper()
		ms, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r, ":"), "\r\n"))
		if !strings.HasPrefix(r, ":") || err != nil || ms <= 0 || ms > 30000 {
			t.Fatalf("waiter's tryLock of a held lock = %q, want its PTTL (1..30000)", r)
		}
	}
	wantPTTL(waiter.eval(tryLock, []string{name}, lease, waiterID))
	sub := subscriber(t, b, false, subCmd, channel)
	other := subscriber(t, a, true, subCmd, channel) // another waiter, RESP3, on the holder's proxy
	wantPTTL(waiter.eval(tryLock, []string{name}, lease, waiterID))

	// A stranger's unlock answers nil; the first of the holder's two
	// unlocks only counts down (0): neither publishes.
	if r := unlockBy(waiter, waiterID, randomHex(16)); r != "$-1\r\n" {
		t.Fatalf("a stranger's unlock = %q, want nil", r)
	}
	if r := unlockBy(holder, holderID, randomHex(16)); r != ":0\r\n" {
		t.Fatalf("unlock of a re-entered lock = %q, want 0", r)
	}
	sub.none(dupWait, "after an unlock that only counted down")
	must(t, e.checkHeld(t, name, holderID))

	// The last unlock; Redisson deletes its latch after the reply, which
	// is put off below to send a retry first.
	keys, args := unlockArgs(holderID, randomHex(16))
	start := time.Now()
	if r := holder.eval(unlockBody, keys, args...); r != ":1\r\n" {
		t.Fatalf("the holder's last unlock = %q, want 1", r)
	}
	replied := time.Since(start)
	msg := frame(false, kind, channel, "0")
	sub.expect(wake, msg, "the waiter's subscriber after the unlock")
	heard := time.Since(start)
	if r := waiter.eval(tryLock, []string{name}, lease, waiterID); r != "$-1\r\n" {
		t.Fatalf("waiter's tryLock after the message = %q, want nil (acquired)", r)
	}
	acquired := time.Since(start)
	other.expect(wake, frame(true, kind, channel, "0"), "the RESP3 subscriber on the holder's proxy")
	// The waiter's tryLock may reach a master before the unlock has run
	// there (the message comes once a quorum of masters ran it): a quorum.
	must(t, e.checkGranted(t, name, waiterID))
	if latched {
		// An unlock retried before Redisson deleted the latch (same
		// request id) answers the latch's 1, leaves the new holder's lock
		// alone and publishes nothing.
		if r := holder.eval(unlockBody, keys, args...); r != ":1\r\n" {
			t.Fatalf("a retried unlock = %q, want the latch's 1", r)
		}
		if r := holder.do("DEL", keys[2]); r != ":1\r\n" {
			t.Fatalf("DEL of the retry's unlock latch = %q, want 1", r)
		}
	}
	sub.none(dupWait, "a second copy of the unlock message")
	other.none(10*time.Millisecond, "a second copy of the unlock message")
	logFlow(t, replied, heard, acquired)

	// The waiter unsubscribes (tryLock's finally), unlocks: nobody left
	// subscribed on its proxy; the other subscriber hears it.
	unsub := map[string]string{"SUBSCRIBE": "UNSUBSCRIBE", "SSUBSCRIBE": "SUNSUBSCRIBE"}[subCmd]
	sub.send(unsub, channel)
	sub.expect(5*time.Second, frame(false, strings.ToLower(unsub), channel, ":0"), unsub)
	if r := unlockBy(waiter, waiterID, randomHex(16)); r != ":1\r\n" {
		t.Fatalf("the waiter's unlock = %q, want 1", r)
	}
	other.expect(wake, frame(true, kind, channel, "0"), "the second unlock's message")
	other.none(dupWait, "a second copy of the second unlock's message")
	must(t, e.checkGone(t, name))
	must(t, e.checkKeys(t, "redisson_unlock_latch:{"+name))
}

// springFlow: RedisLockRegistry's RedisPubSubLock (Spring Integration
// 6.5 and 7). Keys and channel as the registry builds them: the lock key
// is registryKey:path, the unlock channel registryKey-channel:lockKey,
// the waiter's container PSUBSCRIBEs registryKey-channel:* and the
// message is the lock key. Spring Data Redis runs scripts with EVALSHA,
// then EVAL on NOSCRIPT.
func springFlow(t *testing.T, e *env, a, b, obtainName, unlock string) {
	obtain := corpusScript(t, obtainName)
	unlockBody := corpusScript(t, unlock)
	registry := prefixOf(t) + "registry"
	lockKey := registry + ":res"
	channel := registry + "-channel:" + lockKey
	pattern := registry + "-channel:*"
	const expireAfter = "60000" // DEFAULT_EXPIRE_AFTER
	holderID, waiterID := randomUUID(), randomUUID()

	holder := dialRaw(t, a)
	if r := holder.evalsha(obtain, []string{lockKey}, holderID, expireAfter); r != ":1\r\n" {
		t.Fatalf("holder's obtain = %q, want 1 (true)", r)
	}
	must(t, e.checkHeld(t, lockKey, holderID))

	// The waiter: obtain fails (false is nil), its listener container
	// starts, and it obtains once more before waiting.
	waiter := dialRaw(t, b)
	if r := waiter.evalsha(obtain, []string{lockKey}, waiterID, expireAfter); r != "$-1\r\n" {
		t.Fatalf("waiter's obtain of a held lock = %q, want nil (false)", r)
	}
	sub := subscriber(t, b, false, "PSUBSCRIBE", pattern)
	if r := waiter.evalsha(obtain, []string{lockKey}, waiterID, expireAfter); r != "$-1\r\n" {
		t.Fatalf("waiter's second obtain = %q, want nil (false)", r)
	}
	// Strangers' unlocks, through both proxies (the waiter's, and another
	// registry's on the holder's proxy), answer false and publish nothing.
	for _, s := range []struct {
		c  *rawConn
		id string
	}{{waiter, waiterID}, {holder, randomUUID()}} {
		if r := s.c.evalsha(unlockBody, []string{lockKey}, s.id, channel); r != "$-1\r\n" {
			t.Fatalf("a stranger's unlock = %q, want nil (false)", r)
		}
	}
	sub.none(dupWait, "after a stranger's unlock")

	start := time.Now()
	if r := holder.evalsha(unlockBody, []string{lockKey}, holderID, channel); r != ":1\r\n" {
		t.Fatalf("the holder's unlock = %q, want 1 (true)", r)
	}
	replied := time.Since(start)
	msg := frame(false, "pmessage", pattern, channel, lockKey)
	sub.expect(wake, msg, "the waiter's container after the unlock")
	heard := time.Since(start)
	if r := waiter.evalsha(obtain, []string{lockKey}, waiterID, expireAfter); r != ":1\r\n" {
		t.Fatalf("waiter's obtain after the message = %q, want 1 (true)", r)
	}
	acquired := time.Since(start)
	must(t, e.checkGranted(t, lockKey, waiterID)) // as for Redisson
	sub.none(dupWait, "a second copy of the unlock message")
	logFlow(t, replied, heard, acquired)

	if r := holder.evalsha(unlockBody, []string{lockKey}, holderID, channel); r != "$-1\r\n" {
		t.Fatalf("the old holder's second unlock = %q, want nil (false)", r)
	}
	// The container stays subscribed: the waiter's own unlock is heard
	// too, once; then it stops.
	if r := waiter.evalsha(unlockBody, []string{lockKey}, waiterID, channel); r != ":1\r\n" {
		t.Fatalf("the waiter's unlock = %q, want 1 (true)", r)
	}
	sub.expect(wake, msg, "the waiter's own unlock")
	sub.none(dupWait, "a second copy of the waiter's unlock message")
	sub.send("PUNSUBSCRIBE", pattern)
	sub.expect(5*time.Second, frame(false, "punsubscribe", pattern, ":0"), "PUNSUBSCRIBE")
	must(t, e.checkGone(t, lockKey))
}

// fields returns HGET key field on each master, "(nil)" where missing.
func (e *env) fields(t *testing.T, key, field string) []string {
	t.Helper()
	out := make([]string, len(e.masters))
	for i := range e.masters {
		out[i] = e.do(t, i, "HGET", key, field)
	}
	return out
}

// logFlow reports a flow's figures, from the holder's unlock call: its
// reply, the waiter's message, the waiter's lock. The first unlock a proxy
// sees of a script includes understanding it (docs/analyzer.md).
func logFlow(t *testing.T, replied, heard, acquired time.Duration) {
	t.Helper()
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	t.Logf("from the unlock call: its reply %v, the message %v, the waiter's lock %v", r(replied), r(heard), r(acquired))
}
