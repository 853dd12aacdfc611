// Package catalog knows the lock scripts lockproxy runs: the built-in
// catalog, the operator's [[scripts]], and scripts understood by what they
// do (proxy/analyze), by sha1 and normal form; and each connection's view
// of them (SCRIPT LOAD/EXISTS/FLUSH).
//
// A Catalog is built once at start-up (New). The proxy looks scripts up
// through a Table (EVALSHA, SCRIPT EXISTS, LOAD and FLUSH) and hands the
// bodies the catalog does not know to an Understander, whose analyses run
// off the request path. A Script says how the engine votes on it; Op is
// what the proxy passes to quorum.Engine.Script.
package catalog

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/analyze"
	"github.com/lockproxy/lockproxy/quorum"
)

// Script is one Lua script lockproxy runs (catalogued, configured, or
// understood by the analyzer) and how it votes on it.
type Script struct {
	Name     string          // e.g. "redis-py release": shown in INFO and error replies
	Body     string          // the exact text clients send; "" for a custom entry given by sha1 only
	SHA1     string          // lower-case hex sha1 of Body
	Kind     quorum.Kind     // Acquire, AcquireOrExtend, Release, Extend, Read
	Yes      quorum.VoteRule // which master reply is a yes vote
	Combine  quorum.Combine  // CombineFirst, or CombineQthTTL for replies that are remaining TTLs in ms
	TTLArg   int             // 1-based index of the TTL (validity accounting) in ARGV, or in KEYS with TTLInKeys; 0 = none
	TTLUnit  quorum.TTLUnit  // unit of that TTL: Millis, Seconds, UnixMillis, UnixSecs
	TokenArg int             // 1-based ARGV (or KEYS, TokenInKeys) index of the lock token; 0 = none or TokenConst
	NoIsNoop bool            // Acquire: a reply that is neither yes nor an error proves the script wrote nothing, so that master needs no undo (which would delete a key already holding the token, as Redis would not)
	NoReply  resp.Reply      // what the client gets when the vote is lost and no master gave a non-yes reply (e.g. :0, or nil for scripts that return nothing)
	// RunAs, when set, is the sha1 of one of lockproxy's own scripts that
	// the masters run instead, with max_ttl in ms appended to ARGV: the
	// same replies, with every TTL it sets capped at max_ttl.
	RunAs string
	// OtherTTLs are the arguments, besides the lock's TTL, that carry a TTL
	// the script sets on a master (python-redis-lock's signal list): each is
	// refused over max_ttl, as SET's is, so that no key outlives the restart
	// quarantine. They are not accounted for validity.
	OtherTTLs []ArgTTL
	// Force marks an acquire script that takes the lock whoever holds it
	// (SET without NX: rueidislock's ForceWithContext). Refused when the
	// operator switches force acquisition off (proxy.Config.DenyForce).
	Force bool
	// AbsentYes, for a release: its yes reply where there is no lock,
	// which is also its reply where it deleted the lock (analyze's
	// AbsentIsYes; quorum.ScriptOp.AbsentYes).
	AbsentYes *resp.Reply
	// DeletedYes, for a release: its yes reply where it deleted the lock,
	// when another yes says a count is left (analyze's DeletedReply;
	// quorum.ScriptOp.DeletedYes).
	DeletedYes *resp.Reply

	// What the analyzer adds for scripts it understood (zero for the
	// catalog's, whose layout the fields above say).
	TTLInKeys   bool          // TTLArg indexes KEYS
	TTLConst    time.Duration // the lock's TTL is written in the script
	TokenInKeys bool          // TokenArg indexes KEYS
	TokenConst  string        // the token is written in the script (tokenless locks)
	Undo        quorum.UndoOp // how a failed acquisition is undone; UndoDelIfValue for the catalog's acquire scripts
	UndoExtra   []string      // UndoZRem: constant members the acquisition adds besides the token
	TokenNot    []string      // the script's string constants: a call whose token is one is refused (analyze.Semantics.Constants)
	UndoField   string        // UndoJSONField: the JSON field holding the token
	LockKeys    []int         // KEYS that name the lock; none: every KEYS (the catalog's)
	KeyArg      int           // a lock key passed in ARGV (numkeys 0): its index
	NoPTTLAt    int           // where a no reply carries the holder's PTTL: -1 nowhere, 0 the reply, i an array element
	MinKeys     int           // the fewest KEYS a call must pass
	MinArgs     int           // the fewest ARGV a call must pass
	DBArg       int           // an ARGV the script SELECTs: a call must pass "0"
	CommandArgs []int         // ARGV the script runs as a command name: publish or spublish
	Semantics   string        // the analyzer's summary, for INFO and errors
	// ValuePTTL: the script returns {GET KEYS[1], PTTL KEYS[1]}; the
	// engine's quorum read of both answers it (readforms.go), and no
	// master runs the script.
	ValuePTTL bool
	// Local, when set, is the reply lockproxy gives for the script itself,
	// sending nothing: its only write cannot outlive the drift allowance.
	Local *resp.Reply
	// Counter, for an acquire script whose yes reply is the new value of a
	// counter it increments (a fencing token): that counter's key. A grant
	// answers the quorum max-register's increment of it instead, which
	// never goes back (docs/fencing.md).
	Counter quorum.Arg
	// CounterAt: the counter's value is the yes reply's CounterAt-th
	// element (1-based), not the reply itself (Redisson's RFencedLock).
	CounterAt int
	// Reentrant: a re-entrant hash lock's acquire (understood only).
	// masterBody (sha1 masterSHA), when set, is what the masters run
	// instead of Body: wrapped to answer what the engine needs (wrap).
	Reentrant             bool
	masterBody, masterSHA string
	// Signals are the lists the script pushes to when it answers yes
	// (python-redis-lock's release fills the list its blocked acquirers
	// BLPOP): a yes emits a push event for each, which wakes the BLPOP
	// waiters of every proxy (blocking.go).
	Signals []quorum.Arg
	// Batch, when set: the script is one lock operation per KEYS, each
	// key a lock of its own (analyze.Batch, Redisson 4's renewChunk).
	// The fields above describe a call with one key; the proxy splits a
	// call into one such call per key and joins the replies.
	Batch *analyze.Batch
	// CheckToken, when set, is the Lua expression of the holder's token
	// the masters check the lock against (quorum.WrapCheck), where it is
	// not the whole TokenArg: bsm's token is a prefix of the value,
	// written {p = prefix} (quorum's lockproxy_holds matches a plain token
	// exactly, so a prefix has to say it is one); a JSON lock value's token
	// field, {f = field, v = token} (analyze.Semantics.TokenField).
	CheckToken string
	// GuardArg (catalog releases, which record no token): the ARGV index
	// of the caller's token, for running the release guarded only
	// (quorum.WrapGuard): a release that writes a key besides its lock
	// (python-redis-lock's signal list, KEYS[2]) is told another client's
	// lock there from its own by it.
	GuardArg int

	// ExactArgs (understood scripts): a call must pass exactly MinArgs
	// ARGV, the count the analyzer ran the script with, unless the script
	// cannot see the count (analyze.Semantics.ArgvCountBlind). MaxKeys, when set,
	// is the most KEYS a call may pass (MinKeys+1: the analyzer ran both
	// counts; 0 when every KEYS is a lock key). A script may branch on
	// #ARGV or #KEYS (an optional unit or force argument), which the
	// analysis saw only at the counts it ran.
	ExactArgs bool
	MaxKeys   int
	// AuxGuard (understood scripts whose lock keys are not every KEYS):
	// an acquire's or extend's other KEYS must be left as they were,
	// except WrittenKeys, the KEYS indexes the analyzer's probes saw it
	// write (a fencing counter, a signal list): quorum.Check.Aux.
	AuxGuard    bool
	WrittenKeys []int

	op *quorum.ScriptOp // how the engine runs it, built once by finish
}

