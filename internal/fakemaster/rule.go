package fakemaster

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// Rule says how the master answers the commands it matches. The newest
// rule that matches a command and has uses left answers it, so a test
// states the usual answer first and lays exceptions over it (Once).
// Setters return the rule for chaining; change a rule before the commands
// it is meant for arrive.
type Rule struct {
	m     *Master
	match []string

	// Guarded by m.mu.
	reply resp.Reply
	after time.Duration
	held  bool
	gate  chan struct{} // closed by Release
	close bool
	uses  int // -1: unlimited
	used  int
}

// On adds a rule for the commands that start with args (the command name
// compared without case, the other arguments exactly). It answers +OK
// until told otherwise.
func (m *Master) On(args ...string) *Rule {
	if len(args) == 0 {
		panic("fakemaster: On needs a command name")
	}
	r := &Rule{m: m, match: args, reply: resp.ReplyOK, gate: make(chan struct{}), uses: -1}
	m.mu.Lock()
	m.rules = append(m.rules, r)
	m.mu.Unlock()
	return r
}

// Reply sets the reply.
func (r *Rule) Reply(rep resp.Reply) *Rule {
	return r.set(func() { r.reply = rep })
}

// Error sets an error reply, msg being its text after the '-'.
func (r *Rule) Error(msg string) *Rule { return r.Reply(errorReply(msg)) }

// After delays each reply by d; later replies on the connection wait
// behind it.
func (r *Rule) After(d time.Duration) *Rule {
	return r.set(func() { r.after = d })
}

// Hold keeps each reply back until Release, and every later reply on the
// connection behind it: a master that stopped answering (paused, or
// never, if the test never releases). The connection stays open.
func (r *Rule) Hold() *Rule {
	return r.set(func() { r.held = true })
}

// Release sends the replies Hold kept back, in order, and lets later ones
// through at once.
func (r *Rule) Release() {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	select {
	case <-r.gate:
	default:
		close(r.gate)
	}
}

// CloseConn closes the connection instead of replying: the client cannot
// tell whether the command ran.
func (r *Rule) CloseConn() *Rule {
	return r.set(func() { r.close = true })
}

// Times limits the rule to its next n matches; then older rules (or the
// master's own answers) apply again.
func (r *Rule) Times(n int) *Rule {
	return r.set(func() { r.uses = n })
}

// Once is Times(1).
func (r *Rule) Once() *Rule { return r.Times(1) }

// Used is how many commands the rule has answered (or decided to answer:
// a held reply counts from its arrival).
func (r *Rule) Used() int {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	return r.used
}

func (r *Rule) set(f func()) *Rule {
	r.m.mu.Lock()
	f()
	r.m.mu.Unlock()
	return r
}

// take answers cmd if the rule matches it and has uses left. m.mu is held.
func (r *Rule) take(cmd Command) (answer, bool) {
	if !cmd.Is(r.match...) || (r.uses >= 0 && r.used >= r.uses) {
		return answer{}, false
	}
	r.used++
	a := answer{reply: r.reply, after: r.after, close: r.close}
	if r.held {
		a.gate = r.gate
	}
	return a, true
}
