package catalog

import (
	"embed"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/quorum"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// builtin is one entry of the built-in catalog; file names a body under
// scripts/, copied byte for byte from the library.
type builtin struct {
	file string
	s    Script
}

var (
	replyZero = resp.Reply{Type: resp.Integer, Int: 0}
	replyOne  = resp.Reply{Type: resp.Integer, Int: 1}
	// signalTTL is python-redis-lock's signal_expire: the TTL in ms of
	// the list that wakes waiters, in ARGV[2] of unlock and reset.
	signalTTL = []ArgTTL{{Arg: 2, Unit: quorum.Millis}}
	// signalList is the list unlock and reset push to (KEYS[2]).
	signalList = []quorum.Arg{{Keys: true, Index: 2}}
)

// builtins is the built-in catalog. A body shared by two libraries is one
// entry. Entries whose bodies normalize equal (redsync v4.8 delete and bsm
// release differ only in command case) must vote the same: TestBuiltins
// checks it.
//
// Kinds where a script does two things, decided by what its undo would do:
// an Acquire that fails is undone on every master by deleting each KEY
// whose value equals the token. That is right only when the token is new to
// this attempt, so that everything holding it was written by the attempt.
// It is wrong when the token is the caller's current lock, because the
// undo would then delete a lock the caller still holds and still believes
// valid until its previous expiry; such scripts are Extend, whose failure
// leaves the masters as they are.
//
// Every ARGV that carries a TTL the script sets on a master is declared:
// the lock's in TTLArg, any other in OtherTTLs (TestBuiltinTTLArgs finds
// them in the bodies), so that max_ttl bounds them all.
var builtins = []builtin{
	// redis-py Lock.release (4.3.4 and current, per the traces): DEL when the token matches → 1, else 0 (LockNotOwnedError).
	{"redis-py_release", Script{Name: "redis-py release", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// redis-py Lock.extend: PEXPIRE of ARGV[2] ms, or of ARGV[2] + the
	// current PTTL when ARGV[3] is "0" (additive extend) → 1, else 0.
	// ARGV[2] alone is a lower bound of the new TTL on every master, so it
	// is the safe figure for validity in both modes. Repeated additive
	// extends would grow the TTL on the masters past max_ttl, which the
	// restart quarantine assumes no key outlives: the masters run
	// quorum.CappedExtendScript instead, the same script with the new TTL
	// capped at max_ttl.
	{"redis-py_extend", Script{Name: "redis-py extend", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero, RunAs: quorum.CappedExtendScript.SHA1}},
	// redis-py Lock.reacquire: PEXPIRE ARGV[2] ms when the token matches → 1, else 0.
	// Extend, not Acquire: it never creates the key; it resets the TTL of
	// the caller's own lock, which an undo must not delete.
	{"redis-py_reacquire", Script{Name: "redis-py reacquire", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// redsync v4.8 Mutex.Unlock: DEL result (1) when the token matches, else 0.
	{"redsync-v4.8_delete", Script{Name: "redsync v4.8 delete", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// redsync v4.18 Mutex.Unlock: DEL result 1 when ours, -1 when the
	// key is missing (ErrLockAlreadyExpired), 0 when a stranger holds it.
	{"redsync-v4.18_delete", Script{Name: "redsync v4.18 delete", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// redsync v4 (v4.8 and v4.18 alike) Mutex.Extend: PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"redsync-v4.18_touch", Script{Name: "redsync v4 touch", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// redsync v4.18 Mutex.Extend with WithSetNXOnExtend: PEXPIRE when ours,
	// else SET NX PX ARGV[2] where the key is gone → 1; 0 when a stranger
	// holds it. Extend, not Acquire: ARGV[1] is the token of the lock the
	// caller already holds (Mutex.value), and a failed Extend leaves redsync
	// believing that lock valid until its old expiry (Mutex.until is kept);
	// an undo by compare-and-delete would remove it on every master before
	// then, so another client could take it while this one still works.
	// Keys re-created on a minority stay until their TTL: a liveness cost
	// bounded by max_ttl, as for any failed extend.
	{"redsync-v4.18_touchWithSetNX", Script{Name: "redsync v4.18 touchWithSetNX", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// bsm/redislock v0.9.x Client.Obtain: SET NX PX ARGV[3] → status OK; or,
	// when the held value starts with the same token (first ARGV[2] bytes of
	// ARGV[1], the Options.Token re-obtain), SET PX → OK; else no value (nil,
	// ErrNotObtained). Acquire: the value ARGV[1] is the token followed by
	// the metadata, random per Obtain unless the caller passes a token. With
	// a caller-chosen token, a failed re-obtain is undone only where the
	// token was not there before it, and never lowers a TTL the token's
	// copy had (quorum.WrapCheck): the caller keeps the lock it held.
	{"bsm-redislock-v0.9.4_obtain", Script{Name: "bsm-redislock v0.9 obtain", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 3, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil,
		// The holder is who holds the token, the value's first ARGV[2]
		// bytes: a re-obtain with other metadata is its own lock.
		CheckToken: "{p = string.sub(ARGV[1], 1, tonumber(ARGV[2]) or 0)}"}},
	// bsm/redislock Lock.Release and node-redlock v3 unlock (same text): DEL when ours → 1, else 0.
	{"bsm-redislock_release", Script{Name: "bsm-redislock release (node-redlock v3 release)", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// bsm/redislock Lock.Refresh and node-redlock v3 extend (same text): PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"bsm-redislock_refresh", Script{Name: "bsm-redislock refresh (node-redlock v3 extend)", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// bsm/redislock Lock.TTL: PTTL in ms when ours, else -3. The client
	// gets the Q-th largest PTTL minus drift: how long a quorum surely holds it.
	{"bsm-redislock_pttl", Script{Name: "bsm-redislock pttl", Kind: quorum.Read, Yes: quorum.YesNonNegative, Combine: quorum.CombineQthTTL, NoReply: resp.Reply{Type: resp.Integer, Int: -3}}},

	// ioredis-lock 4.x Lock.release: DEL when ours → 1, else 0.
	{"ioredis-lock_delifequal", Script{Name: "ioredis-lock delifequal", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// ioredis-lock 4.x Lock.extend: PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"ioredis-lock_pexpireifequal", Script{Name: "ioredis-lock pexpireifequal", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// node-redlock v3 lock: SET NX PX ARGV[2] ms → OK, else nil.
	{"node-redlock-v3_acquire", Script{Name: "node-redlock v3 acquire", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil}},
	// node-redlock v4 acquire: 0 when any KEY exists, else SET PX ARGV[2] ms on
	// every KEY → #KEYS; the library wants all keys, so the yes is #KEYS.
	{"node-redlock-v4_acquire", Script{Name: "node-redlock v4 acquire", Kind: quorum.Acquire, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: replyZero}},
	// node-redlock v4 extend: 0 unless every KEY holds ARGV[1], else SET PX ARGV[2] ms on each → #KEYS.
	{"node-redlock-v4_extend", Script{Name: "node-redlock v4 extend", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// node-redlock v4 release: DEL of each KEY holding ARGV[1] → how many; the library wants #KEYS.
	{"node-redlock-v4_release", Script{Name: "node-redlock v4 release", Kind: quorum.Release, Yes: quorum.YesNumKeys, NoReply: replyZero}},
	// node-redlock v5 (5.0.0-beta) acquire: v4's script re-indented → #KEYS or 0.
	{"node-redlock-v5_acquire", Script{Name: "node-redlock v5 acquire", Kind: quorum.Acquire, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: replyZero}},
	// node-redlock v5 extend: v4's script re-indented → #KEYS or 0.
	{"node-redlock-v5_extend", Script{Name: "node-redlock v5 extend", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// node-redlock v5 release: v4's script re-indented → keys removed.
	{"node-redlock-v5_release", Script{Name: "node-redlock v5 release", Kind: quorum.Release, Yes: quorum.YesNumKeys, NoReply: replyZero}},

	// python-redis-lock 4.x Lock.release: 1 when not ours (NotAcquired),
	// else DEL the lock, signal waiters on KEYS[2] → 0. Zero is the yes.
	// The signal list KEYS[2] gets PEXPIRE ARGV[2] (signal_expire, ms).
	// It runs guarded with its token ARGV[1] (GuardArg, quorum.WrapGuard):
	// it DELs KEYS[2] whatever that is, and a client naming another
	// client's lock as its signal list deleted that lock inside its
	// validity (review, helper-69). A signal list is a list, which the
	// guard leaves alone.
	{"python-redis-lock_unlock", Script{Name: "python-redis-lock unlock", Kind: quorum.Release, Yes: quorum.YesZero, NoReply: replyOne, OtherTTLs: signalTTL, Signals: signalList, GuardArg: 1}},
	// python-redis-lock 4.x Lock.extend: 1 when not ours (NotAcquired), 2 when
	// the key has no TTL (NotExpirable), else EXPIRE ARGV[2] seconds → 0.
	// KEYS[2] is its signal list, which it does not touch: the lock is KEYS[1].
	{"python-redis-lock_extend", Script{Name: "python-redis-lock extend", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesZero, TTLArg: 2, TTLUnit: quorum.Seconds, NoReply: replyOne, LockKeys: []int{1}}},
	// python-redis-lock 4.x Lock.reset: deletes the lock whoever holds it and
	// signals waiters → DEL count of KEYS[1] (1, or 0 when it was not
	// there); the library ignores it. Like DEL through lockproxy: 1 when a
	// quorum held the key. The signal list KEYS[2] gets PEXPIRE ARGV[2] ms.
	// Force: it deletes another token's lock, so allow_force_acquire =
	// false refuses it, as it refuses a force acquisition.
	{"python-redis-lock_reset", Script{Name: "python-redis-lock reset", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero, OtherTTLs: signalTTL, Force: true, Signals: signalList}},

	// rueidislock (rueidis v1.0.79) acquire with SET NX PX ARGV[2] ms → OK,
	// else nil (the GET only registers client-side tracking).
	{"rueidislock_acqms", Script{Name: "rueidislock acqms", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil}},
	// rueidislock acquire with SET NX PXAT ARGV[2] (absolute unix ms) → OK, else nil.
	{"rueidislock_acqat", Script{Name: "rueidislock acqat", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.UnixMillis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil}},
	// rueidislock ForceWithContext: SET PX ARGV[2] ms without NX, overwriting
	// any holder → OK. Acquire: rueidislock draws a new random token per
	// attempt (locker.try), so the undo deletes only what this attempt
	// wrote; the previous holder's value there was already overwritten,
	// which is what forcing means. Force: refused while
	// allow_force_acquire is false.
	{"rueidislock_fcqms", Script{Name: "rueidislock fcqms", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil, Force: true}},
	// rueidislock ForceWithContext with SET PXAT ARGV[2] (absolute unix ms) → OK; Acquire as fcqms.
	{"rueidislock_fcqat", Script{Name: "rueidislock fcqat", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.UnixMillis, TokenArg: 1, NoIsNoop: true, NoReply: resp.ReplyNil, Force: true}},
	// rueidislock release: DEL when ours → 1, else 0.
	{"rueidislock_delkey", Script{Name: "rueidislock delkey", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// rueidislock extend: PEXPIREAT ARGV[2] (absolute unix ms) when ours → 1, else 0.
	{"rueidislock_extend", Script{Name: "rueidislock extend", Kind: quorum.Extend, TokenArg: 1, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.UnixMillis, NoReply: replyZero}},
}
