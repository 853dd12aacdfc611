// Package evloop is lockproxy's I/O event loop: one goroutine, locked to an
// OS thread, that waits on an epoll set and runs every handler, deferred
// task and timer itself, as Redis and twemproxy do.
//
// Why not a goroutine per connection: on the 2 cores that lockproxy shares
// with the clients and the masters, CPU per request is the cost that
// matters, and Go's netpoller spends it where a proxy does not need to. A
// blocked conn.Read first fails with EAGAIN and parks (two reads per
// request), every reply wakes a parked goroutine through the scheduler, and
// sysmon periodically retakes Ps from threads in long loopback writes; on
// the plain redis-benchmark load that was most of lockproxy's CPU per
// request (figures: docs/bench/README.md). The loop reads a socket once
// per readiness event, writes with raw non-blocking system calls (no
// scheduler, no sysmon hand-off), and, because it reads every ready client
// before it writes to the masters, each master gets one write per round
// however many clients sent a command.
//
// Everything a handler, task or timer does runs on the loop's thread, one
// at a time: they share state without locks. Other goroutines hand work to
// the loop with Kick and Post, which wake it when it sleeps.
package evloop

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

var epoch = time.Now()

// Now is the monotonic clock in nanoseconds that alarms use.
func Now() int64 { return int64(time.Since(epoch)) }

// ErrUnsupported means this platform has no event loop (it needs epoll):
// callers fall back to a goroutine per connection.
var ErrUnsupported = errors.New("evloop: no event loop on this platform (Linux epoll only)")

// ErrClosed is returned by Add and Post once the loop is closed.
var ErrClosed = errors.New("evloop: loop closed")

// Handler receives the readiness events of one registered descriptor.
type Handler interface {
	// OnEvent runs on the loop with the epoll events (Readable, Writable,
	// Hangup, Error) of the descriptor.
	OnEvent(events uint32)
}

// Task is work that runs on the loop after the events of an iteration:
// flushing a queue, finishing a pipeline. Embed Kicked in the type.
type Task interface {
	Run()
	kicked() *Kicked
}

// Kicked makes a type a Task (with a Run method); it records that the task
// is queued, so kicking it many times before it runs queues it once.
type Kicked struct{ queued atomic.Bool }

func (k *Kicked) kicked() *Kicked { return k }

// Timer is a deadline handler: Fire runs on the loop once the monotonic
// clock (Now) reaches the time it last asked for, and returns the next time
// it wants to run (Never for none).
type Timer interface {
	Fire(now int64) (next int64)
}

// Never is the deadline of a timer with nothing to do.
const Never = int64(1<<63 - 1)

// shared is the part of a Loop other goroutines touch: tasks and posted
// functions, and whether the loop is asleep.
type shared struct {
	mu     sync.Mutex // protects tasks, posts, closed
	tasks  []Task
	posts  []func()
	closed bool
	// work is set when tasks or posts are queued; sleeping while the loop
	// is in (or about to enter) a blocking wait. A producer queues, then
	// reads sleeping; the loop sets sleeping, then reads work: with Go's
	// sequentially consistent atomics one of the two sees the other, so a
	// queued task never waits for an unrelated event.
	work     atomic.Bool
	sleeping atomic.Bool
}

// Kick queues t to run on the loop, once, after the current iteration's
// events (at once if the loop sleeps). Safe from any goroutine.
func (l *Loop) Kick(t Task) {
	if !t.kicked().queued.CompareAndSwap(false, true) {
		return // already queued; it will see whatever the caller changed
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.tasks = append(l.tasks, t)
	l.work.Store(true)
	if l.sleeping.Load() {
		l.wake() // under mu: Close closes the eventfd only after closed is set
	}
}

// Post runs f on the loop. Safe from any goroutine; ErrClosed once the loop
// is closed (f will not run).
func (l *Loop) Post(f func()) error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.posts = append(l.posts, f)
	l.work.Store(true)
	if l.sleeping.Load() {
		l.wake() // under mu, as in Kick
	}
	l.mu.Unlock()
	return nil
}

// Later runs f on the loop in its next iteration, after that iteration's
// events and the tasks they queued: work that must let every ready
// descriptor have its turn first (a client pipeline that used up its
// share of the loop goes on there). While any is pending the loop does
// not sleep. Loop only.
func (l *Loop) Later(f func()) { l.later = append(l.later, f) }

// runLater runs the functions that were pending when the iteration began.
func (l *Loop) runLater(ready []func(), q *queued) {
	for i, f := range ready {
		l.runPost(f)
		ready[i] = nil
	}
	l.runQueued(q)
}

// runQueued runs posted functions and kicked tasks until none is left;
// tasks may kick others (a master's flush decides a request, which kicks
// its client connection).
func (l *Loop) runQueued(q *queued) {
	for l.work.Load() {
		l.mu.Lock()
		l.work.Store(false)
		q.tasks, l.tasks = l.tasks, q.tasks[:0]
		q.posts, l.posts = l.posts, q.posts[:0]
		l.mu.Unlock()
		for i, f := range q.posts {
			l.runPost(f)
			q.posts[i] = nil
		}
		for i, t := range q.tasks {
			t.kicked().queued.Store(false) // before Run: a kick during Run queues it again
			l.runTask(t)
			q.tasks[i] = nil
		}
		q.posts, q.tasks = q.posts[:0], q.tasks[:0]
	}
}

// queued is the loop's spare memory for runQueued.
type queued struct {
	tasks []Task
	posts []func()
}

func (l *Loop) runTask(t Task) {
	defer l.survive()
	t.Run()
}

func (l *Loop) runPost(f func()) {
	defer l.survive()
	f()
}
