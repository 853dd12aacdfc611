package catalog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/analyze"
	"github.com/lockproxy/lockproxy/quorum"
)

// The operator's scripts: [[scripts]] in config.toml, checked and turned
// into catalog entries.

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
	NoReply any    `toml:"no_reply"` // a string ("nil", "0") or a TOML integer (0)
	Combine string `toml:"combine"`  // "" or "first": the first yes reply; "qth_ttl": replies are TTLs in ms, answer the Q-th largest minus drift
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
		if !s.Yes.Same(&quorum.YesNonNegative) && !s.Yes.Same(&quorum.YesPositive) {
			return nil, fmt.Errorf("combine \"qth_ttl\" needs integer TTL replies: vote \"nonnegative\" or \"positive\", not %q", sc.Vote)
		}
		s.Combine = quorum.CombineQthTTL
	default:
		return nil, fmt.Errorf("combine %q is not one of first, qth_ttl", sc.Combine)
	}

	if err := sc.args(s); err != nil {
		return nil, err
	}

	noReply, err := noReplyString(sc.NoReply)
	if err != nil {
		return nil, err
	}
	switch noReply {
	case "":
		switch sc.Vote {
		case "ok", "notnil":
			s.NoReply = resp.ReplyNil
		case "one", "true", "positive", "numkeys":
			s.NoReply = replyZero
		default:
			return nil, fmt.Errorf("vote %q needs no_reply, the script's own \"not done\" reply (\"nil\" or an integer)", sc.Vote)
		}
	case "nil":
		s.NoReply = resp.ReplyNil
	default:
		v, err := strconv.ParseInt(noReply, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("no_reply %q is not \"nil\" or an integer", noReply)
		}
		s.NoReply = resp.Reply{Type: resp.Integer, Int: v}
	}
	if s.Yes.IsYes(&s.NoReply, 1) && sc.Vote != "numkeys" {
		return nil, fmt.Errorf("no_reply %s would itself be a yes vote under vote %q", noReply, sc.Vote)
	}
	if s.Kind == quorum.Acquire && sc.Body != "" {
		// A re-entrant lock counted as a plain acquire would let each
		// master's count vote on its own, which can leave a quorum
		// whose counts are below the holder's (quorum/reentrant.go).
		if sem, err := analyze.Analyze([]byte(sc.Body), analyze.Options{}); err == nil && sem.Kind == analyze.ReentrantAcquire {
			return nil, errors.New("kind \"acquire\" for a re-entrant (hash count) lock: remove the entry, and lockproxy understands the script itself, reading each master's count of the token to decide it")
		}
	}
	return s, nil
}

// noReplyString reads no_reply as written: a string, or an integer (the
// README and config.toml show both).
func noReplyString(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case int:
		return strconv.Itoa(v), nil
	}
	return "", fmt.Errorf("no_reply %v is not \"nil\" or an integer", v)
}

// args validates what the ARGV of s carry: ttl_arg and ttl_unit,
// token_arg, other_ttl_args, and force, which needs an acquire script.
func (sc ScriptConfig) args(s *Script) error {
	var ok bool
	var err error
	timed := s.Kind == quorum.Acquire || s.Kind == quorum.Extend
	switch {
	case sc.TTLArg < 0:
		return fmt.Errorf("ttl_arg %d is not a 1-based ARGV index", sc.TTLArg)
	case sc.TTLArg == 0 && timed:
		return fmt.Errorf("kind %s needs ttl_arg, the ARGV index of the TTL, for validity accounting", sc.Kind)
	case sc.TTLArg > 0 && !timed:
		return fmt.Errorf("ttl_arg is for acquire and extend scripts, not %s", sc.Kind)
	case sc.TTLArg > 0:
		s.TTLArg = sc.TTLArg
		if s.TTLUnit, ok = units[sc.TTLUnit]; !ok {
			return fmt.Errorf("ttl_unit %q is not one of ms, s, unix_ms, unix_s", sc.TTLUnit)
		}
	case sc.TTLUnit != "":
		return errors.New("ttl_unit is set but ttl_arg is not")
	}

	switch {
	case sc.TokenArg < 0:
		return fmt.Errorf("token_arg %d is not a 1-based ARGV index", sc.TokenArg)
	case sc.TokenArg == 0 && s.Kind == quorum.Acquire:
		return errors.New("kind acquire needs token_arg, the ARGV index of the lock token, to undo a failed acquisition")
	case sc.TokenArg > 0 && s.Kind != quorum.Acquire:
		return fmt.Errorf("token_arg is for acquire scripts, not %s (only a failed acquisition is undone)", sc.Kind)
	case sc.TokenArg > 0 && sc.TokenArg == sc.TTLArg:
		return fmt.Errorf("token_arg and ttl_arg are both ARGV[%d]", sc.TokenArg)
	}
	s.TokenArg = sc.TokenArg
	if s.OtherTTLs, err = sc.otherTTLs(); err != nil {
		return err
	}
	if sc.Force && s.Kind != quorum.Acquire && s.Kind != quorum.Release {
		return fmt.Errorf("force is for acquire and release scripts (it marks one that takes or deletes the lock whoever holds it), not %s", sc.Kind)
	}
	s.Force = sc.Force
	return nil
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
		"ok": quorum.YesOK, "one": quorum.YesOne, "true": quorum.YesOne, "positive": quorum.YesPositive,
		"numkeys": quorum.YesNumKeys, "nonnegative": quorum.YesNonNegative, "notnil": quorum.YesNotNil, "zero": quorum.YesZero,
	}
	units = map[string]quorum.TTLUnit{
		"ms": quorum.Millis, "s": quorum.Seconds, "unix_ms": quorum.UnixMillis, "unix_s": quorum.UnixSecs,
	}
)