// Op is how the engine runs s: what quorum.Engine.Script takes.
func (s *Script) Op() *quorum.ScriptOp { return s.op }

// WithBody returns s with body as its text, for a custom script registered
// by sha1 only (Body ""): the client's text, which hashes to that sha1, is
// what the masters load.
func (s *Script) WithBody(body []byte) *Script {
	full := *s
	full.Body = string(body)
	return full.finish()
}

// ArgTTL is an argument of a script that carries a TTL, and its unit.
type ArgTTL struct {
	Arg   int            // 1-based ARGV (or KEYS) index; 0 with Const
	Keys  bool           // Arg indexes KEYS
	Unit  quorum.TTLUnit // Millis, Seconds, UnixMillis, UnixSecs
	Const time.Duration  // a TTL written in the script
}

// finish builds how the engine runs s, once its fields are final.
func (s *Script) finish() *Script {
	op := &quorum.ScriptOp{
		SHA1: s.SHA1, Body: s.Body, RunAs: s.RunAs, Kind: s.Kind, Yes: s.Yes,
		No: s.NoReply, NoPTTLAt: s.NoPTTLAt, Combine: s.Combine, NoIsNoop: s.NoIsNoop,
		Undo: s.Undo, TokenConst: s.TokenConst, UndoExtra: s.UndoExtra, UndoField: s.UndoField,
		Counter: s.Counter, CounterAt: s.CounterAt, AbsentYes: s.AbsentYes, DeletedYes: s.DeletedYes,
	}
	if s.TokenArg > 0 {
		op.Token = quorum.Arg{Keys: s.TokenInKeys, Index: s.TokenArg}
	}
	if op.Undo == quorum.UndoNone && s.Kind == quorum.Acquire && s.TokenArg > 0 && s.Semantics == "" {
		op.Undo = quorum.UndoDelIfValue // the catalog's and [[scripts]]' acquire: compare-and-delete
	}
	switch {
	case s.KeyArg > 0:
		op.KeyArg = quorum.Arg{Index: s.KeyArg}
	case len(s.LockKeys) > 0:
		op.LockKeys = s.LockKeys
	default:
		op.EachKey = true
	}
	if s.NoPTTLAt == 0 && s.Semantics == "" {
		op.NoPTTLAt = -1 // the catalog's scripts carry no PTTL in their no replies
	}
	op.Reentrant = s.Reentrant
	if s.masterSHA != "" {
		op.Body, op.SHA1 = s.masterBody, s.masterSHA
	}
	fenced := s.Kind == quorum.Acquire && !op.Counter.IsZero()
	if (s.Kind == quorum.Extend || s.Kind == quorum.AcquireOrExtend || fenced) && op.Body != "" && op.RunAs == "" {
		// An extend never shortens a lock on a master (WrapNoShorten);
		// nor does a fenced acquire, which is not checked (check): a
		// fenced re-entry with a shorter lease, granted or not, lowered
		// the holder's TTL (Redisson's RFencedLock; review, helper-63).
		keys := make([]quorum.Arg, 0, len(s.LockKeys))
		if s.KeyArg > 0 {
			keys = append(keys, quorum.Arg{Index: s.KeyArg})
		}
		for _, k := range s.LockKeys {
			keys = append(keys, quorum.Arg{Keys: true, Index: k})
		}
		if body, err := quorum.WrapNoShorten(op.Body, keys, op.EachKey); err == nil {
			op.Body, op.SHA1 = body, quorum.ScriptSHA1(body)
		}
	}
	s.check(op)
	s.op = op
	return s
}

