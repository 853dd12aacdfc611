package analyze

import (
	"fmt"
	"strconv"
	"strings"
)

// Batches: one script over several locks, each of its KEYS on its own.
//
// Redisson 4 renews every lock its watchdog keeps in one script
// (renewChunk): for each KEYS[i], if ARGV[i+1] holds it, PEXPIRE it by
// ARGV[1]; the reply is one 1 or 0 per key. No single quorum decision
// describes that: each key is a lock of its own, with its own token. But the
// script called with one key is an ordinary lock operation, and the script
// called with n keys does exactly what n calls with one key each would do,
// one after the other, and answers their replies side by side. The proxy
// can then run it as n quorum operations, one per key, and join the
// replies. This file checks that equivalence by running the script both
// ways on the same states.

// Batch says how a call of a batch script splits into calls with one key:
// the i-th (1-based) gets KEYS[i], ARGV[1..Shared], and its own Width
// arguments, which are ARGV[Shared+(i-1)*Width+1 .. Shared+i*Width]
// (grouped by key), or with Columns ARGV[Shared+(j-1)*n+i] for its j-th of
// Width (one column of n per argument). The client's reply is an array: the
// elements of every key's reply, in key order.
type Batch struct {
	Shared, Width int
	Columns       bool
	// MaxKeys is the most KEYS a call may pass: as many as were checked.
	MaxKeys int
}

// Split returns the arguments of the i-th (0-based) of n one-key calls;
// argv must hold at least Shared+n*Width values.
func (b *Batch) Split(argv [][]byte, n, i int, into [][]byte) [][]byte {
	into = append(into[:0], argv[:b.Shared]...)
	for j := 0; j < b.Width; j++ {
		into = append(into, argv[b.argIndex(n, i, j)])
	}
	return into
}

// argIndex is the 0-based index in ARGV of key i's j-th own argument.
func (b *Batch) argIndex(n, i, j int) int {
	if b.Columns {
		return b.Shared + j*n + i
	}
	return b.Shared + i*b.Width + j
}

// NeedArgs is the fewest ARGV a call with n KEYS must pass.
func (b *Batch) NeedArgs(n int) int { return b.Shared + n*b.Width }

func (b *Batch) String() string {
	s := fmt.Sprintf("each of KEYS is a lock of its own; ARGV[1..%d] go to every key, then %d per key", b.Shared, b.Width)
	if b.Columns {
		s += " (in columns)"
	}
	return s + fmt.Sprintf("; at most %d KEYS", b.MaxKeys)
}

// maxBatchKeys is the most KEYS a batch call may pass, and the most the
// equivalence is checked with (Redisson's watchdog renews up to 100 locks
// per call by default).
const maxBatchKeys = 128

// batchHolder is one key's state in a batch probe.
type batchHolder uint8

const (
	bAbsent    batchHolder = iota
	bCaller                // held by the key's own token
	bReentered             // held by its own token, hash count 2
	bOther                 // held by another client's token
	bCross                 // held by the next key's token (or the same, when tokens are equal)
	bWrongType             // a value of another type than the lock's
	bPrev                  // held by the previous key's token
	nBatchHolders
)

var batchHolderNames = [...]string{"absent", "held by its token", "re-entered by its token", "held by another token", "held by the next key's token", "of another type", "held by the previous key's token"}

// batchCheck is one equivalence check of a script found to be, with one
// key, the lock operation sem.
type batchCheck struct {
	a        *analysis
	sem      *Semantics
	layout   Batch
	oneVals  []string // the one-key layout's values: KEYS[1], then ARGV
	sameToks bool     // every key's own arguments are equal
	shape    string   // a constant of the script each own argument carries ("": none)
	form     keyType
	cache    map[string]outcome
}

