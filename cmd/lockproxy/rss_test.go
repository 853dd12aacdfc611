package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestInputMemoryRSS measures the memory (RSS) of the real binary under
// the attack of issue 11: 100 connections each sending an unfinished 8 MiB
// command (7 arguments of 1 MiB, the last cut short), without and with
// AUTH, against requirepass. Opt-in (it moves 1.5 GB over loopback):
//
//	LOCKPROXY_RSS=1 go test -run TestInputMemoryRSS -v ./cmd/lockproxy/
//
// Before the pre-auth limits and client_query_buffer_total: 1,059 MB and
// 981 MB.
func TestInputMemoryRSS(t *testing.T) {
	if os.Getenv("LOCKPROXY_RSS") == "" {
		t.Skip("set LOCKPROXY_RSS=1 to measure lockproxy's RSS under 100 x 8 MiB unfinished commands")
	}
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m := redisproc.ForTest(t, 1)
	for _, tc := range []struct {
		name, auth string
		maxRSS     int // kB
	}{
		{"unauthenticated", "", 64 << 10},
		{"authenticated", "secret", 512 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			port := freePort(t)
			path := writeConfig(t, fmt.Sprintf("listen = \"127.0.0.1:%s\"\nmetrics_listen = \"\"\nrequirepass = \"secret\"\n[quorum]\nmasters = [%q]\nbootstrap = true\nprobe_interval = \"0s\"\n", port, m[0].Addr))
			cmd := exec.Command(bin, "-config", path)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
			addr := "127.0.0.1:" + port
			waitFor(t, func() bool {
				c, err := net.Dial("tcp", addr)
				if err == nil {
					c.Close()
				}
				return err == nil
			}, "lockproxy to listen")
			idle, _ := rss(t, cmd.Process.Pid)
			closed := attack(t, addr, tc.auth, 100)
			now, peak := rss(t, cmd.Process.Pid)
			t.Logf("%s: RSS idle %d kB, after the attack %d kB (peak %d kB); %d of 100 connections closed by lockproxy", tc.name, idle, now, peak, closed)
			if now > tc.maxRSS {
				t.Fatalf("RSS %d kB, want under %d kB", now, tc.maxRSS)
			}
		})
	}
}

// attack sends the unfinished commands on n connections, waits until
// lockproxy has read what it will read, and returns how many connections
// it closed.
func attack(t *testing.T, addr, auth string, n int) (closed int) {
	const arg, nargs = 1 << 20, 7
	chunk := []byte(strings.Repeat("x", arg))
	failed := make([]bool, n)
	done := make(chan struct{}, n)
	var conns []net.Conn
	for i := 0; i < n; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
		go func(i int) {
			w := bufio.NewWriter(c)
			if auth != "" {
				fmt.Fprintf(w, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(auth), auth)
			}
			fmt.Fprintf(w, "*%d\r\n$4\r\nECHO\r\n", nargs+2)
			for j := 0; j < nargs; j++ {
				fmt.Fprintf(w, "$%d\r\n", arg)
				if j < nargs-1 {
					w.Write(chunk)
					w.WriteString("\r\n")
				} else {
					w.Write(chunk[:arg-10]) // the command never ends
				}
			}
			failed[i] = w.Flush() != nil
			done <- struct{}{}
		}(i)
	}
	for i := 0; i < n; i++ {
		<-done
	}
	// Whatever was still in flight is read by now; closed connections
	// answer EOF or a reset.
	for i, c := range conns {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		for err := error(nil); err == nil; {
			_, err = c.Read(make([]byte, 4096))
			if err != nil && !strings.Contains(err.Error(), "timeout") {
				failed[i] = true
			}
		}
		if failed[i] {
			closed++
		}
	}
	return closed
}

// rss returns VmRSS and VmHWM of pid in kB.
func rss(t *testing.T, pid int) (now, peak int) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		fmt.Sscanf(l, "VmRSS: %d kB", &now)
		fmt.Sscanf(l, "VmHWM: %d kB", &peak)
	}
	return now, peak
}
