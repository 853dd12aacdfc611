package batching

import (
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
)

// Step paces the writes of the pipelines of one master set (a quorum's) on
// the event loop. Each pipeline keeps one batch in flight and writes the
// next when its replies are back; left alone, the masters drift apart, and
// their replies come back at as many different moments, each waking the
// loop for a part of every decision. With a Step, a pipeline whose replies
// are back writes its next batch only once a quorum of the set's pipelines
// have theirs back too (or at once, when at least that many are idle
// already): the masters that decide together are written together, their
// replies arrive together, and the loop wakes about once per round instead
// of once per master.
//
// It never delays a lone command: with nothing in flight every pipeline is
// idle and writes at once. It waits only behind batches in flight, and at
// most its wait (the engine gives a fifth of node_timeout): masters that
// stopped answering (paused) stay busy, and when they are too many for a
// quorum of idle ones the others still write, each batch after that wait,
// and their replies still count before the operation's deadline. Commands
// to each master keep their order; only the moment they are written
// changes.
//
// A Step belongs to one loop: every method runs on it (the pipelines'
// loopConns call it from their handlers and tasks).
type Step struct {
	quorum  int
	wait    time.Duration
	members int         // connections on the loop in the set
	idle    int         // members with no batch in flight
	held    []*loopConn // idle members waiting for the others
	alarm   *evloop.Alarm
}

// NewStep paces pipelines that decide by quorum (Options.Step): a
// pipeline writes when quorum of them are idle, or once it has waited
// wait (at least a millisecond, the resolution of the loop's alarms).
func NewStep(quorum int, wait time.Duration) *Step {
	return &Step{quorum: max(quorum, 1), wait: max(wait, time.Millisecond)}
}

// open reports whether enough members are idle for an idle one to write.
func (s *Step) open() bool { return s.idle >= min(s.quorum, s.members) }

func (s *Step) join() {
	s.members++
	s.idle++
}

// leave removes a member whose connection ended.
func (s *Step) leave(lc *loopConn) {
	s.members--
	if !lc.busy {
		s.idle--
	}
	lc.busy = false
	if lc.stepHeld {
		lc.stepHeld = false
		for i, h := range s.held {
			if h == lc {
				s.held = append(s.held[:i], s.held[i+1:]...)
				break
			}
		}
	}
	if s.open() {
		s.release()
	}
}

// hold makes lc wait for the others, no longer than s.wait.
func (s *Step) hold(lc *loopConn) {
	if lc.stepHeld {
		return
	}
	lc.stepHeld = true
	s.held = append(s.held, lc)
	if s.alarm == nil {
		s.alarm = lc.loop.NewAlarm(s)
	}
	s.alarm.At(evloop.Now() + int64(s.wait))
}

// wrote: lc has a batch in flight.
func (s *Step) wrote(lc *loopConn) {
	if !lc.busy {
		lc.busy = true
		s.idle--
	}
}

// answered: lc's batch is all answered.
func (s *Step) answered(lc *loopConn) {
	if lc.busy {
		lc.busy = false
		s.idle++
	}
	if s.open() {
		s.release()
	}
}

// release lets every waiting member write.
func (s *Step) release() {
	for i, lc := range s.held {
		lc.stepHeld = false
		lc.stepGo = true // writes when it runs, open or not (the wait is over)
		lc.loop.Kick(lc)
		s.held[i] = nil
	}
	s.held = s.held[:0]
}

// Fire (evloop.Timer): the waiting members waited long enough; they
// write. A member held after the alarm was set may wait less: waiting
// less only gives up some pacing.
func (s *Step) Fire(int64) int64 {
	s.release()
	return evloop.Never
}