// batch decides whether a script refused with several KEYS (why) is a
// batch of one-key operations, the one-key layout first having given sem
// (with a.vals, a.nkeys and a.nargs as they were for it). It returns sem
// with Batch set, or an error saying why not.
func (a *analysis) batch(sem *Semantics, why error) (*Semantics, error) {
	if sem.MinKeys != 1 || len(sem.LockKeys) != 1 || sem.LockKeys[0] != (Arg{Keys: true, Index: 1}) {
		return nil, why
	}
	if sem.Kind != Extend && sem.Kind != Read {
		// Split, a call whose part fails still runs the other parts, where
		// one Redis stops at the error: renewals and reads only, which
		// leave nothing a caller told "failed" would not expect (found
		// by review: a failed acquire batch left later keys locked).
		return nil, fmt.Errorf("%w; a script that %ss one lock per key is not run as parts (lockproxy splits renewals and reads only)", why, sem.Kind)
	}
	if len(sem.Publishes) > 0 || len(sem.Pushes) > 0 || len(sem.Counters) > 0 || len(sem.AuxKeys) > 0 || len(sem.CommandArgs) > 0 {
		return nil, why // effects beyond the one key would be shared by the parts
	}
	form := map[Form]keyType{FormString: typeString, FormHash: typeHash, FormZSet: typeZSet, FormAny: typeString}[sem.Form]
	var last error
	// Each key's own arguments: one (a token) first, then none (every
	// argument shared), then more.
	widths := []int{1, 0}
	for w := 2; w <= sem.MinArgs; w++ {
		widths = append(widths, w)
	}
	for _, w := range widths {
		if w > sem.MinArgs {
			continue
		}
		for _, cols := range []bool{false, true} {
			if cols && w == 1 {
				continue // the same layout as grouped
			}
			c := &batchCheck{a: a, sem: sem, layout: Batch{Shared: sem.MinArgs - w, Width: w, Columns: cols, MaxKeys: maxBatchKeys},
				oneVals: append([]string(nil), a.vals...), form: form, cache: map[string]outcome{}}
			err := c.run()
			if err == nil {
				out := *sem
				b := c.layout
				out.Batch = &b
				return &out, nil
			}
			if a.b.refusal != nil {
				return nil, why
			}
			if last == nil {
				last = err // the most usual layout's reason says most
			}
		}
	}
	if last == nil {
		return nil, why
	}
	return nil, fmt.Errorf("%w; nor is it one lock per key: %v", why, last)
}

// run checks the layout on every state: all combinations of key states
// with 2 keys, each state with two others after it with 3, and uniform and alternating states up to
// maxBatchKeys and around the script's numeric constants; each with the
// keys' own arguments distinct, and all equal (one holder's token on
// several locks, as Redisson passes it).
func (c *batchCheck) run() error {
	for _, same := range []bool{false, true} {
		if same && c.layout.Width == 0 {
			break // no own arguments to make equal
		}
		c.sameToks = same
		for h0 := batchHolder(0); h0 < nBatchHolders; h0++ {
			for h1 := batchHolder(0); h1 < nBatchHolders; h1++ {
				if err := c.check([]batchHolder{h0, h1}); err != nil {
					return err
				}
			}
		}
		for h := batchHolder(0); h < nBatchHolders; h++ {
			for _, d := range []batchHolder{1, 3} {
				g := (h + d) % nBatchHolders
				if err := c.check([]batchHolder{h, g, (g + d) % nBatchHolders}); err != nil {
					return err
				}
			}
		}
		for _, n := range c.counts() {
			pats := [][2]batchHolder{{bCaller, bOther}, {bCaller, bCaller}, {bAbsent, bCaller}}
			if n > 16 {
				pats = pats[:1] // each key is a run of its own too: bounded work
			}
			for _, pat := range pats {
				hs := make([]batchHolder, n)
				for i := range hs {
					hs[i] = pat[i%2]
				}
				if err := c.check(hs); err != nil {
					return err
				}
			}
		}
	}
	return c.runShapes()
}

// runShapes checks again with each key's own arguments carrying one of the
// script's string constants (a script that branches on a token's shape,
// `string.find(tok, ':')`, would pair keys with other tokens only for
// tokens like Redisson's uuid:threadId; found by review).
func (c *batchCheck) runShapes() error {
	if c.layout.Width == 0 {
		return nil
	}
	defer func() { c.shape, c.sameToks = "", false }()
	tried := 0
	for _, k := range c.a.consts {
		if _, isNum := parseInt(k); isNum || tried >= 8 {
			continue
		}
		tried++
		c.shape, c.sameToks = k, false
		for _, hs := range [][]batchHolder{{bCaller, bCaller}, {bCaller, bOther}, {bOther, bCaller}, {bCaller, bCaller, bCaller}, {bPrev, bPrev, bPrev}} {
			if err := c.check(hs); err != nil {
				return fmt.Errorf("with each key's own arguments carrying %q: %v", k, err)
			}
		}
	}
	return nil
}

