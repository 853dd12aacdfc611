package resp

import (
	"strconv"
	"sync"
	"sync/atomic"
)

// Budget bounds the memory that all client connections together hold
// (client_query_buffer_total): in their input, commands not yet complete
// and commands read ahead of their turn, and besides it what their owners
// charge with Guard.Keep (replies not yet written, transaction queues).
// Each
// connection's limit (client_query_buffer_limit) times max_clients is far
// more than a machine has: 100 connections each sending an unfinished 8 MiB
// command grew lockproxy to 1 GB. Past the budget the connection holding
// the most is closed, with an error that names the key, whether it is the
// one asking for more or another: a small client is never refused while a
// big one holds the memory.
type Budget struct {
	limit   int64
	used    atomic.Int64 // bytes charged by every guard
	kept    atomic.Int64 // of which charged with Guard.Keep
	evicted atomic.Int64 // connections closed for the budget, for INFO

	mu     sync.Mutex          // protects guards and each guard's released
	guards map[*Guard]struct{} // every guard that holds memory
}

// NewBudget returns a budget of limit bytes.
func NewBudget(limit int64) *Budget {
	return &Budget{limit: limit, guards: map[*Guard]struct{}{}}
}

// Used is the memory all guards hold. A nil Budget holds nothing.
func (b *Budget) Used() int64 {
	if b == nil {
		return 0
	}
	return b.used.Load()
}

// Kept is the part of Used charged with Guard.Keep: what connections
// hold besides their input buffers.
func (b *Budget) Kept() int64 {
	if b == nil {
		return 0
	}
	return b.kept.Load()
}

// Limit is the budget's size in bytes.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Evicted is the number of connections closed for the budget.
func (b *Budget) Evicted() int64 {
	if b == nil {
		return 0
	}
	return b.evicted.Load()
}

// charge adds delta bytes (negative: released) to what g holds. It returns
// false, charging nothing, when the budget is full and g holds the most
// (its growth is refused: the caller fails its stream with Error).
// When another connection holds the most, that one is evicted: marked, and
// interrupted so that it closes and releases its memory.
func (b *Budget) charge(g *Guard, delta int64) bool { return b.chargeAs(g, delta, false) }

// chargeAs is charge; kept: delta is held besides the input buffer
// (Guard.Keep), counted in Kept too.
func (b *Budget) chargeAs(g *Guard, delta int64, kept bool) bool {
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
		if kept {
			g.kept += delta
			b.kept.Add(delta)
		}
		return true
	}
	for {
		// What connections being evicted still hold is about to be
		// released: only the rest must fit.
		var leaving int64
		var victim *Guard
		for o := range b.guards {
			if o.evicting.Load() {
				leaving += o.held.Load()
			} else if victim == nil || o.held.Load() > victim.held.Load() {
				victim = o
			}
		}
		if b.used.Load()-leaving <= b.limit || victim == nil {
			if kept {
				g.kept += delta
				b.kept.Add(delta)
			}
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
		if victim.Interrupt != nil {
			victim.Interrupt() // does not block: a read deadline, or a post to the loop
		}
	}
}

// Release gives back everything g holds: its connection is closed. Safe
// from any goroutine, more than once.
func (b *Budget) Release(g *Guard) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.guards, g)
	g.released = true
	b.used.Add(-g.held.Swap(0))
	b.kept.Add(-g.kept)
	g.kept = 0
}

// Error is the reply of a connection closed for the budget, which holds
// held bytes.
func (b *Budget) Error(held int64) *ProtocolError {
	return &ProtocolError{OverBudget: true, Msg: "closing the connection: the memory all clients hold in unfinished and read-ahead commands and in replies they have not read reached " +
		strconv.FormatInt(b.limit, 10) + " bytes (client_query_buffer_total in config.toml), and this connection holds the most (" +
		strconv.FormatInt(held, 10) + " bytes)"}
}
