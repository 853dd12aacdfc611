package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// Timings of the lockproxy process lifecycle.
const (
	proxyReadyTimeout = 15 * time.Second
	proxyStopGrace    = 10 * time.Second
	buildTimeout      = 5 * time.Minute
)

// cluster is what one benchmark run measures: the masters and, when
// lockproxy is among the targets, one lockproxy in front of them.
type cluster struct {
	masters []*redisproc.Server
	proxy   *proxyProc // nil without lockproxy
	// extra are the further lockproxies of the waiters and multiproxy
	// scenarios, on the same masters, started from bin into dir; started
	// counts every one ever started, to name their directories.
	extra   []*proxyProc
	started int
	// twem is twemproxy in front of the first master (twemproxy.go), nil
	// unless scenario 1 measures it.
	twem *proxyProc
	// one is lockproxy on the first master alone, beside twemproxy (the
	// LockproxyOne target), nil unless scenario 1 measures twemproxy.
	one *proxyProc
	// floor is the floor fan-out proxy over all the masters (the Floor
	// target), nil unless scenario 1 measures it.
	floor       *proxyProc
	bin, dir    string
	nodeTimeout time.Duration
}

// startCluster starts n masters under dir and, when proxyBin is not empty,
// lockproxy on them. On error everything already started is stopped.
func startCluster(ctx context.Context, dir string, n int, proxyBin string, nodeTimeout time.Duration) (c *cluster, err error) {
	c = &cluster{bin: proxyBin, dir: dir, nodeTimeout: nodeTimeout}
	defer func() {
		if err != nil {
			c.close()
			c = nil
		}
	}()
	c.masters, err = redisproc.StartN(filepath.Join(dir, "masters"), n)
	if err != nil {
		return nil, fmt.Errorf("bench: start %d masters: %w", n, err)
	}
	if proxyBin == "" {
		return c, nil
	}
	c.proxy, err = startProxy(ctx, proxyBin, filepath.Join(dir, "lockproxy"), c.masterAddrs(), nodeTimeout)
	return c, err
}

func (c *cluster) masterAddrs() []string {
	addrs := make([]string, len(c.masters))
	for i, m := range c.masters {
		addrs[i] = m.Addr
	}
	return addrs
}

// startExtraProxy starts one more lockproxy on the cluster's masters, with
// the first one's settings; close or stopExtra stops it.
func (c *cluster) startExtraProxy(ctx context.Context) (*proxyProc, error) {
	if c.bin == "" {
		return nil, errors.New("bench: no lockproxy binary")
	}
	c.started++
	dir := filepath.Join(c.dir, fmt.Sprintf("lockproxy-%d", c.started+1))
	p, err := startProxy(ctx, c.bin, dir, c.masterAddrs(), c.nodeTimeout)
	if err != nil {
		return nil, err
	}
	c.extra = append(c.extra, p)
	return p, nil
}

// stopExtra stops the extra lockproxies.
func (c *cluster) stopExtra() error {
	var errs []error
	for _, p := range c.extra {
		errs = append(errs, p.stop())
	}
	c.extra = nil
	return errors.Join(errs...)
}

// meter returns a cpuMeter over the cluster's processes.
func (c *cluster) meter() *cpuMeter { return c.meterFor(c.proxy) }

// meterFor returns a cpuMeter over the masters with p (nil: none) as the
// proxy.
func (c *cluster) meterFor(p *proxyProc) *cpuMeter {
	m := &cpuMeter{}
	if p != nil {
		m.proxyPids = []int{p.pid()}
	}
	for _, s := range c.masters {
		m.masterPids = append(m.masterPids, s.Pid())
	}
	return m
}

