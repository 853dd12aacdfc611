package quorum

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// enterKey and leaveKey are enter and leave for requests built in tests,
// which did not go through Submit to get their key's hash.
func (t *keyTable) enterKey(r *Request) bool {
	r.kh = t.hash(r.Key)
	return t.enter(r) == entered
}

func (t *keyTable) leaveKey(key string) *Request { return t.leave(t.hash(key), key) }

// TestKeyTableMatchesModel drives the table with random enters and leaves
// over many keys, so that shards grow, shrink and wrap their probe runs,
// and checks every answer against a map of FIFOs. With hashes forced into
// a few values, every key collides with others: the table must tell them
// apart by their bytes and keep the probe runs intact when entries leave.
func TestKeyTableMatchesModel(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			var kt keyTable
			kt.init()
			hash := kt.hash
			if collide {
				// Three hash values: one shard, each key probing from one
				// of three homes.
				hash = func(key string) uint64 { return uint64(len(key)%3) * keyShards * 5 }
			}
			model := map[string][]*Request{} // busy keys: running first, then waiting
			rnd := rand.New(rand.NewPCG(1, 2))
			var busy []string
			for step := range 200000 {
				// Grow to many busy keys, then drain, twice: shards must
				// resize both ways.
				phase := step / 50000
				nkeys := 3000
				if collide {
					nkeys = 300
				}
				enter := (phase%2 == 0 && rnd.IntN(3) != 0) || (phase%2 == 1 && rnd.IntN(3) == 0) || len(busy) == 0
				if enter {
					key := fmt.Sprintf("k%d", rnd.IntN(nkeys))
					r := &Request{Key: key, kh: hash(key), exclusive: true}
					q, isBusy := model[key]
					if got := kt.enter(r) == entered; got == isBusy {
						t.Fatalf("step %d: enter(%q) = %v, key busy: %v", step, key, got, isBusy)
					}
					if !isBusy {
						busy = append(busy, key)
					}
					model[key] = append(q, r)
					continue
				}
				j := rnd.IntN(len(busy))
				key := busy[j]
				q := model[key]
				var want *Request
				if len(q) > 1 {
					want = q[1]
					model[key] = q[1:]
				} else {
					delete(model, key)
					busy[j] = busy[len(busy)-1]
					busy = busy[:len(busy)-1]
				}
				if got := kt.leave(hash(key), key); got != want {
					t.Fatalf("step %d: leave(%q) = %p, want %p", step, key, got, want)
				}
			}
			n := 0
			for i := range kt.shards {
				n += kt.shards[i].n
				if s := &kt.shards[i]; s.n*8 < len(s.slots) && len(s.slots) > minKeySlots {
					t.Errorf("shard %d keeps %d slots for %d keys", i, len(s.slots), s.n)
				}
			}
			if n != len(model) {
				t.Fatalf("table holds %d busy keys, model %d", n, len(model))
			}
		})
	}
}

// TestKeyTableForgetsLongKeys: a free entry keeps its key buffer for the
// next key only up to maxKeptKey, so long keys leave no memory behind.
func TestKeyTableForgetsLongKeys(t *testing.T) {
	var kt keyTable
	kt.init()
	long := string(make([]byte, 4096))
	long = "L" + long
	if !kt.enterKey(&Request{Key: long}) {
		t.Fatal("a free key must run")
	}
	kt.leaveKey(long)
	for i := range kt.shards {
		for _, b := range kt.shards[i].slots {
			if cap(b.key) > maxKeptKey {
				t.Fatalf("a free entry keeps a %d-byte buffer", cap(b.key))
			}
		}
	}
}

// TestSlotHashIsTheKeyTables: Submit hashes a keyed request's key once,
// and the late-undo slots use that hash (ofRequest). It must be the hash
// they compute for the same key from its bytes, or a later write would
// look in another slot than a failed attempt registered on.
func TestSlotHashIsTheKeyTables(t *testing.T) {
	e := fakeEngine(3)
	defer e.timers.close()
	r := e.Acquire([]byte("lock:shared"), []byte("tok"), time.Second, 0)
	e.Submit(NewWaiter(), r)
	if !r.khSet {
		t.Fatal("Submit must hash a keyed request's key")
	}
	key := r.slotKey()
	s1, h1 := e.slots.ofRequest(r, key)
	s2, h2 := e.slots.of(key)
	if s1 != s2 || h1 != h2 {
		t.Fatalf("slot from Submit's hash %x, from the key's bytes %x", h1, h2)
	}
}
