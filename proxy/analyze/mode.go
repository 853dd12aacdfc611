package analyze

// A mode argument is one the script compares with a constant of its own to
// choose what it may do: redlock-rb's lock script takes a free key only
// when ARGV[3] is "yes" (a lock call) and otherwise only re-sets the TTL of
// the caller's own lock (an extend call). The probes give every argument a
// distinct number, so they see the narrower mode; the alternative run with
// the constant then answers yes where the probes declined, and the script
// was refused. Analyzed with the argument set to that constant instead, the
// wider mode is the script's behaviour, and every other value must then,
// as any free argument's, either do the same or decline (answer no and
// write no lock key): a narrower mode is the wider one declining where it
// would have taken a free key, which the quorum counts as a lost vote.

// modeArg is an argument and the constant that widened what the script did.
type modeArg struct {
	arg Arg
	val string
}

// noteGrant records, after a refused alternative, that free argument p set
// to the script's constant c answered yes where the probes declined: the
// first such argument is the one analyzeInMode tries as a mode.
func (a *analysis) noteGrant(p int, c string) {
	if a.granted && a.grants == nil && a.modes == nil && valueIn(c, a.consts) {
		a.grants = &modeArg{arg: argOf(p, a.nkeys), val: c}
	}
	a.granted = false
}

// analyzeInMode analyzes the script again, from the start and within the
// same budget, with the recorded argument probed as its constant; refused
// then, the first analysis's refusal (why) stands. So it does when the wider
// mode takes a lock another client holds (a force): every call, the plain
// ones too, would then be a force, and a lock script that overwrites others
// when handed a magic value is the trap the hostile corpus keeps refused.
func (a *analysis) analyzeInMode(why error) (*Semantics, error) {
	m := &analysis{opt: a.opt, b: a.b, v: a.v, consts: a.consts, modes: map[Arg]string{a.grants.arg: a.grants.val}}
	sem, err := m.analyzeAll()
	if err != nil || sem.Force {
		return nil, why
	}
	sem.Probes += a.runs
	return sem, nil
}
