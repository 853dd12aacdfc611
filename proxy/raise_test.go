package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// gate is a relay that can also hold the master's replies (a paused
// master: commands run, answers late), cut its connection when the
// client->master stream carries a pattern (a partition at that instant),
// and stop holding when it carries another.
type gate struct {
	ln      net.Listener
	target  string
	mu      sync.Mutex
	cut     bool
	hold    bool
	held    []heldChunk
	conns   []net.Conn
	cutOn   []byte
	relOn   []byte
	cutSeen int
	debug   func(string, ...any)
	onCut   func()
}

type heldChunk struct {
	c net.Conn
	b []byte
}

func newGate(t testing.TB, target string) *gate {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{ln: ln, target: target}
	go g.serve()
	t.Cleanup(func() { ln.Close(); g.setCut(true) })
	return g
}

func (g *gate) addr() string { return g.ln.Addr().String() }

func (g *gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		g.mu.Lock()
		if g.cut {
			g.mu.Unlock()
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", g.target)
		if err != nil {
			g.mu.Unlock()
			c.Close()
			continue
		}
		g.conns = append(g.conns, c, u)
		g.mu.Unlock()
		go func() { // client -> master
			buf := make([]byte, 64<<10)
			for {
				n, err := c.Read(buf)
				if n > 0 {
					b := buf[:n]
					g.mu.Lock()
					if g.cutOn != nil && bytes.Contains(b, g.cutOn) {
						g.cutOn = nil
						g.cutSeen++
						onCut := g.onCut
						g.mu.Unlock()
						if onCut != nil {
							go onCut()
						}
						c.Close()
						u.Close()
						return
					}
					release := g.relOn != nil && bytes.Contains(b, g.relOn)
					if g.debug != nil && g.hold {
						g.debug("c->m %q", b)
					}
					g.mu.Unlock()
					if _, err := u.Write(b); err != nil {
						break
					}
					if release {
						g.mu.Lock()
						g.relOn = nil
						g.flushLocked()
						g.mu.Unlock()
					}
				}
				if err != nil {
					break
				}
			}
			u.Close()
			c.Close()
		}()
		go func() { // master -> client
			buf := make([]byte, 64<<10)
			for {
				n, err := u.Read(buf)
				if n > 0 {
					g.mu.Lock()
					if g.hold {
						g.held = append(g.held, heldChunk{c, bytes.Clone(buf[:n])})
						g.mu.Unlock()
					} else {
						g.mu.Unlock()
						if _, err := c.Write(buf[:n]); err != nil {
							break
						}
					}
				}
				if err != nil {
					break
				}
			}
			u.Close()
			c.Close()
		}()
	}
}

func (g *gate) flushLocked() {
	g.hold = false
	for _, h := range g.held {
		h.c.Write(h.b)
	}
	g.held = nil
}

func (g *gate) setHold(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if on {
		g.hold = true
		return
	}
	g.flushLocked()
}

func (g *gate) setCut(cut bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.cut = cut
	if cut {
		for _, c := range g.conns {
			c.Close()
		}
		g.conns = nil
	}
}