// close stops the proxies, then every master (which also resumes a paused
// one).
func (c *cluster) close() error {
	var errs []error
	for _, p := range c.extra {
		errs = append(errs, p.stop())
	}
	if c.twem != nil {
		errs = append(errs, c.twem.stop())
	}
	if c.one != nil {
		errs = append(errs, c.one.stop())
	}
	if c.floor != nil {
		errs = append(errs, c.floor.stop())
	}
	if c.proxy != nil {
		errs = append(errs, c.proxy.stop())
	}
	for _, s := range c.masters {
		if s != nil {
			errs = append(errs, s.Stop())
		}
	}
	return errors.Join(errs...)
}

// BuildLockproxy compiles ./cmd/lockproxy of the module in the current
// directory (or above it) into dir and returns the binary's path.
func BuildLockproxy(ctx context.Context, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	gomod, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("bench: go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if root == "." || root == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("bench: not inside the lockproxy module; run from its directory or pass a prebuilt binary")
	}
	bin := filepath.Join(dir, "bin", "lockproxy")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/lockproxy")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench: go build ./cmd/lockproxy: %w\n%s", err, out)
	}
	return bin, nil
}

// proxyProc is a proxy process (lockproxy or twemproxy) started by launch.
type proxyProc struct {
	name   string // "lockproxy" or "nutcracker", for messages
	addr   string
	log    string // path of its stderr+stdout
	cmd    *exec.Cmd
	exited chan struct{}
}

// proxyConfig is the configuration file the benchmark gives lockproxy:
// metrics off (nothing scrapes them), bootstrap on (the masters are new).
func proxyConfig(listen string, masters []string, nodeTimeout time.Duration) string {
	quoted := make([]string, len(masters))
	for i, m := range masters {
		quoted[i] = strconv.Quote(m)
	}
	return fmt.Sprintf(`listen = %q
metrics_listen = ""
[quorum]
masters = [%s]
node_timeout = %q
max_ttl = "60s"
bootstrap = true
`, listen, strings.Join(quoted, ", "), nodeTimeout.String())
}

// startProxy runs bin with a config for masters in dir and waits until it
// answers PING.
func startProxy(ctx context.Context, bin, dir string, masters []string, nodeTimeout time.Duration) (*proxyProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte(proxyConfig(addr, masters, nodeTimeout)), 0o644); err != nil {
		return nil, err
	}
	return launch(ctx, "lockproxy", addr, dir, bin, "-config", conf)
}

// launch runs bin with args in dir, its output in dir/<name>.log, and waits
// until it answers PING on addr. name is used in messages.
func launch(ctx context.Context, name, addr, dir, bin string, args ...string) (*proxyProc, error) {
	p := &proxyProc{name: name, addr: addr, log: filepath.Join(dir, name+".log")}
	logf, err := os.Create(p.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Die with the benchmark if it is killed without a chance to clean up.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("bench: start %s: %w", name, err)
	}
	p.exited = make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	if err := p.waitReady(ctx); err != nil {
		p.stop()
		return nil, fmt.Errorf("%w\n--- %s log tail ---\n%s", err, name, tail(p.log, 20))
	}
	return p, nil
}

func (p *proxyProc) pid() int { return p.cmd.Process.Pid }

// waitReady polls PING until the proxy answers +PONG.
func (p *proxyProc) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(proxyReadyTimeout)
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("bench: %s exited during start: %v", p.name, p.cmd.ProcessState)
		default:
		}
		if ping(p.addr) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: %s on %s did not answer PING within %v", p.name, p.addr, proxyReadyTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ping sends PING as a RESP array (twemproxy has no inline commands) and
// reports whether +PONG came back.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.TrimSpace(line) == "+PONG"
}

// stop sends SIGTERM (lockproxy finishes in-flight operations and exits;
// twemproxy just exits) and SIGKILL after proxyStopGrace.
func (p *proxyProc) stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(proxyStopGrace):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("bench: %s pid %d ignored SIGTERM for %v, killed", p.name, p.pid(), proxyStopGrace)
	}
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail returns the last n lines of the file at path, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return lastLines(string(b), n)
}
