package analyze

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestBudgetHeadroom holds the default budgets far above what the corpus
// and the variants need, so that a normal script is never refused for its
// cost, and logs what they take.
func TestBudgetHeadroom(t *testing.T) {
	files, _ := filepath.Glob("testdata/corpus/*.lua")
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	for _, v := range variants {
		bodies = append(bodies, []byte(v.body))
	}
	for _, v := range batchScripts {
		bodies = append(bodies, []byte(v.body))
	}
	opt := Options{}.withDefaults()
	var steps, run, bytes int64
	var runs int
	for _, body := range bodies {
		proto, err := compile(body, opt.MaxBodyBytes)
		if err != nil {
			t.Fatal(err)
		}
		b := testBudget(t, opt)
		v := newVM(proto, b)
		a := &analysis{opt: opt, b: b, v: v, consts: constants(proto)}
		a.analyzeAll()
		b.startRun()
		v.L.Close()
		steps, run, bytes, runs = max(steps, b.steps), max(run, b.maxRun), max(bytes, b.bytes), max(runs, a.runs)
	}
	t.Logf("most per analysis: %d steps, %d bytes, %d runs; most per run: %d steps", steps, bytes, runs, run)
	if steps > opt.MaxSteps/5 || run > opt.MaxRunSteps/20 || bytes > opt.MaxBytes/5 {
		t.Errorf("a normal script comes within 5x of a budget (steps %d of %d, run %d of %d, bytes %d of %d)",
			steps, opt.MaxSteps, run, opt.MaxRunSteps, bytes, opt.MaxBytes)
	}
}

// testBudget is a budget for tests that run the VM or the model directly.
func testBudget(t *testing.T, opt Options) *budget {
	b, release := newBudget(context.Background(), opt)
	t.Cleanup(release)
	return b
}
