package analyze

import (
	"context"
	"fmt"
	"time"
)

// Options bounds one analysis. A zero field takes the default named in its
// comment; the defaults are far above what any lock script of the corpus
// needs and low enough that a hostile script costs little.
type Options struct {
	// MaxBodyBytes is the largest script body analyzed (default 16 KiB).
	// Lock scripts are a few hundred bytes; the bound also bounds the
	// parser's and compiler's recursion.
	MaxBodyBytes int
	// MaxRunSteps bounds one probe run: VM instructions plus the work the
	// library functions and the model do, counted in instruction-sized
	// units (default 20,000; a run of a corpus script takes at most about
	// 120). It also bounds the tables and closures a run can create, one
	// per step at most.
	MaxRunSteps int64
	// MaxSteps bounds the whole analysis (default 1,500,000; the corpus
	// takes at most about 205,000, TestBudgetHeadroom holds it to a fifth).
	MaxSteps int64
	// MaxRunBytes bounds the bytes of strings a run builds (concatenation,
	// string.rep, string.format, table.concat, cjson, the model's replies…),
	// counted before they are allocated (default 256 KiB).
	MaxRunBytes int64
	// MaxBytes bounds the bytes of strings built over the whole analysis
	// (default 8 MiB): garbage included, so it also bounds the work.
	MaxBytes int64
	// MaxCPU bounds the CPU time the analysis's thread uses (default
	// 500ms, 4 times that under the race detector; on systems other than
	// Linux, wall time): work the step count
	// cannot see, such as a step that hashes a 100 KB string used as a
	// table key. It leaves the corpus's scripts a wide margin, under the
	// race detector too (docs/analyzer.md).
	MaxCPU time.Duration
	// Timeout is a wall-clock backstop (default 5s, scaled as MaxCPU), for an analysis that
	// waits rather than works; a normal analysis takes milliseconds.
	// Reaching it or MaxCPU are the refusals that depend on the machine's
	// speed.
	Timeout time.Duration
	// MaxKeys and MaxArgs bound the KEYS and ARGV indexes a script may read
	// (defaults 8 and 16).
	MaxKeys, MaxArgs int
}

func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 16 << 10
	}
	if o.MaxRunSteps <= 0 {
		o.MaxRunSteps = 20_000
	}
	if o.MaxSteps <= 0 {
		o.MaxSteps = 1_500_000
	}
	if o.MaxRunBytes <= 0 {
		o.MaxRunBytes = 256 << 10
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 8 << 20
	}
	if o.MaxCPU <= 0 {
		o.MaxCPU = 500 * time.Millisecond * raceFactor
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second * raceFactor
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 8
	}
	if o.MaxArgs <= 0 {
		o.MaxArgs = 16
	}
	return o
}

// budget counts an analysis's work. It is the context.Context of the Lua
// state: gopher-lua calls Done before every instruction, which is where
// instructions are counted, so the count needs no hook in the VM. Once the
// budget is spent or the analysis refused, Done returns a closed channel and
// every further instruction raises an error, which a script's pcall can catch
// but never get past: the refusal itself is kept here, outside Lua.
type budget struct {
	opt             Options
	ctx             context.Context // the caller's, checked with the deadline
	steps, runSteps int64
	bytes, runBytes int64
	deadline        time.Time
	cpu             cpuClock
	cpu0            time.Duration // the thread's CPU time at the start
	cpuOK           bool          // cpu0 was read
	refusal         *Refusal
	closed, open    chan struct{}
	sinceClockCheck int
	maxRun          int64 // the most steps a run took (per key of a batch run), for tests
	// runKeys: the current run is a batch run over this many keys, each
	// bounded as one run is (batch.go); 0 or 1 for any other run.
	runKeys int64
}

// newBudget starts an analysis's budget; its clock runs on the calling
// goroutine's thread, which release gives back.
func newBudget(ctx context.Context, opt Options) (b *budget, release func()) {
	b = &budget{opt: opt, ctx: ctx, closed: make(chan struct{}), deadline: time.Now().Add(opt.Timeout)}
	close(b.closed)
	b.cpu, release = startCPUClock()
	b.cpu0, b.cpuOK = b.cpu.now()
	return b, release
}

// startRun resets the per-run counters.
func (b *budget) startRun() {
	b.maxRun = max(b.maxRun, b.runSteps/max(b.runKeys, 1))
	b.runSteps, b.runBytes = 0, 0
}

// fail records the first refusal; later ones are consequences of it.
func (b *budget) fail(r *Refusal) {
	if b.refusal == nil {
		b.refusal = r
	}
}

// charge counts n steps of work and reports whether the budget still holds.
func (b *budget) charge(n int64) bool {
	if b.refusal != nil {
		return false
	}
	b.steps += n
	b.runSteps += n
	switch {
	case b.runSteps > b.opt.MaxRunSteps*max(b.runKeys, 1):
		b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("a probe run exceeded %d steps (endless loop?)", b.opt.MaxRunSteps)})
	case b.steps > b.opt.MaxSteps:
		b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("the analysis exceeded %d steps", b.opt.MaxSteps)})
	}
	return b.refusal == nil
}

// alloc counts n bytes about to be allocated and reports whether the budget
// still holds; the caller allocates only when it does.
func (b *budget) alloc(n int64) bool {
	if b.refusal != nil {
		return false
	}
	if n < 0 || n > b.opt.MaxRunBytes-b.runBytes {
		b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("a probe run built more than %d bytes of strings", b.opt.MaxRunBytes)})
		return false
	}
	b.bytes += n
	b.runBytes += n
	if b.bytes > b.opt.MaxBytes {
		b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("the analysis built more than %d bytes of strings", b.opt.MaxBytes)})
		return false
	}
	// Building bytes is work too: a loop of large copies costs time.
	return b.charge(n / 256)
}

// Deadline, Done, Err and Value make budget a context.Context.
func (b *budget) Deadline() (time.Time, bool) { return b.deadline, true }

func (b *budget) Done() <-chan struct{} {
	if !b.charge(1) {
		return b.closed
	}
	b.sinceClockCheck++
	if b.sinceClockCheck >= 1024 {
		b.sinceClockCheck = 0
		if time.Now().After(b.deadline) {
			b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("the analysis took longer than %v", b.opt.Timeout)})
			return b.closed
		}
		if t, ok := b.cpu.now(); ok && b.cpuOK && t-b.cpu0 > b.opt.MaxCPU {
			b.fail(&Refusal{Class: ClassBudget, Reason: fmt.Sprintf("the analysis used more than %v of CPU", b.opt.MaxCPU)})
			return b.closed
		}
		if err := b.ctx.Err(); err != nil {
			b.fail(&Refusal{Class: ClassBudget, Reason: "the analysis was cancelled: " + err.Error()})
			return b.closed
		}
	}
	return b.open // nil: never ready
}

func (b *budget) Err() error {
	if b.refusal != nil {
		return b.refusal
	}
	return nil
}

func (b *budget) Value(any) any { return nil }
