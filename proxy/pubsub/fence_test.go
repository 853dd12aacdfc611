package pubsub

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// holdRelay is a TCP relay to a master that can hold what the master
// sends (a slow link from master to hub), keeping its order.
type holdRelay struct {
	ln   net.Listener
	mu   sync.Mutex
	hold bool
	held [][]byte
	to   net.Conn // the hub's side of the one connection
}

func newHoldRelay(t testing.TB, target string) *holdRelay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &holdRelay{ln: ln}
	var conns []net.Conn
	var cmu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		cmu.Lock()
		for _, c := range conns {
			c.Close()
		}
		cmu.Unlock()
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			cmu.Lock()
			conns = append(conns, c, u)
			cmu.Unlock()
			go func() { // hub -> master
				buf := make([]byte, 16<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						u.Write(buf[:n])
					}
					if err != nil {
						u.Close()
						return
					}
				}
			}()
			go func() { // master -> hub
				buf := make([]byte, 16<<10)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						r.mu.Lock()
						if r.hold {
							r.held = append(r.held, append([]byte(nil), buf[:n]...))
							r.to = c
						} else {
							c.Write(buf[:n])
						}
						r.mu.Unlock()
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return r
}

func (r *holdRelay) addr() string { return r.ln.Addr().String() }

func (r *holdRelay) setHold(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hold = on
	if !on {
		for _, b := range r.held {
			r.to.Write(b)
		}
		r.held = nil
	}
}

// fenced waits until every PING the hub queued is answered: a copy
// published after that is published after every fence set so far.
func fenced(t testing.TB, h *Hub) {
	t.Helper()
	waitFor(t, "the hub's PINGs answered", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, m := range h.masters {
			if m.conn != nil && (m.pingQueued || m.pongs < m.pings) {
				return false
			}
		}
		return true
	})
}

// TestLateCopiesOfAnEarlyMessage: a message published on every master
// whose copies from two of three masters reach the hub after HoldBack
// (the link from those masters to the hub is slow; the hub under load
// was, in TestSubscribersShareUnreadMessages) is delivered on HoldBack and
// not again: those copies were published before the early delivery, and
// the hub tells them from a later publish by the PONG they come before.
// Take the PONG condition out of onOwedCopy to see the second delivery.
func TestLateCopiesOfAnEarlyMessage(t *testing.T) {
	masters := redisproc.ForTest(t, 3)
	r1, r2 := newHoldRelay(t, masters[1].Addr), newHoldRelay(t, masters[2].Addr)
	cfg := testConfig(t, masters)
	cfg.Masters = []string{masters[0].Addr, r1.addr(), r2.addr()}
	cfg.HoldBack = 200 * time.Millisecond
	h := startHub(t, cfg)
	rec := &recorder{}
	subscribe(t, h, rec, Channel, "ch", 3)
	fenced(t, h)

	r1.setHold(true)
	r2.setHold(true)
	onEvery(masters, func(m *redisproc.Server) { do(t, m, "PUBLISH", "ch", "0") })
	waitFor(t, "master 0's copy delivered on HoldBack", func() bool { return rec.len() == 1 })
	time.Sleep(100 * time.Millisecond) // the PINGs reach the masters, their PONGs are held
	dups := h.Stats().Duplicates
	r1.setHold(false)
	r2.setHold(false)
	waitFor(t, "the late copies read", func() bool { return h.Stats().Duplicates >= dups+2 })
	fenced(t, h)

	// The next publish on every master is a message of its own, once.
	onEvery(masters, func(m *redisproc.Server) { do(t, m, "PUBLISH", "ch", "0") })
	waitFor(t, "the next message", func() bool { return rec.len() >= 2 })
	time.Sleep(100 * time.Millisecond)
	if n, st := rec.len(), h.Stats(); n != 2 || st.HeldTimeouts != 1 || st.HeldRedelivered != 0 {
		t.Fatalf("%d deliveries, %d on HoldBack, %d again; want 2, 1 and 0", n, st.HeldTimeouts, st.HeldRedelivered)
	}
}
