package compat

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// TestWokenWaiterFindsLockReleased: a Redisson waiter woken by the unlock's
// message must find the lock released. On one Redis it always does: the
// unlock script deletes the lock and publishes in one step. Through
// lockproxy each master runs the unlock and publishes when it gets it. Here
// the holder's proxy reaches 3 of the 5 masters over a link that delays its
// commands by lag (under node_timeout, so the unlock succeeds). Were the
// first copy delivered, from a master that ran the unlock while the other 3
// still hold the lock, the waiter's tryLock would be refused with the
// lock's PTTL, the 3 late copies dropped as duplicates, and Redisson would
// sleep that PTTL (up to its 30s lease) on a lock free since lag after the
// unlock; Spring's waiter its whole wait. The hub delivers a message once a
// quorum of masters sent it (or node_timeout after the first copy), which
// this test needs: without it, it fails.
func TestWokenWaiterFindsLockReleased(t *testing.T) {
	t.Parallel()
	const lag = 100 * time.Millisecond // well under node_timeout (250ms), also on a busy machine
	t.Run("lockproxy", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		addrs := []string{e.masters[0].Addr, e.masters[1].Addr}
		for _, m := range e.masters[2:] {
			addrs = append(addrs, laggingRelay(t, m.Addr, lag))
		}
		a, stop, err := startProxyAt(addrs, proxy.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
		wokenWaiter(t, e, a, e.proxyFor(t, proxy.Config{}, nil), lag)
	})
	// The holder's link to the one Redis lags: its unlock, and so the
	// message, come late, and the waiter gets the lock.
	t.Run("plain", func(t *testing.T) {
		t.Parallel()
		p := ownRedis(t)
		wokenWaiter(t, p, laggingRelay(t, p.addr, lag), p.addr, lag)
	})
}

// wokenWaiter: the holder locks through a, the waiter through b, as
// Redisson does (3.23's unlock).
func wokenWaiter(t *testing.T, e *env, a, b string, lag time.Duration) {
	tryLock := corpusScript(t, "redisson-4.x_tryLockInner")
	unlock := corpusScript(t, "redisson-3.23_unlockInner")
	name := prefixOf(t) + "lock"
	channel := "redisson_lock__channel:{" + name + "}"
	holderID, waiterID := randomUUID()+":1", randomUUID()+":57"
	holder, waiter := dialRaw(t, a), dialRaw(t, b)
	if r := holder.eval(tryLock, []string{name}, "30000", holderID); r != "$-1\r\n" {
		t.Fatalf("holder's tryLock = %q, want nil (acquired)", r)
	}
	must(t, e.checkHeld(t, name, holderID))
	sub := subscriber(t, b, false, "SUBSCRIBE", channel)
	if r := waiter.eval(tryLock, []string{name}, "30000", waiterID); r == "$-1\r\n" {
		t.Fatal("waiter's tryLock of a held lock was granted")
	}

	// The holder's unlock, its reply read later: the waiter, another
	// process, acts on the message alone.
	start := time.Now()
	holder.send("EVAL", unlock, "2", name, channel, "0", "30000", holderID, "publish")
	sub.expect(wake, frame(false, "message", channel, "0"), "the waiter's subscriber")
	heard := time.Since(start)
	defer func() {
		if r, err := holder.read(5 * time.Second); r != ":1\r\n" {
			t.Errorf("holder's unlock = %q (%v), want 1", r, err)
		}
	}()
	// Redisson's loop: tryLock; when refused, wait for the next message
	// for at most the PTTL it was told (capped here), and try again.
	for {
		r := waiter.eval(tryLock, []string{name}, "30000", waiterID)
		if r == "$-1\r\n" {
			t.Logf("message %v after the unlock was sent; the waiter got the lock after %v", heard, time.Since(start))
			must(t, e.checkGranted(t, name, waiterID))
			if r := waiter.eval(unlock, []string{name, channel}, "0", "30000", waiterID, "publish"); r != ":1\r\n" {
				t.Fatalf("waiter's unlock = %q, want 1", r)
			}
			must(t, e.checkGone(t, name))
			return
		}
		if _, err := sub.read(2 * time.Second); err != nil {
			t.Fatalf("the woken waiter's tryLock was refused (%q: the old lock's PTTL) and no other message came in 2s (%v), "+
				"though the lock is on no master since %v after the unlock: %q; Redisson sleeps that PTTL",
				r, err, lag, e.values(t, name))
		}
	}
}

// laggingRelay forwards TCP connections to addr, delaying what the client
// sends by lag (replies come back at once), and returns its address.
func laggingRelay(t *testing.T, addr string, lag time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn // closed at cleanup; guarded by mu
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			m, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, m)
			mu.Unlock()
			type chunk struct {
				b  []byte
				at time.Time
			}
			q := make(chan chunk, 1024)
			wg.Go(func() { io.Copy(c, m); c.Close() })
			wg.Go(func() {
				defer close(q)
				for {
					buf := make([]byte, 64<<10)
					n, err := c.Read(buf)
					if n > 0 {
						q <- chunk{buf[:n], time.Now().Add(lag)}
					}
					if err != nil {
						return
					}
				}
			})
			wg.Go(func() {
				defer m.Close()
				for ch := range q {
					time.Sleep(time.Until(ch.at))
					if _, err := m.Write(ch.b); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}
