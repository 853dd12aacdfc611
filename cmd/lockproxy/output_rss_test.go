package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestOutputMemoryRSS measures the real binary, in front of 3 masters,
// under pipelines that ask for far more reply bytes than they send (the
// review of the client output, figures in docs/hardening.md#client-output):
// the peak RSS, and the slowest SET NX of another client meanwhile. Opt-in:
//
//	LOCKPROXY_HOSTILE=1 go test -run TestOutputMemoryRSS -v ./cmd/lockproxy/
func TestOutputMemoryRSS(t *testing.T) {
	bin := hostileBinary(t)
	const kib, mib = 1 << 10, 1 << 20
	for _, tc := range []struct {
		name     string
		setName  int    // CLIENT SETNAME of this many bytes first
		value    int    // SET bigval NX of this many bytes first
		pipeline string // then sent in one write
		read     bool   // and its replies read
		maxPeak  int    // kB
	}{
		{"2a: 64 KB of CLIENT GETNAME of a 256 KiB name, read", 256 * kib, 0, strings.Repeat("CLIENT GETNAME\n", 64000/15), true, 256 * kib},
		{"2b: 66 KB of GET of a 64 KiB value, read", 0, 64 * kib, strings.Repeat("GET bigval\n", 66000/11), true, 256 * kib},
		{"2c: 4 KB of GET of a 1 MiB value, never read", 0, mib, strings.Repeat("GET bigval\n", 4000/11), false, 512 * kib},
	} {
		t.Run(tc.name, func(t *testing.T) {
			masters := redisproc.ForTest(t, 3)
			addr, pid := startBinaryOn(t, bin, masters)
			idle, _ := rss(t, pid)
			dial := func() net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
			do := func(c net.Conn, args ...string) string {
				fmt.Fprintf(c, "*%d\r\n", len(args))
				for _, a := range args {
					fmt.Fprintf(c, "$%d\r\n%s\r\n", len(a), a)
				}
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					t.Fatal(err)
				}
				return line
			}
			if tc.value > 0 {
				if r := do(dial(), "SET", "bigval", strings.Repeat("v", tc.value), "NX", "PX", "60000"); r != "+OK\r\n" {
					t.Fatalf("SET bigval: %q", r)
				}
			}
			// Another client takes locks all along.
			other := startOtherClient(t, addr)
			c := dial()
			if tc.setName > 0 {
				if r := do(c, "CLIENT", "SETNAME", strings.Repeat("n", tc.setName)); r != "+OK\r\n" {
					// Names bounded (at 4096 bytes, as lib-name and
					// lib-ver): the longest allowed, 64x less output.
					t.Logf("CLIENT SETNAME of %d bytes refused (%.80q): 4096 bytes instead", tc.setName, r)
					if r := do(c, "CLIENT", "SETNAME", strings.Repeat("n", 4096)); r != "+OK\r\n" {
						t.Fatalf("CLIENT SETNAME: %q", r)
					}
				}
			}
			cpu0 := cpuTime(t, pid)
			start := time.Now()
			if _, err := c.Write([]byte(tc.pipeline)); err != nil {
				t.Fatal(err)
			}
			read, replies := 0, 0
			if tc.read {
				// Count the replies: each is a bulk; NOQUORUM errors too.
				r := bufio.NewReaderSize(c, 1<<20)
				n := strings.Count(tc.pipeline, "\n")
				for replies < n {
					c.SetReadDeadline(time.Now().Add(30 * time.Second))
					head, err := r.ReadSlice('\n')
					if err != nil {
						t.Fatalf("reply %d: %v", replies, err)
					}
					read += len(head)
					if bytes.HasPrefix(head, []byte("$")) {
						var l int
						fmt.Sscanf(string(head), "$%d", &l)
						k, err := io.CopyN(io.Discard, r, int64(l+2))
						read += int(k)
						if err != nil {
							t.Fatalf("reply %d: %v", replies, err)
						}
					} else {
						t.Errorf("reply %d: %q", replies, head)
					}
					replies++
				}
			} else {
				time.Sleep(3 * time.Second) // a client that never reads: look at the proxy meanwhile
			}
			took := time.Since(start)
			other.Stop()
			now, peak := rss(t, pid)
			t.Logf("%s: RSS idle %d kB, peak %d kB, now %d kB; proxy CPU %.1fs; %d replies (%d MB) read in %v; %v",
				tc.name, idle, peak, now, cpuTime(t, pid)-cpu0, replies, read/1000000, took.Round(time.Millisecond), other)
			if peak > tc.maxPeak {
				t.Fatalf("peak RSS %d kB, want under %d kB", peak, tc.maxPeak)
			}
		})
	}
}

// startBinaryOn runs bin in front of masters on a free port, and stops it
// when the test ends.
func startBinaryOn(t *testing.T, bin string, masters []*redisproc.Server) (addr string, pid int) {
	t.Helper()
	var list []string
	for _, m := range masters {
		list = append(list, fmt.Sprintf("%q", m.Addr))
	}
	port := freePort(t)
	path := writeConfig(t, fmt.Sprintf("listen = \"127.0.0.1:%s\"\nmetrics_listen = \"\"\n[quorum]\nmasters = [%s]\nbootstrap = true\n", port, strings.Join(list, ", ")))
	cmd := exec.Command(bin, "-config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	addr = "127.0.0.1:" + port
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return false
		}
		defer c.Close()
		fmt.Fprint(c, "SET warm t NX PX 1000\r\n")
		c.SetReadDeadline(time.Now().Add(time.Second))
		line, _ := bufio.NewReader(c).ReadString('\n')
		return line == "+OK\r\n" || line == "$-1\r\n"
	}, "lockproxy to take locks")
	return addr, cmd.Process.Pid
}

// cpuTime is the user and system CPU pid has used, in seconds.
func cpuTime(t *testing.T, pid int) float64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	var utime, stime float64
	fmt.Sscan(f[11], &utime)
	fmt.Sscan(f[12], &stime)
	return (utime + stime) / 100 // USER_HZ
}
