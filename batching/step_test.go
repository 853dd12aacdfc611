package batching

import (
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// stepSet is three pipelines on one loop, paced by step (nil: not paced),
// each to its own fake master.
func stepSet(t *testing.T, step *Step) ([]*fakemaster.Master, []*Pipeline) {
	t.Helper()
	if !evloop.Supported {
		t.Skip("no event loop on this platform")
	}
	l, err := evloop.New(quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	var ms []*fakemaster.Master
	var ps []*Pipeline
	for i := 0; i < 3; i++ {
		m := fakemaster.Start(t)
		p := New(Options{Addr: m.Addr(), Index: i, Loop: l, Step: step, Logger: quiet()})
		t.Cleanup(p.Close)
		waitConnected(t, p)
		ms, ps = append(ms, m), append(ps, p)
	}
	return ms, ps
}

func submitGet(t *testing.T, p *Pipeline, key string, c Completer) {
	t.Helper()
	if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "GET", key), C: c}); err != nil {
		t.Fatal(err)
	}
}

// TestStepWritesWithTheQuorum: with a quorum of 2 of 3, a master whose
// batch is answered writes its next one only once another master's is
// answered too; without a Step it writes at once (the control). A lone
// command, with nothing in flight, is written at once either way.
func TestStepWritesWithTheQuorum(t *testing.T) {
	for _, paced := range []bool{true, false} {
		name := map[bool]string{true: "step", false: "control"}[paced]
		t.Run(name, func(t *testing.T) {
			var step *Step
			if paced {
				step = NewStep(2, time.Hour)
			}
			ms, ps := stepSet(t, step)
			ms[0].On("GET").Reply(resp.ReplyNil)
			slow := ms[1].On("GET").Reply(resp.ReplyNil).Hold()
			ms[2].On("GET").Reply(resp.ReplyNil).Hold()

			first := newRecorder(1)
			for _, p := range ps {
				submitGet(t, p, "k1", first)
			}
			for _, m := range ms {
				m.WaitFor(t, "the first command on every master, at once", func(cs []fakemaster.Command) bool {
					return len(cs) == 1 && cs[0].Is("GET", "k1")
				})
			}
			first.wait(t) // master 0 answered; 1 and 2 hold theirs

			second := newRecorder(1)
			submitGet(t, ps[0], "k2", second)
			if !paced {
				ms[0].WaitFor(t, "the second command written at once", func(cs []fakemaster.Command) bool { return len(cs) == 2 })
				return
			}
			time.Sleep(100 * time.Millisecond)
			if n := len(ms[0].Received()); n != 1 {
				t.Fatalf("master 0 got %d commands while the other two had a batch in flight: want its second one held", n)
			}
			slow.Release() // master 1 answers: 2 of 3 idle
			ms[0].WaitFor(t, "the second command once a quorum is idle", func(cs []fakemaster.Command) bool {
				return len(cs) == 2 && cs[1].Is("GET", "k2")
			})
			second.wait(t)
		})
	}
}

// TestStepWaitsNoLongerThanItsWait: masters that stopped answering cannot
// hold the others back for longer than the Step's wait. Without that bound
// (a Step that waits an hour) the command stays queued: the control.
func TestStepWaitsNoLongerThanItsWait(t *testing.T) {
	for _, wait := range []time.Duration{20 * time.Millisecond, time.Hour} {
		t.Run(wait.String(), func(t *testing.T) {
			ms, ps := stepSet(t, NewStep(2, wait))
			ms[0].On("GET").Reply(resp.ReplyNil)
			ms[1].On("GET").Reply(resp.ReplyNil).Hold() // paused
			ms[2].On("GET").Reply(resp.ReplyNil).Hold() // paused
			first := newRecorder(1)
			for _, p := range ps {
				submitGet(t, p, "k1", first)
			}
			first.wait(t)
			start := time.Now()
			second := newRecorder(1)
			submitGet(t, ps[0], "k2", second)
			if wait == time.Hour {
				time.Sleep(200 * time.Millisecond)
				if n := len(ms[0].Received()); n != 1 {
					t.Fatalf("master 0 got %d commands: want the second one still held", n)
				}
				return
			}
			second.wait(t)
			if took := time.Since(start); took < wait || took > 2*time.Second {
				t.Fatalf("written after %v: want after the wait (%v), not much later", took, wait)
			}
			// Each batch after that waits again, and is written again.
			third := newRecorder(1)
			submitGet(t, ps[0], "k3", third)
			third.wait(t)
		})
	}
}
