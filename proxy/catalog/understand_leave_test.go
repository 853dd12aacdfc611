package catalog

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// TestAbandonedAnalysesFreeTheirSlots: analyses whose every client left
// (Leave: its connection closed) are stopped if running, not started if
// waiting, and free their slot at once, so that a new client's script is
// understood: 66 clients that sent a heavy distinct EVAL and hung up kept
// the 2 + 64 slots busy, and new scripts got "understanding too many new
// scripts at once" (review, helper-59). Make Leave a no-op to see it.
func TestAbandonedAnalysesFreeTheirSlots(t *testing.T) {
	u := NewUnderstander(time.Minute, 0.01)
	defer u.Close()
	var started, stopped atomic.Int32
	u.analyze = func(ctx context.Context, body []byte) (*analyze.Semantics, error) {
		if strings.HasPrefix(string(body), "heavy") {
			started.Add(1)
			<-ctx.Done() // as long as it is wanted
			stopped.Add(1)
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("refused quickly")
	}
	var jobs []*Analysis
	for i := range u.max {
		j, err := u.Start([]byte(fmt.Sprintf("heavy %d", i)), fmt.Sprintf("%040d", i), func() {})
		if err != nil {
			t.Fatalf("heavy script %d: %v", i, err)
		}
		jobs = append(jobs, j)
	}
	if _, err := u.Start([]byte("new"), fmt.Sprintf("%040d", 999), nil); err != errBusy {
		t.Fatalf("with every slot taken: %v, want busy", err)
	}
	// Another client joins the first analysis: it goes on while one waits.
	kept, err := u.Start([]byte("heavy 0"), fmt.Sprintf("%040d", 0), func() {})
	if err != nil || kept != jobs[0] {
		t.Fatalf("joining an analysis: %v", err)
	}
	// Their clients hung up: the waiting ones first, so that no slot a
	// cancelled analysis frees meanwhile starts one about to be left.
	for i := len(jobs) - 1; i >= 0; i-- {
		u.Leave(jobs[i])
	}
	j, err := u.Start([]byte("new"), fmt.Sprintf("%040d", 999), nil)
	if err != nil {
		t.Fatalf("a new script after the heavy ones' clients left: %v", err)
	}
	<-j.Done()
	for i, j := range jobs[1:] {
		<-j.Done()
		if _, _, known := u.Lookup(fmt.Sprintf("%040d", i+1)); known {
			t.Fatalf("a stopped analysis recorded a verdict for script %d", i+1)
		}
	}
	select {
	case <-jobs[0].Done():
		t.Fatal("an analysis a client still waits for was stopped")
	default:
	}
	if got := started.Load(); got > 3 {
		t.Errorf("%d abandoned analyses started; want at most the 2 running and the joined one", got)
	}
	u.Leave(kept)
	<-jobs[0].Done()
}
