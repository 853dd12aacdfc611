package analyze

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Class groups refusals by cause, for callers and tests that act on the cause
// rather than on the text.
type Class uint8

const (
	ClassCompile          Class = iota + 1 // the body is too large or is not Lua 5.1
	ClassCommand                           // a command outside the model (FLUSHALL, CONFIG, EVAL…) or a bad use of one
	ClassKey                               // a key that does not come verbatim from KEYS or ARGV
	ClassDatabase                          // SELECT of a database other than 0
	ClassLibrary                           // a Lua library or function the sandbox does not provide
	ClassRandom                            // randomness (math.random)
	ClassClock                             // the clock used for anything but an expiry relative to now
	ClassNondeterministic                  // two identical runs differ, or a library table was changed
	ClassBudget                            // instructions, bytes or time ran out
	ClassBehaviour                         // the behaviour over the probes fits no lock class exactly
)

var classNames = [...]string{
	ClassCompile: "compile", ClassCommand: "command", ClassKey: "key", ClassDatabase: "database",
	ClassLibrary: "library", ClassRandom: "random", ClassClock: "clock",
	ClassNondeterministic: "nondeterministic", ClassBudget: "budget", ClassBehaviour: "behaviour",
}

func (c Class) String() string {
	if int(c) < len(classNames) && classNames[c] != "" {
		return classNames[c]
	}
	return "unknown"
}

// Refusal is the error Analyze returns for a script it does not understand.
// Every field but Reason may be empty.
type Refusal struct {
	Class   Class
	Probe   string // the probe state, e.g. `KEYS[1] held by another token (string)`
	Command string // the Redis command or Lua function at fault, e.g. `redis.call("FLUSHALL")`
	Arg     string // the argument at fault, e.g. `ARGV[2]`
	Reason  string // what did not fit, in words
}

// MaxRefusalField bounds each field of a refusal's text (Error): a field
// may quote strings the script built at run time (a key, an error message,
// a reply), up to the run's string budget, and the text is sent to the
// client and kept with the script's sha1 by the proxy's cache.
const MaxRefusalField = 256

// Error renders the refusal on one line: the reason, then where it happened,
// each field cut to MaxRefusalField bytes.
// The text is part of lockproxy's client-visible contract (docs/analyzer.md).
func (r *Refusal) Error() string {
	var b strings.Builder
	b.WriteString("script refused: ")
	b.WriteString(Clip(r.Reason, MaxRefusalField))
	var where []string
	if r.Probe != "" {
		where = append(where, "probe: "+Clip(r.Probe, MaxRefusalField))
	}
	if r.Command != "" {
		where = append(where, "command: "+Clip(r.Command, MaxRefusalField))
	}
	if r.Arg != "" {
		where = append(where, "argument: "+Clip(r.Arg, MaxRefusalField))
	}
	if len(where) > 0 {
		b.WriteString(" (")
		b.WriteString(strings.Join(where, "; "))
		b.WriteString(")")
	}
	return b.String()
}

// Clip cuts s to at most n bytes, on a UTF-8 boundary, ending it with
// its full length: a message that quotes what a script built stays short.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	tail := fmt.Sprintf("… (%d bytes)", len(s))
	cut := n - len(tail)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:max(cut, 0)] + tail
}
