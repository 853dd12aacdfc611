package proxy

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/lockproxy/lockproxy/batching"
	"github.com/lockproxy/lockproxy/quorum"
)

// Script is one catalogued Lua script and how lockproxy votes on it.
type Script struct {
	Name     string          // e.g. "redis-py release": shown in INFO and error replies
	Body     string          // the exact text clients send; "" for a custom entry given by sha1 only
	SHA1     string          // lower-case hex sha1 of Body
	Kind     quorum.Kind     // Acquire, Release, Extend, Read
	Yes      quorum.VoteRule // which master reply is a yes vote
	Combine  quorum.Combine  // CombineFirst, or CombineQthTTL for replies that are remaining TTLs in ms
	TTLArg   int             // 1-based ARGV index of the TTL (validity accounting); 0 = none
	TTLUnit  quorum.TTLUnit  // unit of that TTL: Millis, Seconds, UnixMillis, UnixSecs
	TokenArg int             // 1-based ARGV index of the lock token: a failed acquisition is undone by deleting each KEY whose value equals it; 0 when Kind != Acquire
	NoIsNoop bool            // Acquire: a reply that is neither yes nor an error proves the script wrote nothing, so that master needs no undo (which would delete a key already holding the token, as Redis would not)
	NoReply  batching.Reply  // what the client gets when a quorum said yes but the validity ran out, or when no master gave a non-yes reply (e.g. :0, or nil for scripts that return nothing)
	// RunAs, when set, is the sha1 of one of lockproxy's own scripts that
	// the masters run instead, with max_ttl in ms appended to ARGV: the
	// same replies, with every TTL it sets capped at max_ttl.
	RunAs string
}

// ScriptConfig is one [[scripts]] table of config.toml: a script the
// operator adds to the built-in catalog.
type ScriptConfig struct {
	Name string `toml:"name"` // required, unique: shown in INFO and error replies
	Body string `toml:"body"` // the Lua text; recognized by sha1 and by normal form
	SHA1 string `toml:"sha1"` // instead of (or checked against) body; alone, recognized by exact sha1 only
	Kind string `toml:"kind"` // acquire | release | extend | read
	// Vote is which master reply is a yes: ok (status OK), one (integer 1),
	// true (same as one), positive (integer > 0), numkeys (integer equal to
	// the number of KEYS), nonnegative (integer >= 0), notnil (anything but
	// nil or an error), zero (integer 0).
	Vote string `toml:"vote"`
	// TTLArg is the 1-based ARGV index of the TTL, required for acquire and
	// extend (validity accounting), refused for release and read.
	TTLArg  int    `toml:"ttl_arg"`
	TTLUnit string `toml:"ttl_unit"` // ms | s | unix_ms | unix_s; required with ttl_arg
	// TokenArg is the 1-based ARGV index of the lock token, required for
	// acquire: a failed acquisition is undone on every master by deleting
	// each KEY whose value equals it. Refused for other kinds.
	TokenArg int `toml:"token_arg"`
	// NoReply is the client's reply when the vote is lost with no master
	// giving another answer, or validity ran out: "nil" or an integer.
	// Default: nil for vote ok and notnil, 0 for one, true, positive and
	// numkeys; required for zero and nonnegative.
	NoReply string `toml:"no_reply"`
	Combine string `toml:"combine"` // "" or "first": the first yes reply; "qth_ttl": replies are TTLs in ms, answer the Q-th largest minus drift
}

// Catalog recognizes lock scripts: the built-in ones of common lock
// libraries and the operator's. It is immutable once built and safe for
// concurrent use.
type Catalog struct {
	scripts []*Script          // builtin first, then custom, in order
	bySHA   map[string]*Script // lower-case hex sha1 → script
	byNorm  map[string]*Script // Normalize(body) → script, built once here so Match only normalizes the client's text
}

//go:embed scripts/*.lua
var scriptFiles embed.FS

// builtin is one entry of the built-in catalog; file names a body under
// scripts/, copied byte for byte from the library.
type builtin struct {
	file string
	s    Script
}