// check wraps what the masters run for an acquire or an extend with a
// token (quorum.WrapCheck): each master then says whether its copy held
// the token before and holds it after, for how long, and until when. A
// yes counts only where it holds it long enough, a failed acquisition is
// undone only where the token was not there before, and a granted
// extend's shorter TTL is written only where no later write moved the
// expiry (check.go). Fenced acquires are checked too (the check's
// fields come off the reply before the counter is read), and a tokenless
// lock is checked against the constant it writes: unchecked, their
// absolute expiries (SET NX PXAT) expired inside the validity on masters
// whose clocks ran ahead of lockproxy's (review, helper-68). Scripts run
// as one of lockproxy's own are left as they are.
//
// A release or read with a token runs guarded instead (quorum.WrapGuard):
// a string or hash lock another token holds, or a sorted set's unexpired
// member of another, that the script changed is put back, and that master
// answers an error, no yes. The analyzer cannot try
// every argument's value against every remaining TTL, and a release that
// deleted another holder's lock on such a path gave that lock to the next
// client inside its holder's validity (review, helper-68).
func (s *Script) check(op *quorum.ScriptOp) {
	switch {
	case op.Body == "" || op.RunAs != "" || (s.TokenArg <= 0 && s.TokenConst == "" && s.GuardArg <= 0):
		return
	case s.Kind == quorum.Release || s.Kind == quorum.Read:
		// Every KEYS, not only the lock keys: a release that also deletes
		// its second key deleted whatever lock a client named there
		// (review, helper-69).
		_, token := s.checkArgs()
		if s.TokenArg <= 0 && s.TokenConst == "" {
			token = fmt.Sprintf("ARGV[%d]", s.GuardArg)
		}
		if body, err := quorum.WrapGuard(op.Body, "KEYS", token); err == nil {
			op.Body, op.SHA1 = body, quorum.ScriptSHA1(body)
		}
		return
	case s.Kind != quorum.Acquire && s.Kind != quorum.AcquireOrExtend && s.Kind != quorum.Extend,
		s.TokenArg <= 0 && s.TokenConst == "":
		return
	}
	keys, token := s.checkArgs()
	c := quorum.Check{
		Keys: keys, Token: token, Keep: s.Kind == quorum.Acquire, Guard: !s.Force,
		Tokenless: s.TokenArg <= 0 && (s.Kind == quorum.Acquire || s.Kind == quorum.AcquireOrExtend),
	}
	if s.AuxGuard {
		w := make([]string, len(s.WrittenKeys))
		for i, k := range s.WrittenKeys {
			w[i] = fmt.Sprintf("[%d] = true", k)
		}
		c.Aux = "{" + strings.Join(w, ", ") + "}"
	}
	body, err := quorum.WrapCheck(op.Body, c)
	if err != nil {
		return
	}
	op.Body, op.SHA1, op.Checked = body, quorum.ScriptSHA1(body), true
	// An absolute expiry (unix_ms, unix_s) is checked too: a master keeps
	// the deadline and reads it on its own clock, so one whose clock is
	// ahead of lockproxy's expires the copy that much before the validity
	// lockproxy accounts (TTL = deadline - its clock at arrival). Its copy
	// counts only if its PTTL outlasts that TTL less drift: the master ran
	// the script after the command arrived, so an honest clock leaves at
	// least that, less the time in between.
	op.CheckTTL = s.TTLConst > 0 || s.TTLArg > 0
}

