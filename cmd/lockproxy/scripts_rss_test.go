package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// understoodRelease is a compare-and-delete release that the catalog does
// not hold and the analyzer understands; i names its local, so each i is a
// distinct script (names are kept verbatim by the normal form).
func understoodRelease(i int) string {
	return pad + fmt.Sprintf("local v%d = redis.call(\"get\", KEYS[1])\nif v%d == ARGV[1] then return redis.call(\"del\", KEYS[1]) else return 0 end", i, i)
}

// pad is a comment ahead of each script: LOCKPROXY_PAD=15000 makes texts
// near the analyzer's 16 KiB limit.
var pad = func() string {
	if n := getenvInt("LOCKPROXY_PAD"); n > 0 {
		return "-- " + strings.Repeat("x", n) + "\n"
	}
	return ""
}()

// TestUnderstoodScriptsRSS measures the real binary, in front of 5
// masters, while clients send many distinct scripts that lockproxy
// understands (docs/hardening.md#the-script-table): the RSS of the proxy
// and of the masters, the scripts cached on each master, and the slowest
// SET NX of another client meanwhile. Opt-in:
//
//	LOCKPROXY_HOSTILE=1 LOCKPROXY_SCRIPTS=20000 [LOCKPROXY_PAD=15000] go test -run TestUnderstoodScriptsRSS -v ./cmd/lockproxy/
func TestUnderstoodScriptsRSS(t *testing.T) {
	bin := hostileBinary(t)
	n := 3000
	if v := getenvInt("LOCKPROXY_SCRIPTS"); v > 0 {
		n = v
	}
	const conns = 8
	masters := redisproc.ForTest(t, 5)
	addr, pid := startBinaryOn(t, bin, masters)
	masterInfo := func() string {
		var out []string
		for _, m := range masters {
			info, err := m.Do("INFO", "memory")
			if err != nil {
				t.Fatal(err)
			}
			scripts, lua, rssKB := "", "", 0
			for _, l := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(l, "number_of_cached_scripts:"); ok {
					scripts = v
				}
				if v, ok := strings.CutPrefix(l, "used_memory_lua_human:"); ok {
					lua = v
				}
			}
			rssKB, _ = rss(t, m.Pid())
			out = append(out, fmt.Sprintf("%s scripts, lua %s, RSS %d kB", scripts, lua, rssKB))
		}
		return strings.Join(out, "; ")
	}
	idle, _ := rss(t, pid)
	t.Logf("before: proxy RSS %d kB; masters: %s", idle, masterInfo())
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, bufio.NewReader(c)
	}
	do := func(c net.Conn, r *bufio.Reader, args ...string) string {
		fmt.Fprintf(c, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	other := startOtherClient(t, addr)
	cpu0 := cpuTime(t, pid)
	start := time.Now()
	var next atomic.Int64
	var refused atomic.Int64
	var first sync.Once
	var aw sync.WaitGroup
	for range conns {
		aw.Add(1)
		go func() {
			defer aw.Done()
			c, r := dial()
			for {
				i := int(next.Add(1))
				if i > n {
					return
				}
				if i%2000 == 0 {
					now, _ := rss(t, pid)
					t.Logf("after %d scripts: proxy RSS %d kB", i, now)
				}
				rep := do(c, r, "EVAL", understoodRelease(i), "1", "k", "t")
				if rep != ":0\r\n" {
					refused.Add(1)
					first.Do(func() { t.Logf("script %d answered %q", i, rep) })
				}
			}
		}()
	}
	aw.Wait()
	took := time.Since(start)
	other.Stop()
	now, peak := rss(t, pid)
	t.Logf("%d distinct understood scripts (%d not answered 0) in %v: proxy RSS idle %d kB, now %d kB, peak %d kB; proxy CPU %.1fs; %v",
		n, refused.Load(), took.Round(time.Millisecond), idle, now, peak, cpuTime(t, pid)-cpu0, other)
	if other.bad.Load() > 0 {
		t.Errorf("%v: each must be granted", other)
	}
	t.Logf("after: masters: %s", masterInfo())
}

// getenvInt is the integer in environment variable name, or 0.
func getenvInt(name string) int {
	n, _ := strconv.Atoi(os.Getenv(name))
	return n
}
