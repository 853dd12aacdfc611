package pubsub

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// Subscribers come and go on a few channels while messages flow and a
// master restarts: nothing races (-race), and once everyone left, the
// masters hold no subscription of the hub but its events channel.
func TestSubscriptionChurn(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	h := startHub(t, testConfig(t, masters))
	ready(t, h)
	stop := make(chan struct{})
	var pubs sync.WaitGroup
	pubs.Go(func() {
		pub := NewConnPublisher(addrs(masters), nil, "", "", 200*time.Millisecond)
		defer pub.Close()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			pub.Publish(fmt.Sprint("c", i%4), []byte(fmt.Sprint(i)))
		}
	})
	var subs sync.WaitGroup
	for g := range 6 {
		subs.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			mine := []*recorder{{}, {}}
			for range 300 {
				s := mine[rng.IntN(2)]
				kind := Kind(rng.IntN(3))
				name := fmt.Sprint("c", rng.IntN(4))
				if kind == Pattern {
					name = "c[0-" + fmt.Sprint(rng.IntN(4)) + "]"
				}
				switch rng.IntN(3) {
				case 0, 1:
					h.Subscribe(s, kind, name)
				default:
					h.Unsubscribe(s, kind, name)
				}
			}
			for _, s := range mine {
				h.Remove(s)
			}
		})
	}
	if err := masters[1].Kill(); err != nil {
		t.Fatal(err)
	}
	if err := masters[1].Restart(); err != nil {
		t.Fatal(err)
	}
	subs.Wait()
	close(stop)
	pubs.Wait()
	if st := h.Stats(); st.Channels != 0 || st.Subscriptions != 0 || st.DedupEntries != 0 {
		t.Fatalf("state left after every subscriber left: %+v", st)
	}
	waitFor(t, "the masters to hold only the events channel", func() bool {
		for _, m := range masters {
			if do(t, m, "PUBSUB", "NUMPAT") != "0" || do(t, m, "PUBSUB", "SHARDCHANNELS") != "" ||
				do(t, m, "PUBSUB", "CHANNELS") != "lockproxy:events" {
				return false
			}
		}
		return true
	})
}

func FuzzParseEvent(f *testing.F) {
	f.Add(appendEvent(nil, Event{Type: EventSet, Key: "k", TTL: time.Second, Origin: "o", Seq: 1}))
	f.Add([]byte("1 o 1 1 0 "))
	f.Add([]byte("1 o 18446744073709551615 4 9223372036854775807 k k"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, ok := parseEvent(b)
		if !ok {
			return
		}
		// What parses renders back the same, and an Emit-made event
		// always parses.
		if again, ok := parseEvent(appendEvent(nil, ev)); !ok || again != ev {
			t.Fatalf("%q: %+v, then %+v", b, ev, again)
		}
	})
}