// checkArgs are the Lua expressions of the script's lock keys and token,
// for WrapCheck and WrapGuard.
func (s *Script) checkArgs() (keys, token string) {
	token = fmt.Sprintf("ARGV[%d]", s.TokenArg)
	switch {
	case s.TokenArg <= 0:
		// A tokenless lock's value, written in the script: its copies are
		// checked like a token's (a fenced or tokenless acquire with an
		// absolute expiry left unchecked expired inside the validity on
		// masters whose clocks run ahead; review, helper-68).
		token = luaString(s.TokenConst)
	case s.CheckToken != "":
		token = s.CheckToken
	case s.TokenInKeys:
		token = fmt.Sprintf("KEYS[%d]", s.TokenArg)
	}
	keys = "KEYS"
	switch {
	case s.KeyArg > 0:
		keys = fmt.Sprintf("{ARGV[%d]}", s.KeyArg)
	case len(s.LockKeys) > 0:
		parts := make([]string, len(s.LockKeys))
		for i, k := range s.LockKeys {
			parts[i] = fmt.Sprintf("KEYS[%d]", k)
		}
		keys = "{" + strings.Join(parts, ", ") + "}"
	}
	return keys, token
}

// MasterScripts returns the bodies every master connection loads: what
// the masters run for each catalogued script with a body (its own, or the
// wrapper lockproxy runs in its place: WrapNoShorten).
func (c *Catalog) MasterScripts() []string {
	var out []string
	for _, s := range c.scripts {
		if s.Body == "" {
			continue
		}
		if s.op != nil && s.op.Body != "" && s.op.RunAs == "" {
			out = append(out, s.op.Body)
			continue
		}
		out = append(out, s.Body)
	}
	return out
}

