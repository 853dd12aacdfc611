package batching

import (
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/evloop"
	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/internal/resp"
)

// recorder collects completions.
type recorder struct {
	mu   sync.Mutex
	got  []resp.Reply
	errs []error
	done chan struct{}
	want int
}

func newRecorder(want int) *recorder { return &recorder{done: make(chan struct{}), want: want} }

func (r *recorder) Complete(master int, rep resp.Reply, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rep)
	r.errs = append(r.errs, err)
	if len(r.got) == r.want {
		close(r.done)
	}
}

func (r *recorder) wait(t *testing.T) {
	t.Helper()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("only %d of %d completions", len(r.got), r.want)
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func waitConnected(t *testing.T, p *Pipeline) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if up, _ := p.Up(); up {
			return
		}
		if time.Now().After(deadline) {
			_, err := p.Up()
			t.Fatalf("not connected: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
}

// bothModes runs a test with a writer and reader goroutine per connection
// and with the connection on an event loop (Options.Loop): both are used,
// for TLS and plain TCP masters.
func bothModes(t *testing.T, test func(t *testing.T, with func(Options) Options)) {
	t.Run("goroutines", func(t *testing.T) { test(t, func(o Options) Options { return o }) })
	t.Run("loop", func(t *testing.T) {
		l, err := evloop.New(quiet())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(l.Close) // after the pipelines the test closes
		test(t, func(o Options) Options { o.Loop = l; return o })
	})
}

func TestPipelineOrderAndBatching(t *testing.T) { bothModes(t, testPipelineOrderAndBatching) }

func testPipelineOrderAndBatching(t *testing.T, with func(Options) Options) {
	m := redisproc.ForTest(t, 1)[0]
	var mu sync.Mutex
	batches := 0
	p := New(with(Options{Addr: m.Addr, Logger: quiet(), OnBatch: func(_, n int) { mu.Lock(); batches++; mu.Unlock() }}))
	defer p.Close()
	waitConnected(t, p)
	const n = 5000
	rec := newRecorder(n)
	// INCR from many goroutines: the replies must be 1..n in completion
	// order, because completions follow the order of the wire.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < n/8; i++ {
				if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "INCR", "ctr"), C: rec}); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	rec.wait(t)
	for i, r := range rec.got {
		if rec.errs[i] != nil || r.Int != int64(i+1) {
			t.Fatalf("completion %d: %v %v, want %d", i, r, rec.errs[i], i+1)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if batches >= n {
		t.Fatalf("%d writes for %d commands: no batching", batches, n)
	}
	t.Logf("%d commands in %d writes", n, batches)
}

func TestPipelinePausedMasterBoundedAndRecovers(t *testing.T) {
	bothModes(t, testPipelinePausedMasterBoundedAndRecovers)
}

func testPipelinePausedMasterBoundedAndRecovers(t *testing.T, with func(Options) Options) {
	m := redisproc.ForTest(t, 1)[0]
	p := New(with(Options{Addr: m.Addr, Logger: quiet(), QueueLimit: 100}))
	defer p.Close()
	waitConnected(t, p)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	// Expired ops are not written; the queue never grows past its limit.
	var full error
	for i := 0; i < 200000 && full == nil; i++ {
		full = p.Submit(Op{Cmd: resp.AppendCommandString(nil, "PING"), Deadline: Now() + int64(time.Millisecond)})
	}
	if !errors.Is(full, ErrQueueFull) {
		t.Logf("queue never filled (writes still absorbed by socket buffers): %v", full)
	}
	if q, _ := p.Depth(); q > 100 {
		t.Fatalf("queue depth %d over its limit 100", q)
	}
	if err := m.Resume(); err != nil {
		t.Fatal(err)
	}
	// Service resumes on the same connection.
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec := newRecorder(1)
		if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "PING"), C: rec}); err == nil {
			rec.wait(t)
			if rec.errs[0] == nil && rec.got[0].Type == resp.Status {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("no PONG after resume")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestPipelineKilledMasterFailsInflightAndRedials(t *testing.T) {
	bothModes(t, testPipelineKilledMasterFailsInflightAndRedials)
}

func testPipelineKilledMasterFailsInflightAndRedials(t *testing.T, with func(Options) Options) {
	m := redisproc.ForTest(t, 1)[0]
	p := New(with(Options{Addr: m.Addr, Logger: quiet()}))
	defer p.Close()
	waitConnected(t, p)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(10)
	for i := 0; i < 10; i++ {
		if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "PING"), C: rec}); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	rec.wait(t) // every waiter hears the error
	for i, err := range rec.errs {
		var me *MasterError
		if !errors.As(err, &me) || me.Addr != m.Addr {
			t.Fatalf("op %d: err %v, want a MasterError for %s", i, err, m.Addr)
		}
	}
	if err := p.Submit(Op{Cmd: resp.AppendCommandString(nil, "PING")}); err == nil {
		up, _ := p.Up()
		t.Fatalf("submit to a dead master accepted (up=%v)", up)
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	waitConnected(t, p)
}

func TestPipelineInitLoadsScripts(t *testing.T) { bothModes(t, testPipelineInitLoadsScripts) }

func testPipelineInitLoadsScripts(t *testing.T, with func(Options) Options) {
	m := redisproc.ForTest(t, 1)[0]
	body := `return 42`
	p := New(with(Options{Addr: m.Addr, Logger: quiet(), Init: [][]byte{resp.AppendCommandString(nil, "SCRIPT", "LOAD", body)}}))
	defer p.Close()
	waitConnected(t, p)
	rec := newRecorder(1)
	sha := fmt.Sprintf("%x", sha1Sum(body))
	p.Submit(Op{Cmd: resp.AppendCommandString(nil, "EVALSHA", sha, "0"), C: rec})
	rec.wait(t)
	if rec.got[0].Int != 42 {
		t.Fatalf("EVALSHA of an Init-loaded script: %v %v", rec.got[0], rec.errs[0])
	}
}

func sha1Sum(s string) [20]byte { return sha1.Sum([]byte(s)) }

func startForBench(b *testing.B) string { return redisproc.ForTest(b, 1)[0].Addr }

func waitConnectedB(b *testing.B, p *Pipeline) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for up, _ := p.Up(); !up; up, _ = p.Up() {
		if time.Now().After(deadline) {
			b.Fatal("not connected")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPipelineQueueBytesBounded: a paused master's queue of large
// commands is bounded in bytes as well as in count: a reviewer's DEL of
// seven 1 MiB keys, 150 times against a paused master, held 1.9 GB until
// the master was declared down. Past QueueBytes, Submit fails fast for
// large commands; a small one (a release, an undo) is still queued.
func TestPipelineQueueBytesBounded(t *testing.T) { bothModes(t, testPipelineQueueBytesBounded) }

func testPipelineQueueBytesBounded(t *testing.T, with func(Options) Options) {
	m := redisproc.ForTest(t, 1)[0]
	const limit = 4 << 20
	p := New(with(Options{Addr: m.Addr, Logger: quiet(), QueueBytes: limit}))
	defer p.Close()
	waitConnected(t, p)
	if err := m.Pause(); err != nil {
		t.Fatal(err)
	}
	defer m.Resume()
	big := resp.AppendCommand(nil, []byte("ECHO"), make([]byte, 1<<20))
	var full error
	for i := 0; i < 256 && full == nil; i++ {
		full = p.Submit(Op{Cmd: big})
		p.mu.Lock()
		q := p.qbytes
		p.mu.Unlock()
		if q > limit {
			t.Fatalf("after %d commands of 1 MiB, %d bytes queued: over the %d-byte limit", i+1, q, limit)
		}
	}
	if !errors.Is(full, ErrQueueFull) {
		t.Fatalf("256 MiB submitted to a paused master, never refused: %v", full)
	}
	// Fill up to the last few KiB with commands just over SmallCommand,
	// then a command of exactly SmallCommand bytes still goes in.
	medium := resp.AppendCommand(nil, []byte("ECHO"), make([]byte, SmallCommand))
	for i := 0; i < 4096; i++ {
		if p.Submit(Op{Cmd: medium}) != nil {
			break
		}
	}
	small := resp.AppendCommand(nil, []byte("ECHO"), make([]byte, SmallCommand-23))
	if len(small) != SmallCommand {
		t.Fatalf("small command of %d bytes, want %d", len(small), SmallCommand)
	}
	if err := p.Submit(Op{Cmd: small}); err != nil {
		t.Fatalf("a small command (a release, an undo) behind a full queue of large ones: %v", err)
	}
}
