//go:build linux

package evloop

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

func newLoop(t *testing.T) *Loop {
	t.Helper()
	l, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

// onLoop runs f on l and waits for it.
func onLoop(t *testing.T, l *Loop, f func()) {
	t.Helper()
	done := make(chan struct{})
	if err := l.Post(func() { f(); close(done) }); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("posted function did not run within 5s")
	}
}

type countTask struct {
	Kicked
	runs atomic.Int64
	ran  chan struct{}
}

func (c *countTask) Run() {
	c.runs.Add(1)
	select {
	case c.ran <- struct{}{}:
	default:
	}
}

// A task kicked from another goroutine runs promptly even though the loop
// was asleep with no alarm (the eventfd wakes it).
func TestKickWakesASleepingLoop(t *testing.T) {
	l := newLoop(t)
	task := &countTask{ran: make(chan struct{}, 1)}
	for i := 0; i < 100; i++ {
		time.Sleep(100 * time.Microsecond) // let the loop block in epoll_wait
		l.Kick(task)
		select {
		case <-task.ran:
		case <-time.After(5 * time.Second):
			t.Fatalf("kick %d: the task did not run within 5s", i)
		}
	}
}

// Kicking a task that is already queued queues it once; a kick during its
// Run queues it again.
func TestKickQueuesOnce(t *testing.T) {
	l := newLoop(t)
	task := &countTask{ran: make(chan struct{}, 1)}
	onLoop(t, l, func() {
		for i := 0; i < 10; i++ {
			l.Kick(task)
		}
	})
	// Posted functions run before the tasks of their round, and the next
	// post may still join the kick's round (it did once in CI): two posts
	// later the task has surely run.
	onLoop(t, l, func() {})
	onLoop(t, l, func() {})
	if n := task.runs.Load(); n != 1 {
		t.Fatalf("10 kicks before it ran: %d runs, want 1", n)
	}
	again := &rekick{l: l}
	onLoop(t, l, func() { l.Kick(again) })
	// Posted functions run before the tasks of their round: two rounds
	// later both runs are done. Read runs on the loop, which owns it.
	onLoop(t, l, func() {})
	onLoop(t, l, func() {})
	runs := 0
	onLoop(t, l, func() { runs = again.runs })
	if runs != 2 {
		t.Fatalf("a task that kicks itself once in Run ran %d times, want 2", runs)
	}
}

type rekick struct {
	Kicked
	l    *Loop
	runs int
}

func (r *rekick) Run() {
	r.runs++
	if r.runs == 1 {
		r.l.Kick(r)
	}
}

