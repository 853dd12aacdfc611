package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestBigArgumentsFanOut measures the real binary, in front of 5 masters,
// while clients pipeline lock commands whose key is 1 MiB
// (proto_max_bulk_len), each sent to every master: the peak RSS of the
// proxy and of a master, the proxy's CPU, and the slowest SET NX of
// another client meanwhile (and how many it got NOQUORUM). Opt-in:
//
//	LOCKPROXY_HOSTILE=1 go test -run TestBigArgumentsFanOut -v ./cmd/lockproxy/
func TestBigArgumentsFanOut(t *testing.T) {
	bin := hostileBinary(t)
	conns := 20
	if v := getenvInt("LOCKPROXY_CONNS"); v != 0 {
		conns = max(v, 0) // -1: none, for the innocent client's baseline
	}
	const depth, seconds = 8, 8
	masters := redisproc.ForTest(t, 5)
	addr, pid := startBinaryOn(t, bin, masters)
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReaderSize(c, 1<<16)
	}
	cmd := respCommand
	other := startOtherClient(t, addr)
	cpu0 := cpuTime(t, pid)
	var sent atomic.Int64
	var aw sync.WaitGroup
	peakMaster := 0
	for g := range conns {
		aw.Add(1)
		go func() {
			defer aw.Done()
			c, r := dial()
			key := []byte(strings.Repeat("k", 1<<20))
			end := time.Now().Add(seconds * time.Second)
			for i := 0; time.Now().Before(end); i++ {
				var p bytes.Buffer
				for j := range depth {
					copy(key, fmt.Sprintf("%d-%d-%d-", g, i, j))
					p.Write(cmd("SET", string(key), "t", "NX", "PX", "200"))
				}
				if _, err := c.Write(p.Bytes()); err != nil {
					return
				}
				for range depth {
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					if _, err := r.ReadString('\n'); err != nil {
						return
					}
				}
				sent.Add(depth)
			}
		}()
	}
	for range seconds {
		time.Sleep(time.Second)
		if m, _ := rss(t, masters[0].Pid()); m > peakMaster {
			peakMaster = m
		}
	}
	aw.Wait()
	other.Stop()
	_, peak := rss(t, pid)
	t.Logf("%d connections pipelining %d SET NX of a 1 MiB key for %ds: %d sent; proxy peak RSS %d kB, CPU %.1fs; a master's peak RSS %d kB; %v",
		conns, depth, seconds, sent.Load(), peak, cpuTime(t, pid)-cpu0, peakMaster, other)
}
