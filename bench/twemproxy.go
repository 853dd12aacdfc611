package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// twemproxy (nutcracker) is the Redis proxy people already run: scenario 1
// drives it beside direct Redis and lockproxy so that each proxy's own CPU
// per request can be compared (proxycpu.go). It forwards every request to
// the first master, the only server of its one pool, where lockproxy fans
// each one out to every master and decides a quorum.

// nutcrackerInstall is the command the error for a missing binary names.
const nutcrackerInstall = "apt-get install nutcracker"

// nutcrackerFallback is where Debian's package installs the binary, outside
// the PATH of a user who is not root.
const nutcrackerFallback = "/usr/sbin/nutcracker"

// errNoNutcracker is returned when twemproxy is to be measured and its
// binary is not installed.
var errNoNutcracker = errors.New("bench: twemproxy (nutcracker) not found on PATH nor at " + nutcrackerFallback +
	"; install it with `" + nutcrackerInstall + "`, or leave it out with -targets direct,lockproxy,redsync or -only without twemproxy")

// NutcrackerBinary returns the path of the nutcracker binary, or an error
// that says how to install it.
func NutcrackerBinary() (string, error) {
	return findNutcracker(nutcrackerFallback)
}

func findNutcracker(fallback string) (string, error) {
	if p, err := exec.LookPath("nutcracker"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat(fallback); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return fallback, nil
	}
	return "", errNoNutcracker
}

// twemproxyConfig is the YAML configuration of one server pool that listens
// on listen and forwards every request to server, the setup a user puts in
// front of one Redis: redis protocol, one connection to the server, opened
// at start (preconnect, so the first measured request does not pay for it),
// no ejection and no timeout (the master never fails here; a timeout would
// only turn a stall of the shared machine into a failed run).
func twemproxyConfig(listen, server string) string {
	return fmt.Sprintf(`lockbench:
  listen: %s
  redis: true
  hash: fnv1a_64
  distribution: ketama
  auto_eject_hosts: false
  preconnect: true
  server_connections: 1
  servers:
   - %s:1
`, listen, server)
}

// startTwemproxy runs nutcracker from bin in dir, in front of master, and
// waits until it answers PING. Its stats server, which nutcracker always
// opens, gets a free port of its own so that runs side by side do not
// collide on the default 22222.
func startTwemproxy(ctx context.Context, bin, dir, master string) (*proxyProc, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	stats, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	conf := filepath.Join(dir, "nutcracker.yml")
	if err := os.WriteFile(conf, []byte(twemproxyConfig(addr, master)), 0o644); err != nil {
		return nil, err
	}
	// Without -o nutcracker logs to stderr, which launch keeps in
	// nutcracker.log.
	return launch(ctx, "nutcracker", addr, dir, bin, "-c", conf, "-a", "127.0.0.1", "-s", strconv.Itoa(stats))
}

// startTwemproxy starts twemproxy in front of the cluster's first master;
// close stops it.
func (c *cluster) startTwemproxy(ctx context.Context, bin string) error {
	p, err := startTwemproxy(ctx, bin, filepath.Join(c.dir, "twemproxy"), c.masters[0].Addr)
	if err != nil {
		return err
	}
	c.twem = p
	return nil
}

// startFloor starts the floor fan-out proxy (bench/floor) from bin over
// every master; close stops it.
func (c *cluster) startFloor(ctx context.Context, bin string) error {
	dir := filepath.Join(c.dir, "floor")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p, err := launch(ctx, "floor", addr, dir, bin, "-serve-floor", addr, "-floor-masters", strings.Join(c.masterAddrs(), ","))
	if err != nil {
		return fmt.Errorf("bench: the floor fan-out proxy: %w", err)
	}
	c.floor = p
	return nil
}

// startLockproxyOne starts lockproxy on the cluster's first master alone,
// twemproxy's job (the LockproxyOne target); close stops it.
func (c *cluster) startLockproxyOne(ctx context.Context) error {
	p, err := startProxy(ctx, c.bin, filepath.Join(c.dir, "lockproxy-one-master"), c.masterAddrs()[:1], c.nodeTimeout)
	if err != nil {
		return fmt.Errorf("bench: lockproxy on one master: %w", err)
	}
	c.one = p
	return nil
}