var (
	replyZero = batching.Reply{Type: batching.Integer, Int: 0}
	replyOne  = batching.Reply{Type: batching.Integer, Int: 1}
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
	{"redis-py_extend", Script{Name: "redis-py extend", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero, RunAs: quorum.CappedExtendScript.SHA1}},
	// redis-py Lock.reacquire: PEXPIRE ARGV[2] ms when the token matches → 1, else 0.
	// Extend, not Acquire: it never creates the key; it resets the TTL of
	// the caller's own lock, which an undo must not delete.
	{"redis-py_reacquire", Script{Name: "redis-py reacquire", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// redsync v4.8 Mutex.Unlock: DEL result (1) when the token matches, else 0.
	{"redsync-v4.8_delete", Script{Name: "redsync v4.8 delete", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// redsync v4.18 Mutex.Unlock: DEL result 1 when ours, -1 when the
	// key is missing (ErrLockAlreadyExpired), 0 when a stranger holds it.
	{"redsync-v4.18_delete", Script{Name: "redsync v4.18 delete", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// redsync v4 (v4.8 and v4.18 alike) Mutex.Extend: PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"redsync-v4.18_touch", Script{Name: "redsync v4 touch", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// redsync v4.18 Mutex.Extend with WithSetNXOnExtend: PEXPIRE when ours,
	// else SET NX PX ARGV[2] where the key is gone → 1; 0 when a stranger
	// holds it. Extend, not Acquire: ARGV[1] is the token of the lock the
	// caller already holds (Mutex.value), and a failed Extend leaves redsync
	// believing that lock valid until its old expiry (Mutex.until is kept);
	// an undo by compare-and-delete would remove it on every master before
	// then, so another client could take it while this one still works.
	// Keys re-created on a minority stay until their TTL: a liveness cost
	// bounded by max_ttl, as for any failed extend.
	{"redsync-v4.18_touchWithSetNX", Script{Name: "redsync v4.18 touchWithSetNX", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// bsm/redislock v0.9.x Client.Obtain: SET NX PX ARGV[3] → status OK; or,
	// when the held value starts with the same token (first ARGV[2] bytes of
	// ARGV[1], the Options.Token re-obtain), SET PX → OK; else no value (nil,
	// ErrNotObtained). Acquire: the value ARGV[1] is the token followed by
	// the metadata, random per Obtain unless the caller passes a token. With
	// a caller-chosen token, a failed re-obtain is undone like any other:
	// it deletes ARGV[1] where this attempt wrote it (it had already reset
	// that key's TTL) and the client is told ErrNotObtained, i.e. that it
	// does not hold the lock; values of other tokens are never touched.
	{"bsm-redislock-v0.9.4_obtain", Script{Name: "bsm-redislock v0.9 obtain", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 3, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// bsm/redislock Lock.Release and node-redlock v3 unlock (same text): DEL when ours → 1, else 0.
	{"bsm-redislock_release", Script{Name: "bsm-redislock release (node-redlock v3 release)", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// bsm/redislock Lock.Refresh and node-redlock v3 extend (same text): PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"bsm-redislock_refresh", Script{Name: "bsm-redislock refresh (node-redlock v3 extend)", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// bsm/redislock Lock.TTL: PTTL in ms when ours, else -3. The client
	// gets the Q-th largest PTTL minus drift: how long a quorum surely holds it.
	{"bsm-redislock_pttl", Script{Name: "bsm-redislock pttl", Kind: quorum.Read, Yes: quorum.YesNonNegative, Combine: quorum.CombineQthTTL, NoReply: batching.Reply{Type: batching.Integer, Int: -3}}},

	// ioredis-lock 4.x Lock.release: DEL when ours → 1, else 0.
	{"ioredis-lock_delifequal", Script{Name: "ioredis-lock delifequal", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// ioredis-lock 4.x Lock.extend: PEXPIRE ARGV[2] ms when ours → 1, else 0.
	{"ioredis-lock_pexpireifequal", Script{Name: "ioredis-lock pexpireifequal", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},

	// node-redlock v3 lock: SET NX PX ARGV[2] ms → OK, else nil.
	{"node-redlock-v3_acquire", Script{Name: "node-redlock v3 acquire", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// node-redlock v4 acquire: 0 when any KEY exists, else SET PX ARGV[2] ms on
	// every KEY → #KEYS; the library wants all keys, so the yes is #KEYS.
	{"node-redlock-v4_acquire", Script{Name: "node-redlock v4 acquire", Kind: quorum.Acquire, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: replyZero}},
	// node-redlock v4 extend: 0 unless every KEY holds ARGV[1], else SET PX ARGV[2] ms on each → #KEYS.
	{"node-redlock-v4_extend", Script{Name: "node-redlock v4 extend", Kind: quorum.Extend, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// node-redlock v4 release: DEL of each KEY holding ARGV[1] → how many; the library wants #KEYS.
	{"node-redlock-v4_release", Script{Name: "node-redlock v4 release", Kind: quorum.Release, Yes: quorum.YesNumKeys, NoReply: replyZero}},
	// node-redlock v5 (5.0.0-beta) acquire: v4's script re-indented → #KEYS or 0.
	{"node-redlock-v5_acquire", Script{Name: "node-redlock v5 acquire", Kind: quorum.Acquire, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: replyZero}},
	// node-redlock v5 extend: v4's script re-indented → #KEYS or 0.
	{"node-redlock-v5_extend", Script{Name: "node-redlock v5 extend", Kind: quorum.Extend, Yes: quorum.YesNumKeys, TTLArg: 2, TTLUnit: quorum.Millis, NoReply: replyZero}},
	// node-redlock v5 release: v4's script re-indented → keys removed.
	{"node-redlock-v5_release", Script{Name: "node-redlock v5 release", Kind: quorum.Release, Yes: quorum.YesNumKeys, NoReply: replyZero}},

	// python-redis-lock 4.x Lock.release: 1 when not ours (NotAcquired),
	// else DEL the lock, signal waiters on KEYS[2] → 0. Zero is the yes.
	{"python-redis-lock_unlock", Script{Name: "python-redis-lock unlock", Kind: quorum.Release, Yes: quorum.YesZero, NoReply: replyOne}},
	// python-redis-lock 4.x Lock.extend: 1 when not ours (NotAcquired), 2 when
	// the key has no TTL (NotExpirable), else EXPIRE ARGV[2] seconds → 0.
	{"python-redis-lock_extend", Script{Name: "python-redis-lock extend", Kind: quorum.Extend, Yes: quorum.YesZero, TTLArg: 2, TTLUnit: quorum.Seconds, NoReply: replyOne}},
	// python-redis-lock 4.x Lock.reset: deletes the lock whoever holds it and
	// signals waiters → DEL count of KEYS[1] (1, or 0 when it was not
	// there); the library ignores it. Like DEL through lockproxy: 1 when a
	// quorum held the key.
	{"python-redis-lock_reset", Script{Name: "python-redis-lock reset", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},

	// rueidislock (rueidis v1.0.79) acquire with SET NX PX ARGV[2] ms → OK,
	// else nil (the GET only registers client-side tracking).
	{"rueidislock_acqms", Script{Name: "rueidislock acqms", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// rueidislock acquire with SET NX PXAT ARGV[2] (absolute unix ms) → OK, else nil.
	{"rueidislock_acqat", Script{Name: "rueidislock acqat", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.UnixMillis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// rueidislock ForceWithContext: SET PX ARGV[2] ms without NX, overwriting
	// any holder → OK. Acquire: rueidislock draws a new random token per
	// attempt (locker.try), so the undo deletes only what this attempt
	// wrote; the previous holder's value there was already overwritten,
	// which is what forcing means.
	{"rueidislock_fcqms", Script{Name: "rueidislock fcqms", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.Millis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// rueidislock ForceWithContext with SET PXAT ARGV[2] (absolute unix ms) → OK; Acquire as fcqms.
	{"rueidislock_fcqat", Script{Name: "rueidislock fcqat", Kind: quorum.Acquire, Yes: quorum.YesOK, TTLArg: 2, TTLUnit: quorum.UnixMillis, TokenArg: 1, NoIsNoop: true, NoReply: batching.ReplyNil}},
	// rueidislock release: DEL when ours → 1, else 0.
	{"rueidislock_delkey", Script{Name: "rueidislock delkey", Kind: quorum.Release, Yes: quorum.YesOne, NoReply: replyZero}},
	// rueidislock extend: PEXPIREAT ARGV[2] (absolute unix ms) when ours → 1, else 0.
	{"rueidislock_extend", Script{Name: "rueidislock extend", Kind: quorum.Extend, Yes: quorum.YesOne, TTLArg: 2, TTLUnit: quorum.UnixMillis, NoReply: replyZero}},
}

// NewCatalog builds the catalog: the built-in scripts, then custom, the
// operator's [[scripts]] entries. An invalid entry is an error that names
// it (its index in custom and its name) and the field at fault.
func NewCatalog(custom []ScriptConfig) (*Catalog, error) {
	c := &Catalog{bySHA: map[string]*Script{}, byNorm: map[string]*Script{}}
	for _, b := range builtins {
		body, err := scriptFiles.ReadFile("scripts/" + b.file + ".lua")
		if err != nil {
			panic("proxy: builtin script " + b.file + ": " + err.Error())
		}
		s := b.s
		s.Body = string(body)
		s.SHA1 = sha1Hex(body)
		if err := c.add(&s, true); err != nil {
			// Two built-in entries that normalize equal but vote
			// differently: a mistake in the table above.
			panic("proxy: builtin " + s.Name + ": " + err.Error())
		}
	}
	nbuiltin := len(c.scripts)
	for i, sc := range custom {
		s, err := sc.script()
		if err == nil {
			err = c.add(s, false)
		}
		if err != nil {
			var dup *dupError
			if errors.As(err, &dup) {
				idx := indexOf(c.scripts, dup.of)
				switch {
				case idx >= nbuiltin:
					j := idx - nbuiltin
					err = fmt.Errorf("%s scripts[%d] %q", dup.what, j, custom[j].Name)
				case dup.sameScript:
					err = fmt.Errorf("%s builtin %q; remove this entry, the catalog already has that script", dup.what, dup.of.Name)
				default:
					err = fmt.Errorf("%s builtin %q", dup.what, dup.of.Name)
				}
			}
			if sc.Name == "" {
				return nil, fmt.Errorf("scripts[%d]: %w", i, err)
			}
			return nil, fmt.Errorf("scripts[%d] %q: %w", i, sc.Name, err)
		}
	}
	return c, nil
}

// dupError says that a script, or its name, is already in the catalog.
type dupError struct {
	what       string
	of         *Script
	sameScript bool // the script itself, not only its name
}

func (e *dupError) Error() string { return e.what + " " + strconv.Quote(e.of.Name) }

// add puts s in the catalog. A second script with the same sha1, the same
// normal form or the same name is an error, except that built-in bodies
// may share a normal form when they vote alike.
func (c *Catalog) add(s *Script, builtin bool) error {
	for _, o := range c.scripts {
		if o.Name == s.Name {
			return &dupError{what: "name is already used by", of: o}
		}
	}
	if o := c.bySHA[s.SHA1]; o != nil {
		return &dupError{what: "sha1 " + s.SHA1 + " is already", of: o, sameScript: true}
	}
	var norm string
	if s.Body != "" {
		out, err := appendNormal(nil, []byte(s.Body))
		if err != nil {
			return fmt.Errorf("body is not valid Lua: %v", err)
		}
		if len(out) == 0 {
			return errors.New("body has no Lua code")
		}
		norm = string(out)
		if o := c.byNorm[norm]; o != nil && (!builtin || !sameVote(o, s)) {
			return &dupError{what: "body is, up to comments, whitespace, quotes and command-name case, the same script as", of: o, sameScript: true}
		}
	}
	c.scripts = append(c.scripts, s)
	c.bySHA[s.SHA1] = s
	if norm != "" && c.byNorm[norm] == nil {
		c.byNorm[norm] = s
	}
	return nil
}

// sameVote reports whether two scripts are voted on identically.
func sameVote(a, b *Script) bool {
	return a.Kind == b.Kind && a.Yes == b.Yes && a.Combine == b.Combine &&
		a.TTLArg == b.TTLArg && a.TTLUnit == b.TTLUnit && a.TokenArg == b.TokenArg && a.NoIsNoop == b.NoIsNoop &&
		a.NoReply.Equal(b.NoReply)
}

func indexOf(ss []*Script, s *Script) int {
	for i, o := range ss {
		if o == s {
			return i
		}
	}
	return -1
}

// BySHA returns the catalogued script with this sha1 (hex, any case), or
// nil when there is none.
func (c *Catalog) BySHA(sha string) *Script {
	if len(sha) != 40 {
		return nil
	}
	var lower [40]byte
	for i := 0; i < 40; i++ {
		ch := sha[i]
		if 'A' <= ch && ch <= 'F' {
			ch += 'a' - 'A'
		}
		lower[i] = ch
	}
	return c.bySHA[string(lower[:])]
}

// Match returns the catalogued script that body is: the one with its exact
// sha1, else the one with its normal form (see Normalize); nil when there
// is none. It allocates nothing for bodies of usual size.
func (c *Catalog) Match(body []byte) *Script {
	sum := sha1.Sum(body)
	var h [40]byte
	hex.Encode(h[:], sum[:])
	if s := c.bySHA[string(h[:])]; s != nil {
		return s
	}
	bp := normBufs.Get().(*[]byte)
	norm, err := appendNormal((*bp)[:0], body)
	var s *Script
	if err == nil && len(norm) > 0 {
		s = c.byNorm[string(norm)]
	}
	if cap(norm) <= maxPooledNorm {
		*bp = norm[:0]
		normBufs.Put(bp)
	}
	return s
}

// normBufs holds buffers for the normal forms Match computes: a reformatted
// script is normalized on every EVAL, without allocating.
var normBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledNorm bounds the buffers kept in normBufs, so that one huge
// script does not stay in memory.
const maxPooledNorm = 64 << 10

// Scripts returns every catalogued script, the built-in ones first, each
// group in a stable order.
func (c *Catalog) Scripts() []*Script {
	return append([]*Script(nil), c.scripts...)
}

// script validates a [[scripts]] entry and turns it into a Script.
func (sc ScriptConfig) script() (*Script, error) {
	if sc.Name == "" {
		return nil, errors.New("name is required (it is shown in INFO and error replies)")
	}
	s := &Script{Name: sc.Name, Body: sc.Body}
	switch {
	case sc.Body == "" && sc.SHA1 == "":
		return nil, errors.New("body or sha1 is required")
	case sc.SHA1 != "" && !isSHA1Hex(sc.SHA1):
		return nil, fmt.Errorf("sha1 %q is not 40 hex digits", sc.SHA1)
	case sc.Body != "":
		s.SHA1 = sha1Hex([]byte(sc.Body))
		if sc.SHA1 != "" && !strings.EqualFold(sc.SHA1, s.SHA1) {
			return nil, fmt.Errorf("sha1 %s does not match body, whose sha1 is %s", sc.SHA1, s.SHA1)
		}
	default:
		s.SHA1 = strings.ToLower(sc.SHA1)
	}

	var ok bool
	if s.Kind, ok = kinds[sc.Kind]; !ok {
		return nil, fmt.Errorf("kind %q is not one of acquire, release, extend, read", sc.Kind)
	}
	if s.Yes, ok = votes[sc.Vote]; !ok {
		return nil, fmt.Errorf("vote %q is not one of ok, one, true, positive, numkeys, nonnegative, notnil, zero", sc.Vote)
	}
	switch sc.Combine {
	case "", "first":
		s.Combine = quorum.CombineFirst
	case "qth_ttl":
		if s.Yes != quorum.YesNonNegative && s.Yes != quorum.YesPositive {
			return nil, fmt.Errorf("combine \"qth_ttl\" needs integer TTL replies: vote \"nonnegative\" or \"positive\", not %q", sc.Vote)
		}
		s.Combine = quorum.CombineQthTTL
	default:
		return nil, fmt.Errorf("combine %q is not one of first, qth_ttl", sc.Combine)
	}

	timed := s.Kind == quorum.Acquire || s.Kind == quorum.Extend
	switch {
	case sc.TTLArg < 0:
		return nil, fmt.Errorf("ttl_arg %d is not a 1-based ARGV index", sc.TTLArg)
	case sc.TTLArg == 0 && timed:
		return nil, fmt.Errorf("kind %s needs ttl_arg, the ARGV index of the TTL, for validity accounting", sc.Kind)
	case sc.TTLArg > 0 && !timed:
		return nil, fmt.Errorf("ttl_arg is for acquire and extend scripts, not %s", sc.Kind)
	case sc.TTLArg > 0:
		s.TTLArg = sc.TTLArg
		if s.TTLUnit, ok = units[sc.TTLUnit]; !ok {
			return nil, fmt.Errorf("ttl_unit %q is not one of ms, s, unix_ms, unix_s", sc.TTLUnit)
		}
	case sc.TTLUnit != "":
		return nil, errors.New("ttl_unit is set but ttl_arg is not")
	}

	switch {
	case sc.TokenArg < 0:
		return nil, fmt.Errorf("token_arg %d is not a 1-based ARGV index", sc.TokenArg)
	case sc.TokenArg == 0 && s.Kind == quorum.Acquire:
		return nil, errors.New("kind acquire needs token_arg, the ARGV index of the lock token, to undo a failed acquisition")
	case sc.TokenArg > 0 && s.Kind != quorum.Acquire:
		return nil, fmt.Errorf("token_arg is for acquire scripts, not %s (only a failed acquisition is undone)", sc.Kind)
	case sc.TokenArg > 0 && sc.TokenArg == sc.TTLArg:
		return nil, fmt.Errorf("token_arg and ttl_arg are both ARGV[%d]", sc.TokenArg)
	}
	s.TokenArg = sc.TokenArg

	switch sc.NoReply {
	case "":
		switch s.Yes {
		case quorum.YesOK, quorum.YesNotNil:
			s.NoReply = batching.ReplyNil
		case quorum.YesOne, quorum.YesTrue, quorum.YesPositive, quorum.YesNumKeys:
			s.NoReply = replyZero
		default:
			return nil, fmt.Errorf("vote %q needs no_reply, the script's own \"not done\" reply (\"nil\" or an integer)", sc.Vote)
		}
	case "nil":
		s.NoReply = batching.ReplyNil
	default:
		v, err := strconv.ParseInt(sc.NoReply, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("no_reply %q is not \"nil\" or an integer", sc.NoReply)
		}
		s.NoReply = batching.Reply{Type: batching.Integer, Int: v}
	}
	if s.Yes.IsYes(&s.NoReply, 1) && s.Yes != quorum.YesNumKeys {
		return nil, fmt.Errorf("no_reply %s would itself be a yes vote under vote %q", sc.NoReply, sc.Vote)
	}
	return s, nil
}

var (
	kinds = map[string]quorum.Kind{
		"acquire": quorum.Acquire, "release": quorum.Release, "extend": quorum.Extend, "read": quorum.Read,
	}
	votes = map[string]quorum.VoteRule{
		"ok": quorum.YesOK, "one": quorum.YesOne, "true": quorum.YesTrue, "positive": quorum.YesPositive,
		"numkeys": quorum.YesNumKeys, "nonnegative": quorum.YesNonNegative, "notnil": quorum.YesNotNil, "zero": quorum.YesZero,
	}
	units = map[string]quorum.TTLUnit{
		"ms": quorum.Millis, "s": quorum.Seconds, "unix_ms": quorum.UnixMillis, "unix_s": quorum.UnixSecs,
	}
)

func sha1Hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

func isSHA1Hex(s string) bool {
	if len(s) != 40 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