// Concurrent producers: every kick is followed by a run that sees it.
func TestKickFromManyGoroutines(t *testing.T) {
	l := newLoop(t)
	var produced, seen atomic.Int64
	task := &sumTask{produced: &produced, seen: &seen}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				produced.Add(1)
				l.Kick(task)
			}
		}()
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for seen.Load() != 16000 {
		if time.Now().After(deadline) {
			t.Fatalf("the task saw %d of 16000 increments: a kick was lost", seen.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

type sumTask struct {
	Kicked
	produced, seen *atomic.Int64
}

func (s *sumTask) Run() { s.seen.Store(s.produced.Load()) }

type alarmTimer struct {
	fired chan int64
	again int64 // re-arm this far after firing, once
}

func (a *alarmTimer) Fire(now int64) int64 {
	a.fired <- now
	if a.again > 0 {
		next := now + a.again
		a.again = 0
		return next
	}
	return Never
}

func TestAlarmFiresAtItsDeadlineAndRearms(t *testing.T) {
	l := newLoop(t)
	tm := &alarmTimer{fired: make(chan int64, 4), again: int64(20 * time.Millisecond)}
	var at int64
	onLoop(t, l, func() {
		a := l.NewAlarm(tm)
		at = Now() + int64(30*time.Millisecond)
		a.At(at)
		a.At(at + int64(time.Hour)) // a later request does not delay it
	})
	first := <-tm.fired
	if first < at {
		t.Fatalf("fired %v before its deadline", time.Duration(at-first))
	}
	second := <-tm.fired
	if second < first+int64(20*time.Millisecond) {
		t.Fatalf("re-armed alarm fired %v after the first, want >= 20ms", time.Duration(second-first))
	}
	select {
	case <-tm.fired:
		t.Fatal("an alarm that returned Never fired again")
	case <-time.After(50 * time.Millisecond):
	}
}

// echo is a handler that writes back what it reads.
type echo struct {
	l    *Loop
	fd   int
	done chan error
}

func (e *echo) OnEvent(ev uint32) {
	buf := make([]byte, 4096)
	n, err := Read(e.fd, buf)
	switch {
	case err == syscall.EAGAIN:
		return
	case err != nil || n == 0:
		e.l.Remove(e.fd)
		syscall.Close(e.fd)
		e.done <- err
		return
	}
	if _, err := Write(e.fd, buf[:n]); err != nil {
		e.done <- err
	}
}

// Detach takes a TCP connection's socket for the loop: Read and Write work
// on it without the net package, and the end of the stream is seen.
func TestDetachedSocketEcho(t *testing.T) {
	l := newLoop(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := Detach(server.(*net.TCPConn))
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{l: l, fd: fd, done: make(chan error, 1)}
	onLoop(t, l, func() {
		if err := l.Add(fd, e, Readable); err != nil {
			t.Error(err)
		}
	})
	msg := bytes.Repeat([]byte("lockproxy "), 100)
	client.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := client.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("echo: %q", got)
	}
	client.Close()
	select {
	case err := <-e.done:
		if err != nil {
			t.Fatalf("end of stream: %v, want a 0-byte read", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the loop did not see the client close")
	}
}

// A panicking task is logged and the loop goes on.
func TestLoopSurvivesPanics(t *testing.T) {
	l := newLoop(t)
	if err := l.Post(func() { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	onLoop(t, l, func() {})
}

func TestPostAfterClose(t *testing.T) {
	l, err := New(nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	l.Close() // twice is fine
	if err := l.Post(func() {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Post after Close: %v, want ErrClosed", err)
	}
}

// TestCloseKeepsThreadsChildren: a child forked on the loop's thread, with
// Pdeathsig set as redisproc does, outlives Close. If the loop's goroutine
// exited locked to its thread, Go would end the thread and the kernel would
// kill the child (CI lost a test's redis-server that way).
func TestCloseKeepsThreadsChildren(t *testing.T) {
	l := newLoop(t)
	started := make(chan error, 1)
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	l.Post(func() { started <- cmd.Start() }) // forks on the loop's thread
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	l.Close()
	select {
	case err := <-exited:
		t.Fatalf("the child forked on the loop's thread died when the loop closed: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	cmd.Process.Kill()
	<-exited
}

// handlerFunc is a Handler.
type handlerFunc func(ev uint32)

func (h handlerFunc) OnEvent(ev uint32) { h(ev) }

// Later runs a function in the loop's next turn, after the events that
// turn sees: a ready descriptor is served between two runs of work that
// keeps deferring itself, and the loop does not sleep while such work
// waits.
func TestLaterLetsReadyDescriptorsGoFirst(t *testing.T) {
	l := newLoop(t)
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_NONBLOCK|syscall.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(p[0])
	defer syscall.Close(p[1])
	var order []string // loop only
	done := make(chan []string, 1)
	events := 0
	onLoop(t, l, func() {
		err := l.Add(p[0], handlerFunc(func(uint32) {
			var b [16]byte
			Read(p[0], b[:])
			order = append(order, "event")
			events++
		}), Readable)
		if err != nil {
			t.Error(err)
		}
	})
	var step func()
	step = func() {
		order = append(order, "later")
		if len(order) >= 6 {
			done <- order
			return
		}
		Write(p[1], []byte("x")) // ready in the next turn, before this runs again
		l.Later(step)
	}
	onLoop(t, l, func() {
		Write(p[1], []byte("x"))
		l.Later(step)
	})
	select {
	case got := <-done:
		want := []string{"event", "later", "event", "later", "event", "later"}
		if len(got) != len(want) {
			t.Fatalf("order %v, want %v", got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("order %v, want %v", got, want)
			}
		}
	case <-time.After(5 * time.Second):
		t.Fatal("deferred work did not run within 5s: the loop slept with it pending")
	}
}

// LimitUnsent bounds what the kernel takes from writes to a peer that does
// not read: about 4 MiB on Linux's defaults without it.
func TestLimitUnsent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	taken := func(limit int) int {
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close() // never read
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		fd, err := Detach(server.(*net.TCPConn))
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		if limit > 0 {
			if err := LimitUnsent(fd, limit); err != nil {
				t.Fatal(err)
			}
		}
		buf := make([]byte, 16<<10)
		total := 0
		for idle := time.Now(); time.Since(idle) < 200*time.Millisecond; {
			n, _ := Write(fd, buf)
			if n > 0 {
				total += n
				idle = time.Now()
			} else {
				time.Sleep(time.Millisecond) // the peer's kernel may take more as the window opens
			}
		}
		return total
	}
	without, with := taken(0), taken(128<<10)
	t.Logf("a peer that does not read took %d bytes, %d with LimitUnsent(128 KiB)", without, with)
	if with > 1<<20 {
		t.Fatalf("with LimitUnsent(128 KiB), a peer that does not read took %d bytes; want under 1 MiB", with)
	}
}
