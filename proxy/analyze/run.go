package analyze

import (
	"fmt"
	"strconv"
	"strings"
)

// run is one execution of the script on one probe state: the model's
// keyspace, the clock, the argument values, and what the script did.
type run struct {
	probe string   // the probe's name, for refusals
	db    keyspace // mutated by the commands
	nowUS int64    // the model's clock, unix microseconds
	vals  []string // KEYS values, then ARGV values
	nkeys int
	b     *budget

	calls     []call
	keysMiss  int              // highest KEYS index read beyond #KEYS, 0 if none
	argvMiss  int              // same for ARGV
	dbArg     int              // index in vals whose value SELECT used, -1 if none
	cmdArgs   map[int]bool     // indexes in vals used as a command name
	clockRead bool             // TIME was called
	decoded   map[string]bool  // keys whose value the script passed to cjson.decode
	bump      map[string]int64 // counters seen higher by this much (counterdiff.go)
}

// call is one command the script ran, with its reply.
type call struct {
	name  string // lower case; "publish" for a command name taken from an argument
	args  []string
	reply Reply
	from  int // for a command name taken from an argument: its index in vals; -1 otherwise
}

func (r *run) nowMS() int64 { return r.nowUS / 1000 }

// pos returns the index in vals of an argument with value s, or -1.
func (r *run) pos(s string) int {
	for i, v := range r.vals {
		if v == s {
			return i
		}
	}
	return -1
}

// argName names an argument string by its position when it has one.
func (r *run) argName(s string) string {
	if p := r.pos(s); p >= 0 {
		return posName(p, r.nkeys)
	}
	return strconv.Quote(s)
}

// posName names index i of vals: KEYS[n] or ARGV[n].
func posName(i, nkeys int) string {
	if i < nkeys {
		return fmt.Sprintf("KEYS[%d]", i+1)
	}
	return fmt.Sprintf("ARGV[%d]", i-nkeys+1)
}

// callText renders a command as the script wrote it, arguments named by
// position where they come from KEYS or ARGV.
func (r *run) callText(args []string) string {
	parts := make([]string, len(args))
	parts[0] = strconv.Quote(strings.ToUpper(args[0]))
	for i, a := range args[1:] {
		parts[i+1] = r.argName(a)
	}
	return "redis.call(" + strings.Join(parts, ", ") + ")"
}

func (r *run) fail(c Class, args []string, arg, reason string) Reply {
	r.b.fail(&Refusal{Class: c, Probe: r.probe, Command: r.callText(args), Arg: arg, Reason: reason})
	return Reply{}
}

// exec runs one command in the model. Commands outside the model, keys that
// are not verbatim arguments and databases other than 0 are refused; other
// mistakes get Redis's own error reply.
func (r *run) exec(args []string) Reply {
	name := lowerASCII(args[0])
	spec, ok := commands[name]
	if !ok {
		if p := r.pos(args[0]); p >= 0 {
			return r.commandFromArg(p, args)
		}
		return r.fail(ClassCommand, args, "", fmt.Sprintf("%s is not a command the analyzer models (only lock-related commands are)", strings.ToUpper(args[0])))
	}
	if (spec.arity > 0 && len(args) != spec.arity) || (spec.arity < 0 && len(args) < -spec.arity) {
		return errReply("ERR Wrong number of args calling Redis command from script")
	}
	if spec.keys != nil {
		for _, i := range spec.keys(args) {
			if r.pos(args[i]) < 0 {
				return r.fail(ClassKey, args, strconv.Quote(args[i]), fmt.Sprintf("the key %q does not come verbatim from KEYS or ARGV", args[i]))
			}
		}
	}
	reply := spec.fn(r, args)
	if r.b.refusal == nil {
		r.calls = append(r.calls, call{name: name, args: args, reply: reply, from: -1})
	}
	return reply
}

// commandFromArg runs a command whose name the script took from an
// argument (Redisson: redis.call(ARGV[4], KEYS[2], ARGV[1]) with "publish"
// or "spublish"). The analyzer accepts it as a publication; the caller must
// check, per call, that the argument names one of PublishCommands.
func (r *run) commandFromArg(p int, args []string) Reply {
	if len(args) != 3 {
		return r.fail(ClassCommand, args, posName(p, r.nkeys), "a command name taken from an argument must be PUBLISH or SPUBLISH, with a channel and a message")
	}
	if r.cmdArgs == nil {
		r.cmdArgs = map[int]bool{}
	}
	r.cmdArgs[p] = true
	reply := intReply(0)
	r.calls = append(r.calls, call{name: "publish", args: args, reply: reply, from: p})
	return reply
}

// lookup returns a live key, deleting it first if it has expired.
func (r *run) lookup(k string) *entry {
	e := r.db[k]
	if e != nil && e.exp != 0 && r.nowMS() > e.exp {
		delete(r.db, k)
		return nil
	}
	return e
}

// lookupType returns a live key of type t; wrong is true when the key
// exists with another type (WRONGTYPE).
func (r *run) lookupType(k string, t keyType) (e *entry, wrong bool) {
	e = r.lookup(k)
	if e != nil && e.typ != t {
		return nil, true
	}
	return e, false
}

// create returns key k of type t, making an empty one when it is absent.
func (r *run) create(k string, t keyType) (e *entry, wrong bool) {
	e, wrong = r.lookupType(k, t)
	if e == nil && !wrong {
		e = &entry{typ: t}
		r.db[k] = e
	}
	return e, wrong
}

// dropIfEmpty deletes an aggregate key that lost its last element.
func (r *run) dropIfEmpty(k string, e *entry) {
	if e.empty() {
		delete(r.db, k)
	}
}

var (
	wrongType    = errReply("WRONGTYPE Operation against a key holding the wrong kind of value")
	notInteger   = errReply("ERR value is not an integer or out of range")
	notFloat     = errReply("ERR value is not a valid float")
	syntaxError  = errReply("ERR syntax error")
	overflowIncr = errReply("ERR increment or decrement would overflow")
)

func arityError(name string) Reply {
	return errReply(fmt.Sprintf("ERR wrong number of arguments for '%s' command", name))
}

// parseInt parses as Redis's string2ll: no sign but '-', no leading zeros,
// no spaces, within int64.
func parseInt(s string) (int64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (digits[0] == '0' && len(digits) > 1) || (digits == "0" && len(s) > 1) {
		return 0, false
	}
	for _, c := range []byte(digits) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}

// parseScore parses a sorted-set score as Redis does: a C double, "inf"
// allowed, NaN and surrounding spaces not.
func parseScore(s string) (float64, bool) {
	if s == "" || s[0] == ' ' || s[len(s)-1] == ' ' || strings.Contains(s, "_") {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil && f == f
}
