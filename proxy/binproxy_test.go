package proxy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// The lockproxy binary as a child process of a test: unlike a Server in
// this process it can be paused (SIGSTOP) and killed like the real thing.

// buildLockproxy compiles cmd/lockproxy into the test's temporary
// directory (about a second with a warm build cache).
func buildLockproxy(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockproxy")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lockproxy/lockproxy/cmd/lockproxy").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// proxySettings are the quorum settings every proxy of a test shares, in
// this process (clusterOpt) or as a binary (TOML).
type proxySettings struct {
	maxTTL     time.Duration // also the quarantine
	quarantine bool
}

// testNodeTimeout is every test proxy's node_timeout: harness_test.go's, for the
// same reason (a loaded CI machine under -race).
const testNodeTimeout = 250 * time.Millisecond

func (s proxySettings) opt() clusterOpt {
	return func(pc *proxy.Config, qc *quorum.Config) {
		withQuarantine(s.maxTTL)(pc, qc)
		qc.Quarantine = s.quarantine
		qc.NodeTimeout = testNodeTimeout
	}
}

func (s proxySettings) toml(listen string, masters []*redisproc.Server) string {
	addrs := make([]string, len(masters))
	for i, m := range masters {
		addrs[i] = strconv.Quote(m.Addr)
	}
	return fmt.Sprintf("listen = %q\nmetrics_listen = \"\"\n[quorum]\nmasters = [%s]\nnode_timeout = %q\nmax_ttl = %q\nquarantine = %v\nbootstrap = true\n",
		listen, strings.Join(addrs, ", "), testNodeTimeout.String(), s.maxTTL.String(), s.quarantine)
}

// binProxy is one lockproxy process. Its port stays the same across Kill
// and Restart, so clients reconnect to the new process by themselves.
type binProxy struct {
	t    testing.TB
	bin  string
	conf string // path of its config file
	addr string
	out  *syncBuffer // the output of all its runs

	mu     sync.Mutex // protects the fields below; held during signals and waits
	cmd    *exec.Cmd
	exited chan struct{}
	paused bool
	starts int
}

// startBinProxy runs bin on masters with s and stops it when the test ends.
func startBinProxy(t testing.TB, bin string, masters []*redisproc.Server, s proxySettings) *binProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	p := &binProxy{t: t, bin: bin, addr: addr, out: &syncBuffer{}, conf: filepath.Join(t.TempDir(), "lockproxy.toml")}
	if err := os.WriteFile(p.conf, []byte(s.toml(addr, masters)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	return p
}

// Restart starts the process (again: a running one is killed first) and
// waits for its start-up line.
func (p *binProxy) Restart() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
	p.starts++
	cmd := exec.Command(p.bin, "-config", p.conf)
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.cmd, p.exited, p.paused = cmd, exited, false
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(p.out.String(), `msg="lockproxy started"`) < p.starts {
		select {
		case <-exited:
			return fmt.Errorf("lockproxy on %s exited at start %d: %v\n%s", p.addr, p.starts, cmd.ProcessState, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("lockproxy on %s: no start-up line within 10s\n%s", p.addr, p.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// Pause stops the process with SIGSTOP: its sockets stay open, it answers
// nothing, its clocks go on.
func (p *binProxy) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume continues a paused process.
func (p *binProxy) Resume() error { return p.signal(syscall.SIGCONT, false) }

func (p *binProxy) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return fmt.Errorf("lockproxy on %s is not running", p.addr)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	p.paused = paused
	return nil
}

// Kill sends SIGKILL and waits for the process to exit.
func (p *binProxy) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killLocked()
}

func (p *binProxy) killLocked() {
	if p.runningLocked() {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
	}
	p.paused = false
}

func (p *binProxy) runningLocked() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop ends the process as an operator would (SIGCONT if paused, SIGTERM),
// SIGKILL after 10s; on a failed test it logs the process's output.
func (p *binProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.runningLocked() {
		if p.paused {
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.t.Errorf("lockproxy on %s still running 10s after SIGTERM; killed", p.addr)
			p.killLocked()
		}
	}
	if p.t.Failed() {
		p.t.Logf("lockproxy on %s, output of its %d runs:\n%s", p.addr, p.starts, p.out.String())
	}
}

// waitVoting polls INFO quorum until n masters are up and not
// quarantined.
func (p *binProxy) waitVoting(n int) {
	p.t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: p.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := cl.Info(context.Background(), "quorum").Result()
		if err == nil && strings.Count(info, ",state=up,") >= n {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("lockproxy on %s: %d masters not voting within 10s (%v):\n%s", p.addr, n, err, info)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
