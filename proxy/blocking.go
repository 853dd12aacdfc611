package proxy

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/resp"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
)

// BLPOP and BRPOP on signal lists (python-redis-lock's release pushes one
// that its blocked acquirers wait on). A blocked client is parked on the
// event loop, never on a master: each attempt is one non-blocking pop
// round over the masters (quorum.Engine.Pop), made when the command
// arrives and again whenever any proxy announces a push to one of its keys
// (pubsub.EventPush, from a lock script that pushes, decided by a quorum).
// The connection's later commands wait, as on Redis; every other
// connection, on this loop too, goes on. The timeout is the loop's alarm.
// A wake-up is a hint: a round that finds every list empty (another waiter
// popped first) blocks again.

// blocker is one connection blocked in BLPOP or BRPOP. Loop only.
type blocker struct {
	lc       *clientConn
	keys     [][]byte
	right    bool
	deadline int64           // evloop.Now() by which it answers nil; 0: never
	w        *quorum.Waiter  // the rounds'
	round    *quorum.Request // the pop in flight, or nil
	again    bool            // a push came during the round: pop again after it
	// wakes are the pushed keys this blocker was woken for and has not
	// yet answered for (wakeOne); the first roundWakes of them came before
	// the round in flight started.
	wakes      []string
	roundWakes int
	reply      []byte // the answer, once done
	done       bool
	hidx       int // its place in the front's blockTimes, plus 1; 0: not in it
}

// cmdBlockingPop parses BLPOP/BRPOP key [key ...] timeout and blocks the
// connection until a pop round finds an element or the timeout passes.
func cmdBlockingPop(s *Server, c *client, args [][]byte) {
	if s.cfg.Hub == nil || c.conn == nil {
		c.errorf(errNoHub)
		return
	}
	timeout, msg := parseBlockTimeout(args[len(args)-1])
	if msg != "" {
		c.errorf("%s", msg)
		return
	}
	if n := len(args) - 2; n > maxBlockKeys {
		c.errorf("ERR %s through lockproxy waits on at most %d lists (got %d): each wake-up pops from every one on every master", strings.ToUpper(string(args[0])), maxBlockKeys, n)
		return
	}
	if len(c.slots) > 0 {
		// The replies (and events) of the commands before it go out
		// first, as on Redis: it runs first in a pipeline of its own.
		c.barrier = true
		return
	}
	lc := c.conn
	b := &blocker{lc: lc, right: args[0][1] == 'r' || args[0][1] == 'R'}
	for _, k := range args[1 : len(args)-1] {
		b.keys = append(b.keys, append([]byte(nil), k...))
	}
	if timeout > 0 {
		b.deadline = evloop.Now() + int64(timeout)
	}
	b.w = quorum.NewWaiterFunc(func() { lc.f.loop.Post(b.roundDone) })
	c.slots = append(c.slots, slot{kind: renderBlocked, blk: b})
	c.w.Hold() // the pipeline waits for the answer (finish)
	s.blockedN.Add(1)
	c.blocking = true
	lc.blk = b
	lc.f.block(b)
	b.pop()
}

// maxBlockKeys bounds the lists of one BLPOP: a pop round runs one LPOP
// per list on every master, for every waiter woken. Lock libraries wait
// on one.
const maxBlockKeys = 64