// TestReentrantRaiseOnlyWhereRenewed: the raise round (contRaise) counted
// a 1 from a master that the re-entry's first round never reached, so its
// key's TTL was not refreshed: the grant's validity was counted from the
// re-entry, but that master's key expired at its older TTL (found by
// review; two holders in 5 of 5 runs before the raise skipped masters that
// did not say yes in the first round). Now the third lock is refused.
//
// A locks (1,1,1); re-enters with master 1 cut: (2,1,2). G later master 2
// pauses (its replies held, so lockproxy sees it stalled and does not send
// it the next acquisition). A re-enters: master 0 2->3, master 1 1->2,
// D = 2, only master 0 holds it: the raise to 3 goes to every master;
// master 1 is cut off as the raise reaches it, master 2 resumes and
// answers the raise 1 (2 -> 3, TTL untouched). Granted on masters 0 and 2.
// Master 2's key then expires (its TTL is from the second lock), A at
// depth 3 unlocks twice (still holding one level: on one Redis B is
// refused), which deletes the lock on master 1: B is granted.
func TestReentrantRaiseOnlyWhereRenewed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ops := newRedissonOps(t)
	const lease = 4000
	const tokA, tokB = "uuidA:1", "uuidB:1"
	raiseSHA := []byte(quorum.RaiseScriptSHA1())
	var gates []*gate
	c := startCluster(t, 3, func(_ *proxy.Config, qc *quorum.Config) {
		for i, a := range qc.Masters {
			g := newGate(t, a)
			gates = append(gates, g)
			qc.Masters[i] = g.addr()
		}
		qc.NodeTimeout = 200 * time.Millisecond
	})
	a, bc, other := c.client(), c.client(), c.client()
	counts := func() []string {
		out := make([]string, len(c.masters))
		for i, m := range c.masters {
			v, _ := m.Do("HGET", ops.name, tokA)
			p, _ := m.Do("PTTL", ops.name)
			out[i] = v + "/pttl " + p
		}
		return out
	}
	try := func(cl *redis.Client, tok string) string {
		t.Helper()
		_, err := ops.try.Run(ctx, cl, []string{ops.name}, lease, tok).Result()
		switch {
		case errors.Is(err, redis.Nil):
			return "granted"
		case err != nil:
			return "error: " + err.Error()
		}
		return "held"
	}
	if r := try(a, tokA); r != "granted" {
		t.Fatalf("A's lock: %s", r)
	}
	gates[1].setCut(true)
	waitFor(t, func() bool { return !c.engine.Masters()[1].Up }, "master 1 down")
	if r := try(a, tokA); r != "granted" {
		t.Fatalf("A's re-lock with master 1 away: %s", r)
	}
	gates[1].setCut(false)
	c.waitVoting(3)
	t.Logf("depth 2: counts %v", counts())
	time.Sleep(2000 * time.Millisecond)

	// Master 2 pauses: its replies are held, the unrelated SET NX stays
	// unanswered there, and after node_timeout it is stalled.
	gates[2].mu.Lock()
	gates[2].debug = t.Logf
	gates[2].mu.Unlock()
	gates[2].setHold(true)
	if err := other.SetNX(ctx, "unrelated", "x", time.Minute).Err(); err != nil {
		t.Logf("unrelated SET NX: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	gates[1].mu.Lock()
	gates[1].cutOn = raiseSHA
	gates[1].mu.Unlock()
	gates[1].mu.Lock()
	gates[1].onCut = func() { gates[2].setHold(false) } // master 2 resumes as master 1 is cut off
	gates[1].mu.Unlock()
	t0 := time.Now()
	r3 := try(a, tokA)
	t.Logf("A's third lock: %s in %v; counts %v (master 1 cut at the raise: %d)", r3, time.Since(t0), counts(), gates[1].cutSeen)
	gates[2].setHold(false)
	c.waitVoting(3)
	if r3 != "granted" {
		return // refused: master 2's stale copy could not complete it
	}
	// A holds depth 3 with validity until t0+lease. Wait for master 2's
	// key (never refreshed by this lock) to expire.
	waitFor(t, func() bool { e, _ := c.masters[2].Do("EXISTS", ops.name); return e == "0" }, "master 2's key expiring")
	t.Logf("master 2's key expired %v after A's grant (lease %dms); counts %v", time.Since(t0), lease, counts())
	for i := 0; i < 2; i++ {
		u, err := ops.unlockOnce(ctx, a, tokA)
		t.Logf("A's unlock %d (depth %d left): %s %v; counts %v", i+1, 2-i, u, err, counts())
	}
	rb := try(bc, tokB)
	left := time.Duration(lease)*time.Millisecond - time.Since(t0)
	t.Logf("B: %s with A still holding one level, %v of A's lease left", rb, left)
	if rb == "granted" && left > 0 {
		t.Errorf("two holders: B granted while A holds the lock at depth 1 with %v of validity left (one Redis: held)", left)
	}
}
