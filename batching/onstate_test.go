package batching

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
)

type chanCompleter chan resp.Reply

func (c chanCompleter) Complete(_ int, r resp.Reply, _ error) { c <- r }

// TestOnStateUpBeforeFirstReply: the quorum engine's OnState(up) is what
// puts a (re)connected master in its provisional quarantine, so that a
// master restarted without its data does not vote until its marker is
// read. On the event loop, setState makes Submit accept ops (p.up = true)
// before it calls OnState; an op submitted in between is written and its
// reply completed while OnState has not run yet, i.e. counted as a vote
// from a master nobody has checked.
func TestOnStateUpBeforeFirstReply(t *testing.T) {
	if !evloop.Supported {
		t.Skip("no event loop here")
	}
	m := redisproc.ForTest(t, 1)[0]
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	loop, err := evloop.New(logger)
	if err != nil {
		t.Fatal(err)
	}
	defer loop.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	first := true
	p := New(Options{Addr: m.Addr, Loop: loop, Logger: logger, OnState: func(_ int, up bool, _ error) {
		if up && first {
			first = false
			close(entered)
			<-release // the callback is slow, or its goroutine preempted
		}
	}})
	defer p.Close()
	defer close(release)
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("never connected")
	}
	c := make(chanCompleter, 1)
	if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "PING"), C: c}); err != nil {
		t.Logf("Submit refused while OnState(up) runs: %v (good)", err)
		return
	}
	select {
	case r := <-c:
		t.Fatalf("reply %v completed before OnState(up) returned: a vote from a master the engine has not put in its provisional quarantine", r)
	case <-time.After(500 * time.Millisecond):
	}
}
