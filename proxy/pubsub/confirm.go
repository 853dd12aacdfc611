package pubsub

// Subscribe answers at once, but a master sends a subscription's messages
// only once it has confirmed it. A client that subscribes, is told so, and
// then sees a lock released would miss the release's message if the
// masters had not confirmed yet. AwaitConfirmed lets the proxy hold the
// client's confirmation until enough masters confirmed: with a quorum of
// them, every release (which a quorum runs) publishes on one that will
// deliver.

// confirmWaiter is one AwaitConfirmed call not answered yet.
type confirmWaiter struct {
	n  int
	fn func()
}

// AwaitConfirmed calls fn once s's subscription (kind, name) is confirmed
// on n masters, or on every master connected now if fewer are, at once if
// it already is (and for names served locally: keyspace channels). fn
// runs with the hub's lock held, on the goroutine that saw the
// confirmation, or on this one: it must not block nor call the hub. cancel
// forgets fn (after a timeout of the caller's); it is safe to call after
// fn ran. Without such a subscription fn is not called.
func (h *Hub) AwaitConfirmed(kind Kind, name string, n int, fn func()) (cancel func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.recs[recKey{kind, name}]
	if r == nil {
		return func() {}
	}
	if r.local || h.confirmedEnough(r, n) {
		fn()
		return func() {}
	}
	w := &confirmWaiter{n: n, fn: fn}
	if r.waiters == nil {
		r.waiters = map[*confirmWaiter]struct{}{}
	}
	r.waiters[w] = struct{}{}
	return func() {
		h.mu.Lock()
		delete(r.waiters, w)
		h.mu.Unlock()
	}
}

// confirmedEnough: r is confirmed on n masters, or on every connected
// one (at least one). h.mu is held.
func (h *Hub) confirmedEnough(r *record, n int) bool {
	confirmed, up := 0, 0
	for i, m := range h.masters {
		if r.confirmed&(1<<i) != 0 {
			confirmed++
		}
		if m.conn != nil {
			up++
		}
	}
	return confirmed >= n || (confirmed > 0 && confirmed >= up)
}

// wakeConfirmed calls the waiters of r that are now confirmed. h.mu is
// held.
func (h *Hub) wakeConfirmed(r *record) {
	for w := range r.waiters {
		if h.confirmedEnough(r, w.n) {
			delete(r.waiters, w)
			w.fn()
		}
	}
}
