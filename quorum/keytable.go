package quorum

import (
	"hash/maphash"
	"sync"
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

// busyKey is a key with a request in flight, and the FIFO of requests
// waiting for it (the running one is not in it). key is a copy the entry
// owns: the requests' Key strings alias their commands, which are recycled
// with them while the key may stay busy with the requests behind. An entry
// is free when key is empty (r.Key is never empty here).
type busyKey struct {
	h          uint64
	key        []byte
	head, tail *Request
}

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

// enter marks the key busy for r and returns true, or queues r behind the
// running request and returns false.
func (t *keyTable) enter(r *Request) bool {
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
		return true
	}
	b := &s.slots[i]
	if !r.exclusive {
		// Releases, extends, deletes and reads go ahead of the plain SET
		// NX that other connections queued (concurrent requests, which the
		// proxy may order as it likes): a holder's release must not wait
		// behind a crowd of acquisitions that cannot succeed until it is
		// done. Never ahead of anything its own connection sent earlier:
		// one client's pipeline runs in the order it was sent.
		var prev *Request
		for at := b.head; at != nil; at = at.next {
			if !at.exclusive || at.w == r.w {
				prev = at
			}
		}
		var at *Request
		if prev == nil {
			at = b.head
		} else {
			at = prev.next
		}
		r.next = at
		if prev == nil {
			b.head = r
		} else {
			prev.next = r
		}
		if at == nil {
			b.tail = r
		}
		return false
	}
	if b.tail == nil {
		b.head = r
	} else {
		b.tail.next = r
	}
	b.tail = r
	return false
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
	b.h, b.head, b.tail = 0, nil, nil
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
