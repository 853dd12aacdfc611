package proxy

import "container/heap"

// blockTimes orders the blocked clients that have a timeout by deadline,
// so that each firing of the front's alarm answers the due ones without
// looking at the others: a scan of every blocker per firing, with
// thousands of clients blocked on many lists each and their timeouts
// spread out, kept the event loop (and so the masters' replies) waiting
// long enough for unrelated lock requests to miss node_timeout (found by
// review). A blocker leaves it when answered (unblock), not lazily, so
// that clients served long before their timeout hold no memory here.
type blockTimes []*blocker

func (h blockTimes) Len() int           { return len(h) }
func (h blockTimes) Less(i, j int) bool { return h[i].deadline < h[j].deadline }
func (h blockTimes) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].hidx, h[j].hidx = i+1, j+1
}
func (h *blockTimes) Push(x any) {
	b := x.(*blocker)
	b.hidx = len(*h) + 1
	*h = append(*h, b)
}
func (h *blockTimes) Pop() any {
	old := *h
	b := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	b.hidx = 0
	return b
}

// add puts b in, unless it has no timeout or is in already.
func (h *blockTimes) add(b *blocker) {
	if b.deadline != 0 && b.hidx == 0 {
		heap.Push(h, b)
	}
}

// remove takes b out, if it is in.
func (h *blockTimes) remove(b *blocker) {
	if b.hidx != 0 {
		heap.Remove(h, b.hidx-1)
	}
}

// due takes out and returns the first blocker whose deadline is at or
// before now, or nil and the next deadline (evloop.Never: none).
func (h *blockTimes) due(now int64, never int64) (*blocker, int64) {
	if len(*h) == 0 {
		return nil, never
	}
	if b := (*h)[0]; b.deadline > now {
		return nil, b.deadline
	}
	return heap.Pop(h).(*blocker), 0
}
