package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// delayLink is a TCP forwarder to target that delays the bytes going
// towards target by d (order kept); replies come back at once. It models
// a lockproxy whose link to the masters is slow (another zone, a
// congested path): an ordinary network delay, below node_timeout.
type delayLink struct {
	ln   net.Listener
	addr string
	mu   sync.Mutex
	d    time.Duration
}

func newDelayLink(t *testing.T, target string, d time.Duration) *delayLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &delayLink{ln: ln, addr: ln.Addr().String(), d: d}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			go func() { io.Copy(c, s); c.Close() }()
			go l.delayed(c, s)
		}
	}()
	return l
}

func (l *delayLink) setDelay(d time.Duration) {
	l.mu.Lock()
	l.d = d
	l.mu.Unlock()
}

type chunk struct {
	at time.Time
	b  []byte
}

func (l *delayLink) delayed(c, s net.Conn) {
	ch := make(chan chunk, 4096)
	go func() {
		for k := range ch {
			if w := time.Until(k.at); w > 0 {
				time.Sleep(w)
			}
			if _, err := s.Write(k.b); err != nil {
				break
			}
		}
		s.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			l.mu.Lock()
			d := l.d
			l.mu.Unlock()
			ch <- chunk{time.Now().Add(d), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			close(ch)
			return
		}
	}
}

// shortenPair starts P2 (direct links) and P1, whose writes to the i-th
// master are delayed by delays[i] (the last one for the masters after
// it), in front of the same 3 masters.
func shortenPair(t *testing.T, delays ...time.Duration) (p1, p2 *cluster, masters []*redisproc.Server) {
	p1, p2, masters, _ = delayedPair(t, delays...)
	return p1, p2, masters
}

// delayedPair is shortenPair that also returns P1's links, whose delays
// a test may change.
func delayedPair(t *testing.T, delays ...time.Duration) (p1, p2 *cluster, masters []*redisproc.Server, links []*delayLink) {
	masters = redisproc.ForTest(t, 3)
	for i, m := range masters {
		links = append(links, newDelayLink(t, m.Addr, delays[min(i, len(delays)-1)]))
	}
	p2 = startFront(t, masters, false)
	p2.waitUp(3)
	p2.waitVoting(3)
	p1 = startFront(t, masters, false, func(_ *proxy.Config, qc *quorum.Config) {
		qc.Masters = nil
		for _, l := range links {
			qc.Masters = append(qc.Masters, l.addr)
		}
	})
	p1.waitUp(3)
	p1.waitVoting(3)
	return p1, p2, masters, links
}

// pexpiretimes reads key's PEXPIRETIME on each master.
func pexpiretimes(masters []*redisproc.Server, key string) []string {
	var out []string
	for _, m := range masters {
		v, _ := m.Do("PEXPIRETIME", key)
		out = append(out, v)
	}
	return out
}

// TestShortenNeverCutsALaterRenewal: A holds k (fresh token) and renews
// it twice, through two proxies sharing the masters (a load balancer in
// front of lockproxies): first to 1.5s through P1, whose link to the
// masters delays its writes by 100ms (well under node_timeout), then to
// 30s through P2. Both are granted. P1's shorter TTL (shortenScript),
// sent after its grant, reaches the masters after P2's renewal: it must
// not touch the copies P2's renewal moved. It lowered them to ~1.4s
// everywhere and B was granted k inside A's 30s (review, helper-57).
func TestShortenNeverCutsALaterRenewal(t *testing.T) {
	for _, v := range []string{"setxx", "pexpire", "redisson-renew", "redsync-touch"} {
		t.Run(v, func(t *testing.T) { shortenRace(t, v) })
	}
}

func shortenRace(t *testing.T, v string) {
	p1, p2, _ := shortenPair(t, 100*time.Millisecond)

	ctx := context.Background()
	a1, a2, b := p1.client(), p2.client(), p2.client()
	try := corpusScript(t, "redisson-4.x_tryLockInner")
	renew := corpusScript(t, "redisson-3.40_renewExpiration")
	touch := corpusScript(t, "redsync-v4.18_touch")
	var err error
	if v == "redisson-renew" {
		_, err = try.Run(ctx, a2, []string{"k"}, 10000, "A:1").Result()
		if errors.Is(err, redis.Nil) {
			err = nil
		}
	} else {
		_, err = a2.SetNX(ctx, "k", "tokA", 10*time.Second).Result()
	}
	if err != nil {
		t.Fatalf("A acquire: %v", err)
	}
	extend := func(cl *redis.Client, ttl time.Duration) string {
		var r any
		var err error
		switch v {
		case "setxx":
			r, err = cl.SetXX(ctx, "k", "tokA", ttl).Result()
		case "pexpire":
			r, err = cl.PExpire(ctx, "k", ttl).Result()
		case "redisson-renew":
			r, err = renew.Run(ctx, cl, []string{"k"}, ttl.Milliseconds(), "A:1").Result()
		case "redsync-touch":
			r, err = touch.Run(ctx, cl, []string{"k"}, "tokA", ttl.Milliseconds()).Result()
		}
		return fmt.Sprint(r, " ", err)
	}
	// A renews to 1.5s through P1 (slow link), then at once to 30s through P2.
	r1 := extend(a1, 1500*time.Millisecond)
	tA := time.Now()
	r2 := extend(a2, 30*time.Second)
	if !strings.HasPrefix(r1, "1 ") && !strings.HasPrefix(r1, "true ") || !strings.HasPrefix(r2, "1 ") && !strings.HasPrefix(r2, "true ") {
		t.Fatalf("renewals not granted: via P1 %q, via P2 %q", r1, r2)
	}
	untilA := tA.Add(30*time.Second - quorum.Drift(30*time.Second, 0.01))
	t.Logf("A renewed to 1.5s via P1 (%s), then to 30s via P2 (%s); PTTLs on masters right after: %v", r1, r2, p2.pttls("k"))
	time.Sleep(300 * time.Millisecond)
	t.Logf("300ms later, PTTLs on masters: %v (A believes it holds k for %v more)", p2.pttls("k"), time.Until(untilA).Round(time.Millisecond))
	time.Sleep(1500 * time.Millisecond)
	ok, err := b.SetNX(ctx, "k", "tokB", 10*time.Second).Result()
	t.Logf("B SET NX: %v %v; PTTLs %v", ok, err, p2.pttls("k"))
	if ok && time.Now().Before(untilA) {
		t.Errorf("DOUBLE GRANT: B granted k %v before the end of A's validity (A's last renewal, 30s via P2, was granted)", time.Until(untilA).Round(time.Millisecond))
	}
}
