package compat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy"
)

// nodeDir holds package.json, the committed package-lock.json and the
// scripts; npm ci installs node_modules there.
const nodeDir = "node"

var (
	npmOnce sync.Once
	npmErr  string
)

// requireNodeModules fails t (never skips) when node or npm is missing, and
// otherwise makes node/node_modules match node/package-lock.json: npm ci,
// skipped when a stamp written by the last successful install says the
// lock file has not changed since.
func requireNodeModules(t *testing.T) {
	t.Helper()
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed; install it with:\n  apt-get install -y nodejs npm\n(.ci/run installs it)", tool)
		}
	}
	npmOnce.Do(func() { npmErr = npmCI() })
	if npmErr != "" {
		t.Fatal(npmErr)
	}
}

// npmCI runs npm ci in nodeDir unless its stamp is current, and returns a
// failure message or "".
func npmCI() string {
	lockFile := filepath.Join(nodeDir, "package-lock.json")
	f, err := os.Open(lockFile)
	if err != nil {
		return "compat/node/package-lock.json is missing: " + err.Error()
	}
	defer f.Close()
	// Another go test process (go test ./... runs packages in parallel, and
	// developers share a tree) may be installing too.
	unlock, err := lockFileExclusive(f)
	if err != nil {
		return "locking " + lockFile + ": " + err.Error()
	}
	defer unlock()

	h := sha256.New()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join(nodeDir, name))
		if err != nil {
			return err.Error()
		}
		h.Write(b)
	}
	want := hex.EncodeToString(h.Sum(nil))
	stamp := filepath.Join(nodeDir, "node_modules", ".lockproxy-npm-ci")
	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--prefer-offline")
	cmd.Dir = nodeDir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "npm ci in compat/node failed (" + err.Error() + "); run it by hand to see why:\n  cd compat/node && npm ci --no-audit --no-fund\n" + out.String()
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return err.Error()
	}
	return ""
}

// runNode runs a script of nodeDir against e (node SCRIPT PORT PREFIX
// ARGS…).
func (e *env) runNode(t *testing.T, script string, args ...string) {
	t.Helper()
	requireNodeModules(t)
	argv := append([]string{filepath.Join(nodeDir, script), port(e.addr), prefixOf(t)}, args...)
	e.runDriven(t, 30*time.Second, "node", argv...)
	must(t, e.checkKeys(t, prefixOf(t)))
}

// TestNodeRedlock: node-redlock 5.0.0-beta.2 with one ioredis client,
// single and multi-resource locks, retries and using() with automatic
// extension (node/redlock5.js).
func TestNodeRedlock(t *testing.T) {
	t.Parallel()
	setup(t).runNode(t, "redlock5.js")
}

// TestNodeIORedisLock: ioredis-lock 4.0.0 (node/ioredis_lock.js).
func TestNodeIORedisLock(t *testing.T) {
	t.Parallel()
	setup(t).runNode(t, "ioredis_lock.js")
}

// TestNodePubSub: node-redis 5.12 (RESP2, its default, and RESP: 3) and
// ioredis 5 (RESP2) subscribers on one lockproxy, publishers on another on
// the same masters (node/pubsub.js): SUBSCRIBE, PSUBSCRIBE and SSUBSCRIBE
// get each message once and in order, PUBLISH's receiver counts,
// UNSUBSCRIBE, and keyspace notifications (CONFIG SET
// notify-keyspace-events on both proxies) of a lock taken, released and
// left to expire through the publisher's proxy. "plain" runs the same
// driver against one redis-server. node-redis 6 (RESP3 by default) needs
// node 20, newer than Debian 12's 18: not run.
func TestNodePubSub(t *testing.T) {
	t.Parallel()
	requireNodeModules(t)
	e := setup(t)
	sub := e.proxyFor(t, proxy.Config{}, nil)
	pub := e.proxyFor(t, proxy.Config{}, nil)
	for _, lib := range []string{"node-redis5", "node-redis5-resp3", "ioredis"} {
		t.Run(lib+"/lockproxy", func(t *testing.T) {
			t.Parallel()
			e.runPubSubJS(t, sub, pub, lib)
		})
		t.Run(lib+"/plain", func(t *testing.T) {
			t.Parallel()
			p := ownRedis(t)
			p.runPubSubJS(t, p.addr, p.addr, lib)
		})
	}
}

func (e *env) runPubSubJS(t *testing.T, sub, pub, lib string) {
	t.Helper()
	e.runDriven(t, 30*time.Second, "node", filepath.Join(nodeDir, "pubsub.js"), port(sub), port(pub), prefixOf(t), lib)
	must(t, e.checkKeys(t, prefixOf(t)))
}

// TestNodeLockfileCommitted: the suite installs exactly what the committed
// lock file pins, so it must list every package at an exact version.
func TestNodeLockfileCommitted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(nodeDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range []string{`"node_modules/redlock"`, `"node_modules/ioredis-lock"`, `"node_modules/ioredis"`,
		`"node_modules/redis-semaphore"`, `"node_modules/@sesamecare-oss/redlock"`,
		`"node_modules/redis"`} {
		if !strings.Contains(string(b), pkg) {
			t.Errorf("package-lock.json does not pin %s", pkg)
		}
	}
}