// parseBlockTimeout reads BLPOP's timeout in seconds, as Redis does (in
// whole milliseconds, rounded up: a tiny timeout is 1ms, not none). Redis
// 7.0 answers "timeout is negative" to inf and to any timeout whose
// milliseconds overflow a long long; one over lockproxy's clock range (a
// few centuries) waits as long as that, which is forever to a client.
func parseBlockTimeout(arg []byte) (time.Duration, string) {
	f, err := strconv.ParseFloat(string(arg), 64)
	if err != nil || math.IsNaN(f) {
		return 0, "ERR timeout is not a float or out of range"
	}
	ms := math.Ceil(f * 1000)
	if ms < 0 || ms >= math.MaxInt64 { // ceil(-0.0001s) is 0ms: forever, as on Redis
		return 0, "ERR timeout is negative"
	}
	if maxMS := float64(maxBlockTimeout / time.Millisecond); ms > maxMS {
		ms = maxMS
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// maxBlockTimeout is the longest BLPOP timeout kept as given.
const maxBlockTimeout = time.Duration(math.MaxInt64 / 4)

// pop starts a round, or marks that one is wanted after the running one.
func (b *blocker) pop() {
	if b.done {
		return
	}
	if b.round != nil {
		b.again = true
		return
	}
	b.roundWakes = len(b.wakes)
	b.lc.f.s.popRounds.Add(1)
	b.round = b.lc.f.s.cfg.Engine.Pop(b.keys, b.right, evloop.Now())
	b.lc.f.s.cfg.Engine.Submit(b.w, b.round)
}

// roundDone looks at a decided round (posted by its waiter).
func (b *blocker) roundDone() {
	r := b.round
	b.round = nil
	b.lc.f.s.popRounds.Add(-1)
	rep, err := r.Result()
	resp3 := b.lc.c.resp3
	var out []byte
	switch {
	case b.done:
		if err == nil && rep.Type == resp.Array && len(rep.Elems) == 2 {
			// Popped for a client that is gone: its element goes to
			// another waiter on the list here, or back on the masters.
			b.lc.f.handOff(b, rep, r.PoppedTTL())
		}
	case err != nil:
		out = resp.AppendError(nil, errorText(err))
	case rep.Type == resp.Array || rep.Type == resp.Error:
		out = resp.AppendReply(nil, rep, resp3)
	}
	more := r.PoppedMore()
	r.Release()
	popped := ""
	if err == nil && rep.Type == resp.Array && len(rep.Elems) == 2 {
		popped = string(rep.Elems[0].Str)
	}
	b.settleWakes(err != nil || rep.Type == resp.Error, popped, more)
	switch {
	case b.done:
	case out != nil:
		b.finish(out)
	case b.deadline != 0 && evloop.Now() >= b.deadline:
		b.finish(appendNullArray(nil, resp3))
	case b.again:
		b.again = false
		b.pop()
	case b.deadline != 0:
		b.lc.f.alarm.At(b.deadline) // block until a push or the timeout
	}
}

// expire answers nil once the timeout passed, unless a round is in flight
// (its element, if any, must reach the client: it was popped).
func (b *blocker) expire() {
	if b.round != nil {
		b.again = false
		return // roundDone answers
	}
	b.finish(appendNullArray(nil, b.lc.c.resp3))
}

// settleWakes accounts for the wake-ups of the round just ended, which
// popped an element of list popped ("": none), and found more of it on a
// master (more: quorum.Request.PoppedMore). A popped element answers a
// wake-up for its list that came before the round; the others came for
// elements still to be taken. A round that popped nothing without an
// error found the elements gone (taken through this proxy or another): its
// wake-ups are spent. A failed round took nothing, so its wake-ups pass on
// to another blocker, as do those a blocker that is done (answered, timed
// out, closed) can no longer use.
func (b *blocker) settleWakes(failed bool, popped string, more bool) {
	if len(b.wakes) == 0 {
		return
	}
	before, later := b.wakes[:b.roundWakes], b.wakes[b.roundWakes:]
	var pass []string
	switch {
	case failed:
		pass = append(pass, before...)
	case popped != "":
		answered := false
		for _, k := range before {
			if k == popped && !answered {
				answered = true
				continue
			}
			pass = append(pass, k)
		}
		if answered && more {
			// One event may stand for several elements (a script that
			// pushes two): the next waiter tries too, while a master
			// has more (review, helper-50). Not when none has: a master
			// slower than this round may get its copy of the element
			// just answered after it, and the next waiter would pop
			// that copy, a second client served for one push.
			pass = append(pass, popped)
		}
	}
	b.wakes, b.roundWakes = append([]string(nil), later...), 0
	if popped != "" || failed || b.done {
		pass, b.wakes = append(pass, b.wakes...), nil
	}
	for _, k := range pass {
		b.lc.f.wakeOne(k, b)
	}
}

// finish answers the BLPOP and lets the pipeline go on.
func (b *blocker) finish(reply []byte) {
	if b.done {
		return
	}
	b.done, b.reply = true, reply
	b.lc.f.s.blockedN.Add(-1)
	b.lc.f.unblock(b)
	if w := b.wakes; len(w) > 0 && b.round == nil {
		// Woken for elements it will not take now (its timeout came
		// first): another blocker takes them. With a round in flight,
		// roundDone passes them on.
		b.wakes = nil
		for _, k := range w {
			b.lc.f.wakeOne(k, b)
		}
	}
	if b.lc.blk == b {
		b.lc.blk = nil
	}
	b.lc.c.w.Unhold()
}

// appendNullArray is BLPOP's timeout: a null array in RESP2, null in RESP3.
func appendNullArray(b []byte, resp3 bool) []byte {
	if resp3 {
		return append(b, "_\r\n"...)
	}
	return append(b, "*-1\r\n"...)
}

// block parks b under each of its keys.
func (f *front) block(b *blocker) {
	for _, k := range b.keys {
		m := f.blocked[string(k)]
		if m == nil {
			m = map[*blocker]struct{}{}
			f.blocked[string(k)] = m
		}
		m[b] = struct{}{}
	}
	if b.deadline != 0 {
		f.btimes.add(b)
		f.alarm.At(b.deadline)
	}
}

func (f *front) unblock(b *blocker) {
	f.btimes.remove(b)
	for _, k := range b.keys {
		if m := f.blocked[string(k)]; m != nil {
			delete(m, b)
			if len(m) == 0 {
				delete(f.blocked, string(k))
			}
		}
	}
}

// handOff gives an element popped for from, which no longer waits, to
// another client blocked on its list on this front, as Redis would have
// served it. With none here it goes back on the masters (repush), so that
// a waiter on another proxy, or a later BLPOP, still finds it.
func (f *front) handOff(from *blocker, rep resp.Reply, ttl int64) {
	for b := range f.blocked[string(rep.Elems[0].Str)] {
		if b != from && !b.done {
			b.finish(resp.AppendReply(nil, rep, b.lc.c.resp3))
			return
		}
	}
	f.repush(rep.Elems[0].Str, rep.Elems[1].Str, from.right, ttl)
}

// repush puts an element popped for a client that hung up back on every
// master (quorum.Engine.Repush) and, once one master holds it again,
// announces the push, which wakes one waiter on the list on every proxy.
// Without it the element was lost: a python-redis-lock waiter on another
// proxy slept through the release that pushed it, to its timeout (forever
// with timeout 0).
func (f *front) repush(key, elem []byte, right bool, ttl int64) {
	eng := f.s.cfg.Engine
	k := string(key)
	r := eng.Repush([]byte(k), append([]byte(nil), elem...), right, ttl, evloop.Now())
	w := quorum.NewWaiterFunc(func() { f.loop.Post(func() { f.repushed(r, k) }) })
	eng.Submit(w, r)
}

// repushed announces a decided repush if a master took the element back.
func (f *front) repushed(r *quorum.Request, key string) {
	defer r.Release()
	for _, n := range r.Replies() {
		if n > 0 {
			f.s.repushes.Add(1)
			if err := f.s.cfg.Hub.Emit(pubsub.Event{Type: pubsub.EventPush, Key: key}); err != nil {
				f.s.cfg.Logger.Warn("lockproxy put back an element popped for a BLPOP client that hung up, but could not announce it; waiters on the list wake at its next push or their timeout",
					"key", key, "err", err)
			}
			return
		}
	}
	f.s.cfg.Logger.Warn("lockproxy could not put back on any master an element it popped for a BLPOP client that hung up; waiters on the list wake at its next push or their timeout. Check the masters' health (INFO lockproxy)",
		"key", key, "replies", r.Replies())
}

// onEvent wakes a blocker of a pushed key (pubsub.Hub.Listen: from the
// hub's goroutines, so it only posts to the loop).
func (f *front) onEvent(ev pubsub.Event) {
	if ev.Type != pubsub.EventPush {
		return
	}
	key := ev.Key
	f.loop.Post(func() { f.wakeOne(key, nil) })
}

// wakeOne wakes one blocker of key, not skip, for one pushed element: one
// pop round takes an element from every master, so waking every blocker
// made all but one run a round on every master for nothing (2,000 waiters:
// about 800 EVALSHAs per release). A blocker with no round in flight is
// preferred; the one woken answers for the wake-up (settleWakes). With no
// blocker left the wake-up is dropped: the element stays on the masters for
// the next BLPOP, as on Redis.
func (f *front) wakeOne(key string, skip *blocker) {
	var busy *blocker
	for b := range f.blocked[key] {
		switch {
		case b.done || b == skip:
		case b.round == nil:
			b.wakes = append(b.wakes, key)
			b.pop()
			return
		case busy == nil:
			busy = b
		}
	}
	if busy != nil {
		busy.wakes = append(busy.wakes, key)
		busy.pop() // after its round
	}
}

// expireBlocked answers the blockers whose timeout passed (from Fire) and
// returns the next timeout.
func (f *front) expireBlocked(now int64) int64 {
	for {
		b, next := f.btimes.due(now, evloop.Never)
		if b == nil {
			return next
		}
		b.expire() // with a round in flight, roundDone answers: its deadline passed
	}
}

// unblockAll answers every blocked client at shutdown.
func (f *front) unblockAll() {
	for _, m := range f.blocked {
		for b := range m {
			b.finish(resp.AppendError(nil, "ERR lockproxy is shutting down"))
		}
	}
}