// counts are the numbers of keys checked with uniform and alternating
// states: small ones, powers of two, the most allowed, and every numeric
// constant of the script in range with its neighbours (a branch on #KEYS).
func (c *batchCheck) counts() []int {
	seen := map[int]bool{}
	var out []int
	add := func(n int) {
		if n >= 1 && n <= maxBatchKeys && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range []int{1, 4, 5, 16, 100, maxBatchKeys} {
		add(n)
	}
	for _, k := range c.a.consts {
		if v, err := strconv.Atoi(k); err == nil {
			add(v - 1)
			add(v)
			add(v + 1)
		}
	}
	return out
}

// keyName is the i-th key's name in the checks; the first is the one-key
// layout's own.
func (c *batchCheck) keyName(i int) string {
	if i == 0 {
		return c.oneVals[0]
	}
	return formatInt(1_600_000_000_000 + int64(i)*10_000_019)
}

// own is the value of key i's j-th own argument: the one-key layout's for
// the first key (and for every key when they are all equal, or when the
// value is not a probe number: a SELECT's "0"), distinct for the others.
func (c *batchCheck) own(i, j int) string {
	v := c.oneVals[1+c.layout.Shared+j]
	n, ok := parseInt(v)
	if !ok {
		return v
	}
	if i > 0 && !c.sameToks {
		n += int64(i) * 1_000_003
	}
	return c.shape + formatInt(n)
}

// oneCall is the values of key i's one-key call.
func (c *batchCheck) oneCall(i int) []string {
	vals := []string{c.keyName(i)}
	vals = append(vals, c.oneVals[1:1+c.layout.Shared]...)
	for j := 0; j < c.layout.Width; j++ {
		vals = append(vals, c.own(i, j))
	}
	return vals
}

// nCall is the values of the call with n keys.
func (c *batchCheck) nCall(n int) []string {
	vals := make([]string, n, n+c.layout.NeedArgs(n))
	for i := range vals {
		vals[i] = c.keyName(i)
	}
	vals = append(vals, c.oneVals[1:1+c.layout.Shared]...)
	argv := make([]string, n*c.layout.Width)
	for i := 0; i < n; i++ {
		for j := 0; j < c.layout.Width; j++ {
			argv[c.layout.argIndex(n, i, j)-c.layout.Shared] = c.own(i, j)
		}
	}
	return append(vals, argv...)
}

// token is the caller's token of key i (its one-key call's token value).
func (c *batchCheck) token(i int) string {
	t := c.sem.Token
	if t.Arg.IsZero() {
		if t.Const == "" {
			return otherToken2 // tokenless: any value
		}
		return t.Const
	}
	vals := c.oneCall(i)
	if t.Arg.Keys {
		return vals[t.Arg.Index-1]
	}
	return vals[t.Arg.Index]
}

// entry is key i's value for holder h among n keys, at nowMS.
func (c *batchCheck) entry(h batchHolder, i, n int, nowMS int64) *entry {
	tok := c.token(i)
	typ := c.form
	switch h {
	case bAbsent:
		return nil
	case bOther:
		tok = otherToken
	case bCross:
		tok = c.token((i + 1) % n)
	case bPrev:
		tok = c.token((i + n - 1) % n)
	case bWrongType:
		typ = typeString
		if c.form == typeString {
			typ = typeHash
		}
	}
	exp := nowMS + heldPTTL(i%maxLockKeys)
	e := &entry{typ: typ, exp: exp}
	switch typ {
	case typeString:
		e.str = tok
	case typeHash:
		e.hash = []field{{tok, "1"}}
		if h == bReentered {
			e.hash[0].v = "2"
		}
	case typeZSet:
		e.zset = []member{{tok, float64(exp)}}
	}
	return e
}

// exec runs the script once on vals with nkeys KEYS over db at clock.
func (c *batchCheck) exec(name string, vals []string, nkeys int, db keyspace, clock int64) (outcome, error) {
	r := &run{probe: name, db: db, nowUS: clock, vals: vals, nkeys: nkeys, b: c.a.b, dbArg: -1}
	c.a.b.runKeys = int64(nkeys) // n one-key runs' steps
	o, ref := c.a.v.exec(r)
	c.a.b.startRun()
	c.a.b.runKeys = 0
	c.a.runs++
	if ref != nil {
		return o, ref
	}
	if r.keysMiss > nkeys {
		return o, fmt.Errorf("with %d KEYS it reads KEYS[%d]", nkeys, r.keysMiss)
	}
	if r.argvMiss > len(vals)-nkeys {
		return o, fmt.Errorf("with %d KEYS it reads ARGV[%d], past the %d the layout gives", nkeys, r.argvMiss, len(vals)-nkeys)
	}
	if ref := c.a.v.checkFrozen(); ref != nil {
		return o, ref
	}
	return o, nil
}

// check runs the script on hs (one holder per key) with n = len(hs) keys,
// and each key alone with its one-key call, under both clocks (one for
// more than 2 keys: the clocks were compared with fewer), and
// compares: the same commands in the same order, the same keys left, and
// the reply the elements of the one-key replies side by side (or the first
// one-key error).
func (c *batchCheck) check(hs []batchHolder) error {
	n := len(hs)
	state := batchStateName(hs)
	if c.sameToks {
		state += ", every key's own arguments equal"
	}
	clocks := []int64{clockA, clockB}
	if n > 2 {
		clocks = clocks[1:]
	}
	for _, clock := range clocks {
		nowMS := clock / 1000
		db := keyspace{}
		for i, h := range hs {
			if e := c.entry(h, i, n, nowMS); e != nil {
				db[c.keyName(i)] = e
			}
		}
		whole, err := c.exec(state, c.nCall(n), n, db, clock)
		if err != nil {
			return fmt.Errorf("%s: %v", state, err)
		}
		var calls []call
		var elems []Reply
		final := keyspace{}
		var failed *Reply
		for i, h := range hs {
			one, err := c.one(h, i, n, clock)
			if err != nil {
				return fmt.Errorf("%s, key %d alone: %v", state, i+1, err)
			}
			calls = append(calls, one.r.calls...)
			for k, e := range one.r.db {
				if k != c.keyName(i) {
					return fmt.Errorf("%s: key %d alone leaves %s, not its own key", state, i+1, one.r.argName(k))
				}
				final[k] = e
			}
			if one.err != "" || one.reply.Type == ErrorReply {
				failed = &one.reply
				break
			}
			if one.reply.Type != ArrayReply {
				return fmt.Errorf("%s: key %d alone answers %s, not an array to join", state, i+1, one.reply)
			}
			elems = append(elems, one.reply.Elems...)
		}
		if failed != nil {
			if !whole.reply.Equal(*failed) {
				return fmt.Errorf("%s: answers %s where a key alone fails with %s", state, whole.reply, *failed)
			}
			continue
		}
		if d := sameCalls(whole.r, calls); d != "" {
			return fmt.Errorf("%s: %s", state, d)
		}
		if want := (Reply{Type: ArrayReply, Elems: elems}); !whole.reply.Equal(want) {
			return fmt.Errorf("%s: answers %s, the keys alone %s", state, whole.reply, want)
		}
		for _, k := range unionKeys(whole.r.db, final) {
			x, y := whole.r.db[k], final[k]
			if !sameEntry(x, y, 0) || (x != nil && x.exp != y.exp) {
				return fmt.Errorf("%s: key %s ends otherwise than with the key alone", state, whole.r.argName(k))
			}
		}
	}
	return nil
}

// one runs key i's one-key call on its holder h alone (cached).
func (c *batchCheck) one(h batchHolder, i, n int, clock int64) (outcome, error) {
	key := fmt.Sprintf("%d/%d/%d/%s/%s/%s", h, i, clock, strings.Join(c.oneCall(i), "\x00"), c.token((i+1)%n), c.token((i+n-1)%n))
	if o, ok := c.cache[key]; ok {
		return o, nil
	}
	db := keyspace{}
	if e := c.entry(h, i, n, clock/1000); e != nil {
		db[c.keyName(i)] = e
	}
	o, err := c.exec("one key", c.oneCall(i), 1, db, clock)
	if err == nil {
		c.cache[key] = o
	}
	return o, err
}

// sameCalls compares the commands of the whole call with those of the
// one-key calls in key order.
func sameCalls(whole *run, parts []call) string {
	for i := 0; i < len(whole.calls) || i < len(parts); i++ {
		switch {
		case i >= len(whole.calls):
			return fmt.Sprintf("the keys alone make %d commands, the whole call %d", len(parts), len(whole.calls))
		case i >= len(parts):
			return fmt.Sprintf("the whole call makes %d commands, the keys alone %d", len(whole.calls), len(parts))
		case whole.calls[i].name != parts[i].name || strings.Join(whole.calls[i].args, "\x00") != strings.Join(parts[i].args, "\x00"):
			return fmt.Sprintf("its command %d is %s, where the keys alone make %s", i+1, whole.callText(whole.calls[i].args), whole.callText(parts[i].args))
		}
	}
	return ""
}

// batchStateName describes the keys' states of a check.
func batchStateName(hs []batchHolder) string {
	n := len(hs)
	if n <= 3 {
		names := make([]string, n)
		for i, h := range hs {
			names[i] = batchHolderNames[h]
		}
		return fmt.Sprintf("%d KEYS (%s)", n, strings.Join(names, ", "))
	}
	if hs[0] == hs[1] {
		return fmt.Sprintf("%d KEYS, each %s", n, batchHolderNames[hs[0]])
	}
	return fmt.Sprintf("%d KEYS, alternately %s and %s", n, batchHolderNames[hs[0]], batchHolderNames[hs[1]])
}
