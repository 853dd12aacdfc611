package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestPatternsOnMasters measures the real binary, in front of 3 masters,
// while clients hold the most patterns lockproxy allows, each as costly to
// match as a 256-byte pattern can be, and one client publishes on long
// channels (4096 bytes; LOCKPROXY_CHANNEL sets it), 16 PUBLISH a write:
// the masters' and the proxy's CPU, and the slowest SET NX of
// another client meanwhile. Opt-in:
//
//	LOCKPROXY_HOSTILE=1 go test -run TestPatternsOnMasters -v ./cmd/lockproxy/
func TestPatternsOnMasters(t *testing.T) {
	bin := hostileBinary(t)
	const seconds = 6
	masters := redisproc.ForTest(t, 3)
	addr, pid := startBinaryOn(t, bin, masters)
	cmd := respCommand
	dial := func() net.Conn { return dialProxy(t, addr) }
	patterns := getenvInt("LOCKPROXY_PATTERNS")
	if patterns == 0 {
		patterns = 1000
	}
	for k := 0; k < patterns/100; k++ {
		c := dial()
		var p bytes.Buffer
		for j := range 100 {
			// *a*a*…*a<k>-<j>: every '*' may stop at each 'a' of the channel.
			tail := fmt.Sprintf("%d-%d", k, j)
			p.Write(cmd("PSUBSCRIBE", strings.Repeat("*a", (256-len(tail))/2)+tail))
		}
		c.Write(p.Bytes())
		go io.Copy(io.Discard, c)
	}
	time.Sleep(time.Second)
	other := startOtherClient(t, addr)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	published, refused := 0, 0
	go func() {
		defer wg.Done()
		o := dial()
		r := bufio.NewReader(o)
		chLen := 4096
		if v := getenvInt("LOCKPROXY_CHANNEL"); v > 0 {
			chLen = v
		}
		ch := strings.Repeat("a", chLen)
		var p []byte
		for range 16 {
			p = append(p, cmd("PUBLISH", ch, "m")...)
		}
		if getenvInt("LOCKPROXY_PUBLISH") < 0 {
			<-stop
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			o.Write(p)
			for range 16 {
				o.SetReadDeadline(time.Now().Add(30 * time.Second))
				line, err := r.ReadString('\n')
				if err != nil {
					t.Error(err)
					return
				}
				if line[0] == ':' {
					published++
				} else {
					refused++
				}
			}
		}
	}()
	cpu0 := cpuTime(t, pid)
	mcpu0 := cpuTime(t, masters[0].Pid())
	time.Sleep(seconds * time.Second)
	close(stop)
	wg.Wait()
	other.Stop()
	t.Logf("%d patterns, %d PUBLISH (%d refused) pipelined 16 at a time on a long channel in %ds: proxy CPU %.1fs, a master's CPU %.1fs; %v",
		patterns, published, refused, seconds, cpuTime(t, pid)-cpu0, cpuTime(t, masters[0].Pid())-mcpu0, other)
}

// TestSubscribeChurn measures the real binary, in front of 3 masters,
// while 20 clients SUBSCRIBE and UNSUBSCRIBE distinct channels (or, with
// LOCKPROXY_PATTERNS_CHURN=1, PSUBSCRIBE and PUNSUBSCRIBE distinct
// patterns) as fast as they can, 16 pairs a write: the proxy's RSS and
// CPU, a master's CPU, and the slowest SET NX of another client
// meanwhile. Opt-in:
//
//	LOCKPROXY_HOSTILE=1 go test -run TestSubscribeChurn -v ./cmd/lockproxy/
func TestSubscribeChurn(t *testing.T) {
	bin := hostileBinary(t)
	const seconds, conns = 6, 20
	masters := redisproc.ForTest(t, 3)
	addr, pid := startBinaryOn(t, bin, masters)
	sub, unsub := "SUBSCRIBE", "UNSUBSCRIBE"
	if getenvInt("LOCKPROXY_PATTERNS_CHURN") > 0 {
		sub, unsub = "PSUBSCRIBE", "PUNSUBSCRIBE"
	}
	cmd := respCommand
	dial := func() net.Conn { return dialProxy(t, addr) }
	stop := make(chan struct{})
	var pairs atomic.Int64
	var wg sync.WaitGroup
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := dial()
			go io.Copy(io.Discard, c)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				var p []byte
				for j := range 16 {
					name := fmt.Sprintf("*churn-%d-%d-%d", g, i, j)
					p = append(p, cmd(sub, name)...)
					p = append(p, cmd(unsub, name)...)
				}
				if _, err := c.Write(p); err != nil {
					return
				}
				pairs.Add(16)
			}
		}()
	}
	other := startOtherClient(t, addr)
	cpu0, mcpu0 := cpuTime(t, pid), cpuTime(t, masters[0].Pid())
	time.Sleep(seconds * time.Second)
	close(stop)
	wg.Wait()
	other.Stop()
	_, peak := rss(t, pid)
	t.Logf("%d connections, %d %s/%s pairs written in %ds: proxy peak RSS %d kB, CPU %.1fs, a master's CPU %.1fs; %v",
		conns, pairs.Load(), sub, unsub, seconds, peak, cpuTime(t, pid)-cpu0, cpuTime(t, masters[0].Pid())-mcpu0, other)
}
