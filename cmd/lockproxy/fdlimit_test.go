package main

import (
	"bufio"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

func TestFitMaxClients(t *testing.T) {
	for _, tc := range []struct {
		max      int
		nofile   uint64
		reserved int
		want     int
		err      bool
	}{
		{10000, 0, 104, 10000, false},       // limit unknown
		{10000, 1048576, 104, 10000, false}, // fits
		{10000, 10104, 104, 10000, false},   // just fits
		{10000, 10103, 104, 9999, false},
		{10000, 1024, 104, 920, false},
		{10000, 104, 104, 0, true}, // nothing left for clients
		{10, 50, 104, 0, true},
	} {
		got, err := fitMaxClients(tc.max, tc.nofile, tc.reserved)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("fitMaxClients(%d, %d, %d) = %d, %v; want %d, error %v", tc.max, tc.nofile, tc.reserved, got, err, tc.want, tc.err)
		}
	}
	if _, err := fitMaxClients(10000, 50, 104); err == nil || !strings.Contains(err.Error(), "raise the limit to at least 10104") {
		t.Errorf("error %v does not say what limit to set", err)
	}
}

// TestMaxClientsFitsTheFileLimit runs the binary under ulimit -n 200 with
// the default max_clients (10000) and one master: lockproxy lowers
// max_clients to 160, says so, and the 200 clients that connect are each
// answered, PONG or "max number of clients reached". Before, clients past
// the descriptor limit got no reply (accept failed with EMFILE, 1,214
// warnings in 4 s with 3 masters under ulimit -n 300) or an EOF, and with
// the limit reached a master whose connection dropped could not be
// dialled again while clients kept the descriptors.
func TestMaxClientsFitsTheFileLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to set ulimit -n")
	}
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	m := redisproc.ForTest(t, 1)
	port := freePort(t)
	path := writeConfig(t, fmt.Sprintf("listen = \"127.0.0.1:%s\"\nmetrics_listen = \"\"\n[quorum]\nmasters = [%q]\nbootstrap = true\nprobe_interval = \"0s\"\n", port, m[0].Addr))
	cmd := exec.Command(sh, "-c", `ulimit -n 200 && exec "$0" "$@"`, bin, "-config", path)
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("lockproxy's log:\n%s", logs.String())
		}
	})
	addr := "127.0.0.1:" + port
	waitFor(t, func() bool { return strings.Contains(logs.String(), "master connected") }, "lockproxy to connect its master")
	if !strings.Contains(logs.String(), `msg="max_clients lowered to fit the process's file descriptor limit`) ||
		!strings.Contains(logs.String(), "max_clients=160 configured=10000 open_files_limit=200 reserved=40") {
		t.Fatalf("no warning that max_clients was lowered to 160")
	}

	const clients = 200
	pong, refused := 0, 0
	var other []string
	for i := 0; i < clients; i++ {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			other = append(other, err.Error())
			continue
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		line := ""
		if _, err := c.Write([]byte("PING\r\n")); err == nil {
			line, err = bufio.NewReader(c).ReadString('\n')
			if err != nil {
				line = err.Error()
			}
		}
		switch {
		case line == "+PONG\r\n":
			pong++
		case strings.HasPrefix(line, "-ERR max number of clients reached"):
			refused++
		default:
			other = append(other, strings.TrimSpace(line))
		}
	}
	t.Logf("%d clients under ulimit -n 200: %d served, %d refused with max_clients, %d otherwise %q", clients, pong, refused, len(other), other)
	if pong != 160 || refused != clients-160 || len(other) > 0 {
		t.Fatalf("want 160 served and %d refused with max_clients, every client answered", clients-160)
	}
	if strings.Contains(logs.String(), "too many open files") {
		t.Fatalf("lockproxy ran out of descriptors")
	}
}
