package quorum

import (
	"errors"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// keyTable serializes requests per key: at most one quorum attempt per key
// is in flight from this process, so same-key requests arriving together do
// not split the masters' votes among themselves and all fail.
//
// Every keyed request enters it and leaves it, so it is built for that:
// each request hashes its key once (Request.kh, at Submit), and the shards
// are open-addressed tables (linear probing, deletion by backward shift)
// whose entries keep their key buffers for the next key. A Go map hashed
// the key again on every access and kept a separate queue object per key.
type keyTable struct {
	seed   maphash.Seed
	shards [keyShards]keyShard
}

const (
	keyShards = 64
	// minKeySlots is a shard's smallest table; it never shrinks below.
	minKeySlots = 16
	// maxKeptKey bounds the key buffer a free entry keeps for reuse, so
	// that a burst of long keys leaves no memory behind.
	maxKeptKey = 128
)

type keyShard struct {
	mu    sync.Mutex // protects the fields below
	slots []busyKey  // len a power of two; at most 3/4 used
	n     int        // used entries
}

// busyKey is a key with a request in flight, and the queue of requests
// waiting for it (the running one is not in it). key is a copy the entry
// owns: the requests' Key strings alias their commands, which are recycled
// with them while the key may stay busy with the requests behind. An entry
// is free when key is empty (r.Key is never empty here).
//
// The queue has two parts. The front, head to pri, holds requests that
// went ahead of plain SET NX from other connections (releases, extends,
// reads, scripts); the back, after pri, holds the rest in arrival order.
// Both are FIFO, so a request joins either in O(1) (see enter).
type busyKey struct {
	h          uint64
	key        []byte
	head, tail *Request
	pri        *Request // the front's last request; nil: the front is empty
	queued     int32    // requests in the queue (bounded by maxKeyQueue)
	overtook   int32    // requests put in the front since the back's first became first
}

// The bounds on one key's queue. Requests on a key run one at a time, so
// every queued request that reaches the masters costs its key a round
// trip; a request of a connection that closed costs none (Engine.finish).
const (
	// maxKeyQueue is the most requests that may wait for one key; past
	// it a request is refused at once (KeyQueueFullError). Reads and
	// acquisitions are refused past half of it, so that releases,
	// extends and deletes still find room.
	maxKeyQueue = 4096
	// maxOvertake is how many requests may go ahead of the first request
	// of a key's back part (a SET NX waiting its turn), over the time it
	// is first: past it they queue behind it. A stream of reads, however
	// fast, delays a waiting SET NX by at most maxOvertake round trips.
	maxOvertake = 8
)

// entry is what keyTable.enter did with a request.
type entry uint8

const (
	entered   entry = iota // the key was free: the request runs now
	queued                 // it waits behind the key's running request
	queueFull              // the key's queue is full: the request is refused
)

func (t *keyTable) init() {
	t.seed = maphash.MakeSeed()
	for i := range t.shards {
		t.shards[i].slots = make([]busyKey, minKeySlots)
	}
}

// hash is the key's hash for enter and leave; Submit stores it in r.kh.
func (t *keyTable) hash(key string) uint64 { return maphash.String(t.seed, key) }

// find returns the index of key's entry, or of the free entry where it
// would go, and whether key is there. s.mu is held.
func (s *keyShard) find(h uint64, key string) (int, bool) {
	mask := len(s.slots) - 1
	for i := home(h, mask); ; i = (i + 1) & mask {
		b := &s.slots[i]
		if len(b.key) == 0 {
			return i, false
		}
		if b.h == h && string(b.key) == key {
			return i, true
		}
	}
}

// home is the slot a hash probes first: the bits below keyShards chose the
// shard.
func home(h uint64, mask int) int { return int(h/keyShards) & mask }

// enter marks the key busy for r (entered), or queues r behind the
// running request (queued), or refuses it when maxKeyQueue requests wait
// already (queueFull).
//
// A plain SET NX, which cannot succeed while another request on the key
// holds it, joins the back. Other requests (releases, extends, deletes,
// reads, scripts) join the front, ahead of the SET NX that other
// connections queued (concurrent requests, which the proxy may order as
// it likes): a holder's release must not wait behind a crowd of
// acquisitions that cannot succeed until it is done. Two exceptions join
// the back instead, so that nobody waits for ever and order is kept:
//   - maxOvertake requests went ahead of the back's first already;
//   - r's connection has a request of its own in some key's back (one
//     client's pipeline runs in the order it was sent; the back it waits
//     in may be this key's, and the table does not look which).
func (t *keyTable) enter(r *Request) entry {
	s := &t.shards[r.kh%keyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	i, busy := s.find(r.kh, r.Key)
	if !busy {
		if (s.n+1)*4 > len(s.slots)*3 {
			s.resize(len(s.slots) * 2)
			i, _ = s.find(r.kh, r.Key)
		}
		b := &s.slots[i]
		b.h = r.kh
		b.key = append(b.key[:0], r.Key...)
		s.n++
		return entered
	}
	b := &s.slots[i]
	// Only other connections' requests count: one client's pipeline of
	// reads on a key, bounded by its read-ahead, is answered in full, as
	// Redis would (review, helper-64). Reads and acquisitions take at
	// most half: a flood of reads must not refuse the holder's release.
	if others := b.queued - r.w.inQueues(); others >= maxKeyQueue || (others >= maxKeyQueue/2 && r.skippable()) {
		return queueFull
	}
	b.queued++
	r.w.queuedIn(1)
	backEmpty := b.tail == b.pri
	switch {
	case backEmpty && !r.exclusive:
		// Nothing to go ahead of: the end of the front.
		b.append(r)
		b.pri = r
	case r.exclusive || b.overtook >= maxOvertake || r.w.inBack() > 0:
		b.append(r)
		r.w.backed(1)
	default:
		if b.pri == nil {
			r.next = b.head
			b.head = r
		} else {
			r.next = b.pri.next
			b.pri.next = r
		}
		b.pri = r
		b.overtook++
	}
	return queued
}

// append puts r at the end of b's queue.
func (b *busyKey) append(r *Request) {
	if b.tail == nil {
		b.head = r
	} else {
		b.tail.next = r
	}
	b.tail = r
}

// leave is called when the running request on key (whose hash is h) is
// decided: it returns the next one (which now runs), or nil and marks the
// key free.
func (t *keyTable) leave(h uint64, key string) *Request {
	s := &t.shards[h%keyShards]
	s.mu.Lock()
	defer s.mu.Unlock()
	i, busy := s.find(h, key)
	if !busy {
		return nil
	}
	b := &s.slots[i]
	r := b.head
	if r == nil {
		s.remove(i)
		return nil
	}
	b.head = r.next
	if b.head == nil {
		b.tail = nil
	}
	if r == b.pri {
		b.pri = nil // the front is empty
	} else if b.pri == nil {
		// r was the back's first: the next one gets its own
		// maxOvertake.
		r.w.backed(-1)
		b.overtook = 0
	}
	b.queued--
	r.w.queuedIn(-1)
	r.next = nil
	return r
}

// remove frees entry i. Linear probing needs no tombstones: each entry
// after i in its run that may move back to i (its home is not between i
// and it) does, and the hole moves on to where it was. The freed entry's
// key buffer goes with the hole, for the next key.
func (s *keyShard) remove(i int) {
	mask := len(s.slots) - 1
	for j := (i + 1) & mask; len(s.slots[j].key) != 0; j = (j + 1) & mask {
		if !cyclicBetween(i, home(s.slots[j].h, mask), j) {
			s.slots[i], s.slots[j] = s.slots[j], s.slots[i]
			i = j
		}
	}
	b := &s.slots[i]
	b.h, b.head, b.tail, b.pri, b.queued, b.overtook = 0, nil, nil, nil, 0, 0
	b.key = b.key[:0]
	if cap(b.key) > maxKeptKey {
		b.key = nil
	}
	s.n--
	if len(s.slots) > minKeySlots && s.n*8 < len(s.slots) {
		// After a burst of busy keys, give the memory back.
		s.resize(len(s.slots) / 2)
	}
}

// cyclicBetween reports whether k lies in the cyclic interval (i, j].
func cyclicBetween(i, k, j int) bool {
	if i <= j {
		return i < k && k <= j
	}
	return i < k || k <= j
}

// resize moves the used entries into a table of n slots (a power of two).
func (s *keyShard) resize(n int) {
	old := s.slots
	s.slots = make([]busyKey, n)
	mask := n - 1
	for _, b := range old {
		if len(b.key) == 0 {
			continue
		}
		i := home(b.h, mask)
		for len(s.slots[i].key) != 0 {
			i = (i + 1) & mask
		}
		s.slots[i] = b
	}
}

// KeyQueueFullError refuses a request on a key that maxKeyQueue requests
// wait for already: they run one at a time, each a round trip.
type KeyQueueFullError struct{ Max int }

func (e *KeyQueueFullError) Error() string {
	return fmt.Sprintf("ERR too many requests wait for this key in lockproxy (%d, fixed): requests on one key run one at a time; not sent, retry later", e.Max)
}

// QueuedPastValidityError is an acquisition or extension that was not
// sent: its validity (TTL minus the clock drift allowance) ran out while
// it waited behind other requests on its key. Whether the key is held is
// not known.
type QueuedPastValidityError struct{ Waited, TTL time.Duration }

func (e *QueuedPastValidityError) Error() string {
	return fmt.Sprintf("ERR not tried: this request waited %v in lockproxy behind other requests on the same key, past its validity (TTL %v minus the clock drift allowance); whether the key is held is not known: retry",
		e.Waited.Round(time.Millisecond), e.TTL)
}

// ErrClientGone decides a queued request whose client hung up (Abandon).
var ErrClientGone = errors.New("ERR not sent: the client's connection closed while the request waited behind its key")

// skippable reports whether not running r changes nothing but its own
// outcome: a read (a GET, PTTL, EXISTS, read script, a blocking pop's
// round, which pops nothing if not run), or an acquisition (as if it had
// lost). Releases, extends, deletes, counters and re-pushes run even for a
// client that hung up, as Redis runs the commands it has read.
func (r *Request) skippable() bool {
	switch r.kind {
	case Acquire:
		return true
	case Read:
		return r.agg != AggEach
	}
	return false
}
