package quorum

import (
	"fmt"
	"sync"
)

// bootstrapVote decides, once, whether the masters are a brand-new
// deployment: every master answered a peek and none has a marker.
type bootstrapVote struct {
	mu      sync.Mutex // protects the fields below
	decided bool
	use     bool
	seen    []int8 // per master: 0 not yet, 1 no marker, 2 marker
}

// vote records a peek during bootstrap and decides when it can.
func (m *monitor) vote(i int, marker bool) {
	b := &m.boot
	b.mu.Lock()
	if b.decided {
		b.mu.Unlock()
		return
	}
	b.seen[i] = 1
	if marker {
		b.seen[i] = 2
	}
	blank := 0
	for _, s := range b.seen {
		if s == 2 {
			b.decided = true
			break
		}
		if s == 1 {
			blank++
		}
	}
	if blank == len(b.seen) {
		b.decided, b.use = true, true
	}
	decided, use := b.decided, b.use
	b.mu.Unlock()
	if !decided {
		return
	}
	if use {
		m.e.cfg.Logger.Info("bootstrap: no master carries a lockproxy marker, so this is a new deployment; all masters are usable at once (bootstrap = true)")
	} else {
		m.e.cfg.Logger.Info("bootstrap not needed: some master carries a lockproxy marker; masters without one are quarantined for max_ttl",
			"master", m.e.cfg.Masters[i])
	}
	m.kickAll()
}

// bootstrapTimeout: some master did not answer in time.
func (m *monitor) bootstrapTimeout() {
	b := &m.boot
	b.mu.Lock()
	if b.decided {
		b.mu.Unlock()
		return
	}
	b.decided = true
	var silent []string
	for i, s := range b.seen {
		if s == 0 {
			silent = append(silent, m.e.cfg.Masters[i])
		}
	}
	b.mu.Unlock()
	m.e.cfg.Logger.Warn("bootstrap skipped: not every master answered, so lockproxy cannot tell a new deployment from masters that lost their data; masters without a marker are quarantined for max_ttl",
		"silent", fmt.Sprint(silent), "waited", bootstrapWait)
	m.kickAll()
}

func (b *bootstrapVote) result() (decided, use bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.decided, b.use
}

func (b *bootstrapVote) isDecided() bool {
	d, _ := b.result()
	return d
}
