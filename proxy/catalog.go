package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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
	// OtherTTLs are the ARGV, besides TTLArg, that carry a TTL the script
	// sets on a master (python-redis-lock's signal list): each is refused
	// over max_ttl, as SET's is, so that no key outlives the restart
	// quarantine. They are not accounted for validity.
	OtherTTLs []ArgTTL
	// Force marks an acquire script that takes the lock whoever holds it
	// (SET without NX: rueidislock's ForceWithContext). Refused when the
	// operator switches force acquisition off (Config.DenyForce).
	Force bool
}

// ArgTTL is an ARGV of a script that carries a TTL, and its unit.
type ArgTTL struct {
	Arg  int            // 1-based ARGV index
	Unit quorum.TTLUnit // Millis, Seconds, UnixMillis, UnixSecs
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
	// OtherTTLArgs are the ARGV, besides ttl_arg, that carry a TTL the
	// script sets on a master, such as the expiry of a signal list: each is
	// refused over max_ttl. Any kind.
	OtherTTLArgs []TTLArgConfig `toml:"other_ttl_args"`
	// Force marks an acquire script that takes the lock whoever holds it;
	// refused while allow_force_acquire is false. Acquire only.
	Force bool `toml:"force"`
}

// TTLArgConfig is one entry of other_ttl_args: { arg = 2, unit = "ms" }.
type TTLArgConfig struct {
	Arg  int    `toml:"arg"`  // 1-based ARGV index
	Unit string `toml:"unit"` // ms | s | unix_ms | unix_s
}

// Catalog recognizes lock scripts: the built-in ones of common lock
// libraries and the operator's. It is immutable once built and safe for
// concurrent use.
type Catalog struct {
	scripts []*Script          // builtin first, then custom, in order
	bySHA   map[string]*Script // lower-case hex sha1 → script
	byNorm  map[string]*Script // Normalize(body) → script, built once here so Match only normalizes the client's text
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
		a.NoReply.Equal(b.NoReply) && slices.Equal(a.OtherTTLs, b.OtherTTLs) && a.Force == b.Force
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
	var err error
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
	if s.OtherTTLs, err = sc.otherTTLs(); err != nil {
		return nil, err
	}
	if sc.Force && s.Kind != quorum.Acquire {
		return nil, fmt.Errorf("force is for acquire scripts (it marks one that takes the lock whoever holds it), not %s", sc.Kind)
	}
	s.Force = sc.Force

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

// otherTTLs validates other_ttl_args.
func (sc ScriptConfig) otherTTLs() ([]ArgTTL, error) {
	var out []ArgTTL
	seen := map[int]bool{sc.TTLArg: sc.TTLArg > 0, sc.TokenArg: sc.TokenArg > 0}
	for i, o := range sc.OtherTTLArgs {
		unit, ok := units[o.Unit]
		switch {
		case o.Arg < 1:
			return nil, fmt.Errorf("other_ttl_args[%d]: arg %d is not a 1-based ARGV index", i, o.Arg)
		case !ok:
			return nil, fmt.Errorf("other_ttl_args[%d]: unit %q is not one of ms, s, unix_ms, unix_s", i, o.Unit)
		case seen[o.Arg]:
			return nil, fmt.Errorf("other_ttl_args[%d]: ARGV[%d] is already ttl_arg, token_arg or an earlier entry", i, o.Arg)
		}
		seen[o.Arg] = true
		out = append(out, ArgTTL{Arg: o.Arg, Unit: unit})
	}
	return out, nil
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
