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

// Measurements of the real binary under the attacks of issue 11, opt-in
// (they move 1.5 GB over loopback and hold 10,000 connections):
//
//	LOCKPROXY_HOSTILE=1 go test -run 'TestInputMemoryRSS|TestSilentConnectionsLockOut' -v ./cmd/lockproxy/

// hostileBinary builds lockproxy for a measurement, or skips.
func hostileBinary(t *testing.T) string {
	if os.Getenv("LOCKPROXY_HOSTILE") == "" {
		t.Skip("set LOCKPROXY_HOSTILE=1 to measure the binary under issue 11's attacks")
	}
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBinary runs bin with a config of its own on a free port, with
// extra top-level keys, and stops it when the test ends.
func startBinary(t *testing.T, bin, master, extra string) (addr string, pid int) {
	t.Helper()
	port := freePort(t)
	path := writeConfig(t, fmt.Sprintf("listen = \"127.0.0.1:%s\"\nmetrics_listen = \"\"\n%s\n[quorum]\nmasters = [%q]\nbootstrap = true\nprobe_interval = \"0s\"\n", port, extra, master))
	cmd := exec.Command(bin, "-config", path)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	addr = "127.0.0.1:" + port
	waitFor(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "lockproxy to listen")
	return addr, cmd.Process.Pid
}

// TestInputMemoryRSS measures the memory (RSS) of the real binary under
// 100 connections each sending an unfinished 8 MiB command (7 arguments of
// 1 MiB, the last cut short), without and with AUTH, against requirepass,
// before and after the pre-auth limits and client_query_buffer_total
// (figures: docs/hardening.md).
func TestInputMemoryRSS(t *testing.T) {
	bin := hostileBinary(t)
	m := redisproc.ForTest(t, 1)
	for _, tc := range []struct {
		name, auth string
		maxRSS     int // kB
	}{
		{"unauthenticated", "", 64 << 10},
		{"authenticated", "secret", 512 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, pid := startBinary(t, bin, m[0].Addr, `requirepass = "secret"`)
			idle, _ := rss(t, pid)
			closed := attack(t, addr, tc.auth, 100)
			now, peak := rss(t, pid)
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

// TestSilentConnectionsLockOut: 10,000 connections that send nothing fill
// max_clients; a new client is refused until handshake_timeout (default
// 10s) closes them. Before it, the lock-out lasted as long as they stayed.
func TestSilentConnectionsLockOut(t *testing.T) {
	bin := hostileBinary(t)
	m := redisproc.ForTest(t, 1)
	addr, _ := startBinary(t, bin, m[0].Addr, "")
	start := time.Now()
	for i := 0; i < 10000; i++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("connection %d: %v (raise ulimit -n)", i, err)
		}
		defer c.Close()
	}
	opened := time.Since(start)
	refused := 0
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		fmt.Fprintf(c, "PING\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		c.Close()
		if line == "+PONG\r\n" {
			break
		}
		refused++
		if time.Since(start) > 30*time.Second {
			t.Fatalf("still locked out 30s after 10,000 silent connections (%d refusals)", refused)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("10,000 silent connections opened in %v; a new client was refused %d times, served %v after the first", opened.Round(time.Millisecond), refused, time.Since(start).Round(time.Millisecond))
}
