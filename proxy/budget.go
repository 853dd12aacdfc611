package proxy

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// inputBudget bounds the memory that all client connections together hold
// in their input: commands not yet complete, commands read ahead of their
// turn, and (TLS clients) redcon's copy of the commands it parses. Each
// connection's limit (client_query_buffer_limit) times max_clients is far
// more than a machine has: 100 connections each sending an unfinished 8 MiB
// command grew lockproxy to 1 GB. Past the budget the connection holding
// the most is closed, with an error that names the key, whether it is the
// one asking for more or another: a small client is never refused while a
// big one holds the memory.
type inputBudget struct {
	limit   int64
	used    atomic.Int64 // bytes charged by every guard
	evicted atomic.Int64 // connections closed for the budget, for INFO

	mu     sync.Mutex              // protects guards and each guard's released
	guards map[*respGuard]struct{} // every guard that holds memory
}

func newInputBudget(limit int64) *inputBudget {
	return &inputBudget{limit: limit, guards: map[*respGuard]struct{}{}}
}

// charge adds delta bytes (negative: released) to what g holds. It returns
// false, charging nothing, when the budget is full and g holds the most
// (its growth is refused: the caller fails its stream with g.budgetError).
// When another connection holds the most, that one is evicted: marked, and
// interrupted so that it closes and releases its memory.
func (b *inputBudget) charge(g *respGuard, delta int64) bool {
	if b == nil || delta == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if g.released {
		return false // closed meanwhile (redcon closes connections from its own goroutine)
	}
	b.guards[g] = struct{}{}
	g.held.Add(delta)
	if b.used.Add(delta) <= b.limit || delta < 0 {
		return true
	}
	for {
		// What connections being evicted still hold is about to be
		// released: only the rest must fit.
		var leaving int64
		var victim *respGuard
		for o := range b.guards {
			if o.evicting.Load() {
				leaving += o.held.Load()
			} else if victim == nil || o.held.Load() > victim.held.Load() {
				victim = o
			}
		}
		if b.used.Load()-leaving <= b.limit || victim == nil {
			return true
		}
		if victim == g {
			g.held.Add(-delta)
			b.used.Add(-delta)
			b.evicted.Add(1)
			return false
		}
		victim.evicting.Store(true)
		b.evicted.Add(1)
		if victim.interrupt != nil {
			victim.interrupt() // does not block: a read deadline, or a post to the loop
		}
	}
}

// release gives back everything g holds: its connection is closed. Safe
// from any goroutine, more than once.
func (b *inputBudget) release(g *respGuard) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.guards, g)
	g.released = true
	b.used.Add(-g.held.Swap(0))
}

// budgetError is the reply of a connection closed for the budget.
func (b *inputBudget) budgetError(held int64) *ProtocolError {
	return &ProtocolError{budget: true, Msg: "closing the connection: the memory all clients hold in unfinished and read-ahead commands reached " +
		strconv.FormatInt(b.limit, 10) + " bytes (client_query_buffer_total in config.toml), and this connection holds the most (" +
		strconv.FormatInt(held, 10) + " bytes)"}
}