// Catalog recognizes lock scripts: the built-in ones of common lock
// libraries and the operator's. It is immutable once built and safe for
// concurrent use.
type Catalog struct {
	scripts []*Script          // builtin first, then custom, in order
	bySHA   map[string]*Script // lower-case hex sha1 → script
	byNorm  map[string]*Script // Normalize(body) → script, built once here so Match only normalizes the client's text
	reads   map[string]*Script // Normalize(body) → a read the engine answers itself (readforms.go)
}

// New builds the catalog: the built-in scripts, then custom, the
// operator's [[scripts]] entries. An invalid entry is an error that names
// it (its index in custom and its name) and the field at fault.
func New(custom []ScriptConfig) (*Catalog, error) {
	c := &Catalog{bySHA: map[string]*Script{}, byNorm: map[string]*Script{}}
	c.addReadForms()
	for _, b := range builtins {
		body, err := scriptFiles.ReadFile("scripts/" + b.file + ".lua")
		if err != nil {
			panic("catalog: builtin script " + b.file + ": " + err.Error())
		}
		s := b.s
		s.Body = string(body)
		s.SHA1 = sha1Hex(body)
		s.finish()
		s.op.Preloaded = true // its body is in quorum.Config.Scripts
		if err := c.add(&s, true); err != nil {
			// Two built-in entries that normalize equal but vote
			// differently: a mistake in the table above.
			panic("catalog: builtin " + s.Name + ": " + err.Error())
		}
	}
	nbuiltin := len(c.scripts)
	for i, sc := range custom {
		s, err := sc.script()
		if err == nil {
			s.finish()
			s.op.Preloaded = s.Body != "" // loaded on every master connection, as the built-in ones
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
	return a.Kind == b.Kind && a.Yes.Same(&b.Yes) && a.Combine == b.Combine &&
		a.TTLArg == b.TTLArg && a.TTLUnit == b.TTLUnit && a.TokenArg == b.TokenArg && a.NoIsNoop == b.NoIsNoop &&
		a.NoReply.Equal(b.NoReply) && slices.Equal(a.OtherTTLs, b.OtherTTLs) && a.Force == b.Force &&
		sameReplyPtr(a.AbsentYes, b.AbsentYes) && sameReplyPtr(a.DeletedYes, b.DeletedYes)
}

// sameReplyPtr reports whether a and b are both nil or equal replies.
func sameReplyPtr(a, b *resp.Reply) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Equal(*b))
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
// sha1, else the one with its normal form (see Normalize), else a read
// form with it (readforms.go); nil when there is none. It allocates nothing for bodies of usual size.
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
		if s = c.byNorm[string(norm)]; s == nil {
			s = c.reads[string(norm)]
		}
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

// luaString is s as a Lua string literal (every byte a decimal escape, so
// any byte is safe).
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\%d", s[i])
	}
	b.WriteByte('"')
	return b.String()
}
