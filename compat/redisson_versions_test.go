package compat

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redisson's lock scripts changed many times across 3.x and 4.x. The
// scripts in testdata/redisson are extracted from the released sources
// (git show redisson-<version>:…/RedissonLock.java and the other lock
// classes; the string literals of each eval, joined as Java joins them):
// one file per distinct text, MANIFEST.json naming the class, method, sha1
// and the range of releases that send it. TestRedissonVersions runs each
// release range's flow through lockproxy and against one plain
// redis-server and compares the replies step by step; TestRedissonKinds
// covers the lock kinds lockproxy cannot decide by quorum.

const redissonDir = "testdata/redisson"

// redissonScript returns testdata/redisson/<name>.lua, checked against
// its manifest's sha1 (the script must be byte for byte what Redisson
// sends: lockproxy knows scripts by sha1).
func redissonScript(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(redissonDir, name+".lua"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := os.ReadFile(filepath.Join(redissonDir, "MANIFEST.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]struct{ SHA1 string }
	if err := json.Unmarshal(m, &manifest); err != nil {
		t.Fatalf("MANIFEST.json: %v", err)
	}
	if got := sha1Of(string(b)); got != manifest[name].SHA1 {
		t.Fatalf("%s.lua has sha1 %s, the manifest says %q", name, got, manifest[name].SHA1)
	}
	return string(b)
}

// redissonVersion is one range of releases with the same scripts for
// one lock kind.
type redissonVersion struct {
	versions string
	kind     string // "rlock", "spin" (RSpinLock: no pub/sub), "fenced" (RFencedLock), "nonreentrant" (4.4+: re-entry is an error)
	tryLock  string
	token    string // RFencedLock's tryLockAndGetToken, answering {-1, token}
	unlock   string
	renew    string
	chunk    bool   // renew is 3.44+'s renewChunk (one call, many locks)
	force    string // forceUnlock
	publish  string // unlock's ARGV[4] (3.22+): "publish" or "spublish"; "" when the script names PUBLISH
	latched  bool   // 3.24+: the unlock latch KEYS[3] (spin: KEYS[2]) and its TTL
}

var redissonVersions = []redissonVersion{
	{versions: "3.11.0-3.12.2", kind: "rlock", tryLock: "rlock_tryLock_3.11", unlock: "rlock_unlock_3.11", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.11"},
	{versions: "3.12.3-3.18.1", kind: "rlock", tryLock: "rlock_tryLock_3.12.3", unlock: "rlock_unlock_3.11", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.11"},
	{versions: "3.19.0-3.21.3", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.11", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.11"},
	{versions: "3.22.0-3.23.5", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.22", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.22", publish: "publish"},
	{versions: "3.22.0-3.23.5 sharded", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.22", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.22", publish: "spublish"},
	{versions: "3.24.0-3.43.0", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.24", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.22", publish: "publish", latched: true},
	{versions: "3.44.0-4.7.0", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.24", renew: "renewChunk_3.44", chunk: true, force: "rlock_forceUnlock_3.22", publish: "publish", latched: true},
	{versions: "3.44.0-4.7.0 sharded", kind: "rlock", tryLock: "rlock_tryLock_3.19", unlock: "rlock_unlock_3.24", renew: "renewChunk_3.44", chunk: true, force: "rlock_forceUnlock_3.22", publish: "spublish", latched: true},
	{versions: "nonreentrant 4.4.0-4.7.0", kind: "nonreentrant", tryLock: "nonreentrant_tryLock_4.4", unlock: "rlock_unlock_3.24", renew: "renewChunk_3.44", chunk: true, force: "rlock_forceUnlock_3.22", publish: "publish", latched: true},
	{versions: "spin 3.15.0-3.23.5", kind: "spin", tryLock: "rlock_tryLock_3.12.3", unlock: "spinlock_unlock_3.15", renew: "renewExpiration_3.11", force: "spinlock_forceUnlock_3.15"},
	{versions: "spin 3.24.0-3.43.0", kind: "spin", tryLock: "rlock_tryLock_3.12.3", unlock: "spinlock_unlock_3.24", renew: "renewExpiration_3.11", force: "spinlock_forceUnlock_3.15", latched: true},
	{versions: "spin 3.44.0-4.7.0", kind: "spin", tryLock: "rlock_tryLock_3.12.3", unlock: "spinlock_unlock_3.24", renew: "renewChunk_3.44", chunk: true, force: "spinlock_forceUnlock_3.15", latched: true},
	{versions: "fenced 3.24.0-3.43.0", kind: "fenced", tryLock: "fencedlock_tryLock_3.19", token: "fencedlock_tryLockAndGetToken_3.19", unlock: "rlock_unlock_3.24", renew: "renewExpiration_3.11", force: "rlock_forceUnlock_3.22", publish: "publish", latched: true},
	{versions: "fenced 3.44.0-4.7.0", kind: "fenced", tryLock: "fencedlock_tryLock_3.19", token: "fencedlock_tryLockAndGetToken_3.19", unlock: "rlock_unlock_3.24", renew: "renewChunk_3.44", chunk: true, force: "rlock_forceUnlock_3.22", publish: "publish", latched: true},
}

// TestRedissonVersions runs each release range's flow through lockproxy
// and against a plain redis-server: the two transcripts (every reply,
// PTTLs and fencing tokens by meaning, and what a subscriber heard) must
// be equal.
func TestRedissonVersions(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := ownRedis(t)
	for _, v := range redissonVersions {
		t.Run(strings.ReplaceAll(v.versions, " ", "_"), func(t *testing.T) {
			t.Parallel()
			var plainT, proxyT []string
			t.Run("plain", func(t *testing.T) { plainT = redissonVersionFlow(t, p, v) })
			t.Run("lockproxy", func(t *testing.T) { proxyT = redissonVersionFlow(t, e, v) })
			if t.Failed() {
				return
			}
			if a, b := strings.Join(plainT, "\n"), strings.Join(proxyT, "\n"); a != b {
				t.Fatalf("transcripts differ:\nplain redis-server:\n%s\nlockproxy:\n%s", a, b)
			}
		})
	}
}

// redissonVersionFlow: holder A tryLock (acquired), B's tryLock (the
// lock's PTTL), A's re-entry, A's watchdog renewal and B's (not its lock),
// B's unlock (nil), A's unlocks (0 then 1, which publishes), B's tryLock
// (acquired), forceUnlock (1, publishes) and again (0). It returns the
// transcript; the masters' state is checked on the way.
func redissonVersionFlow(t *testing.T, e *env, v redissonVersion) []string {
	const lease = "30000"
	tryLock, unlock, force := redissonScript(t, v.tryLock), redissonScript(t, v.unlock), redissonScript(t, v.force)
	renew := redissonScript(t, v.renew)
	tokenScript := ""
	if v.token != "" {
		tokenScript = redissonScript(t, v.token)
	}
	name := prefixOf(t) + "lock"
	channel := "redisson_lock__channel:{" + name + "}"
	tokenName := "redisson_lock_token:{" + name + "}"
	a, b := randomUUID()+":1", randomUUID()+":42"
	c := dialRaw(t, e.addr)
	var out []string
	var tokens []int64
	// norm gives a reply its meaning: a PTTL within the lease is "pttl",
	// a fencing token "token" (checked to grow below).
	norm := func(step, r string, pttl bool) {
		t.Helper()
		if pttl && strings.HasPrefix(r, ":") {
			if ms, err := strconv.ParseInt(strings.TrimSpace(r[1:]), 10, 64); err == nil && ms > 0 && ms <= 30000 {
				r = ":pttl"
			}
		}
		if f := strings.Split(r, "\r\n"); len(f) == 4 && f[0] == "*2" && f[1] == ":-1" {
			n, err := strconv.ParseInt(f[2][1:], 10, 64)
			if err != nil {
				t.Fatalf("%s: token in %q: %v", step, r, err)
			}
			tokens = append(tokens, n)
			r = "*2 :-1 :token"
		}
		if f := strings.Split(r, "\r\n"); len(f) == 4 && f[0] == "*2" && f[2] == ":-1" {
			r = "*2 :" + strings.TrimPrefix(f[1], ":") + " :-1"
			if ms, err := strconv.ParseInt(f[1][1:], 10, 64); err == nil && ms > 0 && ms <= 30000 {
				r = "*2 :pttl :-1"
			}
		}
		out = append(out, step+" = "+strings.ReplaceAll(r, "\r\n", " "))
	}
	// acquire is tryLock; RFencedLock's flow alternates it with
	// tryLockAndGetToken (getToken), the call that answers the token.
	acquire := func(step, who string, getToken bool) {
		t.Helper()
		keys, body := []string{name}, tryLock
		if v.kind == "fenced" {
			keys = append(keys, tokenName)
			if getToken {
				body, step = tokenScript, step+" (tryLockAndGetToken)"
			}
		}
		args := []string{lease, who}
		if v.kind == "nonreentrant" {
			args = append(args, "NON_REENTRANT_REACQUIRE") // RedissonNonReentrantLock.REENTRY_ERR
		}
		norm(step, c.eval(body, keys, args...), true)
		if v.kind == "fenced" {
			// getToken: GET of the counter, which every grant (tryLock's
			// too, which answers nil) has raised: never below a token
			// already handed out, and above the last one after a grant.
			r := c.do("GET", tokenName)
			n, err := strconv.ParseInt(strings.TrimSpace(r[strings.Index(r, "\r\n")+2:]), 10, 64)
			if !strings.HasPrefix(r, "$") || err != nil {
				t.Fatalf("%s: getToken = %q", step, r)
			}
			granted := strings.HasSuffix(out[len(out)-1], "= $-1 ") || strings.HasSuffix(out[len(out)-1], ":token")
			if last := int64(0); len(tokens) > 0 {
				last = tokens[len(tokens)-1]
				if n < last || (granted && !getToken && n == last) {
					t.Fatalf("%s: getToken = %d after tokens %v", step, n, tokens)
				}
			}
			if granted && !getToken {
				tokens = append(tokens, n)
			}
		}
	}
	var sub *rawConn
	kind := "message"
	if v.kind != "spin" {
		cmd := "SUBSCRIBE"
		if v.publish == "spublish" {
			cmd, kind = "SSUBSCRIBE", "smessage"
		}
		sub = subscriber(t, e.addr, false, cmd, channel)
	}
	heard := func(step string, want bool) {
		t.Helper()
		if sub == nil {
			return
		}
		if want {
			sub.expect(wake, frame(false, kind, channel, "0"), step)
			out = append(out, step+": heard 0")
		}
		sub.none(dupWait, step+": no (further) message")
	}
	unlockBy := func(step, who string) {
		t.Helper()
		var keys, args []string
		switch v.kind {
		case "spin":
			keys, args = []string{name}, []string{lease, who}
		default:
			keys, args = []string{name, channel}, []string{"0", lease, who}
			if v.publish != "" {
				args = append(args, v.publish)
			}
		}
		if v.latched {
			keys = append(keys, "redisson_unlock_latch:{"+name+"}:"+randomHex(16))
			args = append(args, "18000")
		}
		norm(step, c.eval(unlock, keys, args...), false)
		if v.latched { // Redisson deletes the latch after the reply
			c.do("DEL", keys[len(keys)-1])
		}
	}
	renewBy := func(step, who string) {
		t.Helper()
		if v.chunk {
			// renewChunk: this lock and one nobody holds, in one call.
			norm(step, c.eval(renew, []string{name, name + ":other"}, lease, who, who), false)
			return
		}
		norm(step, c.eval(renew, []string{name}, lease, who), false)
	}
	forceUnlock := func(step string) {
		t.Helper()
		keys, args := []string{name, channel}, []string{"0", v.publish}
		switch {
		case v.kind == "spin":
			keys, args = []string{name}, nil
		case v.publish == "":
			args = args[:1]
		}
		norm(step, c.eval(force, keys, args...), false)
	}

	acquire("A tryLock", a, true)
	must(t, e.checkHeld(t, name, a))
	acquire("B tryLock (held)", b, true)
	acquire("A tryLock (re-entry)", a, false)
	renewBy("A renew", a)
	renewBy("B renew", b)
	must(t, e.checkPTTL(t, name, 25000, 30000))
	unlockBy("B unlock", b)
	if v.kind != "nonreentrant" { // its re-entry was refused: depth 1
		unlockBy("A unlock (depth 2)", a)
		heard("A unlock (depth 2)", false)
		must(t, e.checkHeld(t, name, a))
	}
	unlockBy("A unlock (depth 1)", a)
	heard("A unlock (depth 1)", v.kind != "spin")
	must(t, e.checkGone(t, name))
	acquire("B tryLock (free)", b, true)
	acquire("A tryLock (B holds)", a, false)
	forceUnlock("forceUnlock")
	heard("forceUnlock", v.kind != "spin")
	forceUnlock("forceUnlock (again)")
	must(t, e.checkGone(t, name))
	acquire("A tryLock (after forceUnlock)", a, true)
	forceUnlock("forceUnlock (cleanup)")
	heard("forceUnlock (cleanup)", v.kind != "spin")
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("fencing tokens %v do not grow", tokens)
		}
	}
	if v.kind == "fenced" {
		out = append(out, fmt.Sprintf("tokens granted: %d", len(tokens)))
	}
	t.Logf("%s:\n%s", v.versions, strings.Join(out, "\n"))
	return out
}

// TestRedissonKinds: the lock kinds beyond RLock, RSpinLock and
// RFencedLock. RReadWriteLock's read lock and both unlocks, RFairLock (a
// queue in a list and a sorted set of timeouts) and the faster multilock
// (one hash of many locks, renewed whoever holds them) are not decided by
// quorum: each is refused with an error that says why and what to do, and
// the kind never grants a lock at all, so never one another client holds.
func TestRedissonKinds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const lease = "30000"
	name := prefixOf(t) + "rw"
	a, b := randomUUID()+":1", randomUUID()+":7"
	c := dialRaw(t, e.addr)
	refused := func(what, r string) {
		t.Helper()
		// The refusal names the script's verdict and what to do
		// (proxy/errors.go); never a grant.
		if !strings.HasPrefix(r, "-ERR unknown script") || !strings.Contains(r, "lockproxy does not run it, because") {
			t.Fatalf("%s = %q, want lockproxy's refusal", what, r)
		}
		t.Logf("%s: %s", what, strings.TrimSpace(r))
	}

	// RReadWriteLock: every script of it, the write lock's too (its
	// re-entry adds the lease to the remaining TTL).
	write, read := redissonScript(t, "writelock_tryLock_3.11"), redissonScript(t, "readlock_tryLock_3.11.1")
	for _, who := range []string{a, b} {
		refused("write lock by "+who, c.eval(write, []string{name}, lease, who+":write"))
	}
	for _, who := range []string{b, a} {
		refused("read lock by "+who, c.eval(read, []string{name, "{" + name + "}:" + who + ":rwlock_timeout"}, lease, who, who+":write"))
	}
	refused("write lock's unlock", c.eval(redissonScript(t, "writelock_unlock_3.44"),
		[]string{name, "redisson_rwlock:{" + name + "}", "redisson_unlock_latch:{" + name + "}:" + randomHex(16)}, "0", lease, a+":write", "publish", "18000"))
	refused("read lock's unlock", c.eval(redissonScript(t, "readlock_unlock_3.44"),
		[]string{name, "redisson_rwlock:{" + name + "}", "{" + name + "}:" + b + ":rwlock_timeout", "{" + name + "}", "redisson_unlock_latch:{" + name + "}:" + randomHex(16)}, "0", b, "publish", "18000"))
	must(t, e.checkGone(t, name))

	// RFairLock (3.32+; its 3.11-3.30 scripts use the same list and
	// sorted set): refused for both clients, whoever asks first.
	fair := prefixOf(t) + "fair"
	queue, timeouts := "redisson_lock_queue:{"+fair+"}", "redisson_lock_timeout:{"+fair+"}"
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, who := range []string{a, b} {
		refused("fair lock by "+who, c.eval(redissonScript(t, "fairlock_tryLock_3.32"), []string{fair, queue, timeouts}, lease, who, now, "300000"))
	}
	refused("fair lock's unlock", c.eval(redissonScript(t, "fairlock_unlock_3.32"),
		[]string{fair, queue, timeouts, "redisson_lock__channel:{" + fair + "}", "redisson_unlock_latch:{" + fair + "}:" + randomHex(16)}, "0", lease, a, now, "publish", "18000"))
	must(t, e.checkGone(t, fair))
	must(t, e.checkKeys(t, queue))

	// The faster multilock's renewal (3.44+; RedissonFasterMultiLock's
	// own renewExpiration before) re-sets the TTL whoever holds the hash.
	refused("faster multilock renewal", c.eval(redissonScript(t, "fastmultilock_renew_3.44"), []string{name}, lease, now, a, "f1"))
}
