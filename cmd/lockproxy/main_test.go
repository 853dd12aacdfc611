package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/redis/go-redis/v9"
)

func TestVersion(t *testing.T) {
	code, stdout, _ := runOnce(t, "-version")
	if code != 0 || !strings.HasPrefix(stdout, "lockproxy "+version+" commit ") {
		t.Fatalf("-version: exit %d, stdout %q", code, stdout)
	}
	// -h asks for the usage: no usage error (docs/operations.md, exit status).
	if code, _, stderr := runOnce(t, "-h"); code != 0 || !strings.Contains(stderr, "-config") {
		t.Fatalf("-h: exit %d, stderr %q; want 0 and the flags", code, stderr)
	}
	if code, _, stderr := runOnce(t, "-no-such-flag"); code != 2 || !strings.Contains(stderr, "-no-such-flag") {
		t.Fatalf("unknown flag: exit %d, stderr %q", code, stderr)
	}
}

// TestBinary builds lockproxy as make build does (the commit injected
// with -ldflags, since GOFLAGS may turn buildvcs off) and checks what a
// person sees: -version, and a bad config's exit status and message.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "lockproxy")
	build := exec.Command("go", "build", "-ldflags", "-X main.commit=0123abcd -X main.version=9.9.9", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "-version").Output()
	if err != nil || !strings.HasPrefix(string(out), "lockproxy 9.9.9 commit 0123abcd ") {
		t.Fatalf("-version: %v %q", err, out)
	}
	path := writeConfig(t, "[quorum]\nmasters = [\"127.0.0.1:7001\"]\nnode_timeout = \"5s\"\nmax_ttl = \"1s\"\n")
	cmd := exec.Command(bin, "-config", path)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("bad config: want exit status 2, got %v", err)
	}
	if want := path + ":3: quorum.node_timeout (5s) must be smaller than quorum.max_ttl (1s"; !strings.Contains(stderr.String(), want) {
		t.Fatalf("stderr %q lacks %q", stderr.String(), want)
	}
}

// TestRequirePassFromEnvironment: LOCKPROXY_REQUIREPASS overrides
// requirepass, and the password appears in no log line.
func TestRequirePassFromEnvironment(t *testing.T) {
	m := redisproc.ForTest(t, 1)
	t.Setenv(envRequirePass, "from-env-secret")
	path := writeConfig(t, "listen = \"127.0.0.1:0\"\nmetrics_listen = \"\"\nrequirepass = \"from-file\"\n[quorum]\nmasters = [\""+m[0].Addr+"\"]\nbootstrap = true\nprobe_interval = \"0s\"\n")
	p := startRun(t, "-config", path)
	listen, _, metricsAddr := p.addrs()
	if metricsAddr != "off" {
		t.Errorf(`metrics_listen = "" should turn metrics off, got %s`, metricsAddr)
	}
	ctx := context.Background()
	none := redis.NewClient(&redis.Options{Addr: listen, Protocol: 2, MaxRetries: -1})
	defer none.Close()
	if err := none.Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("without a password: want NOAUTH, got %v", err)
	}
	file := redis.NewClient(&redis.Options{Addr: listen, Password: "from-file", MaxRetries: -1})
	defer file.Close()
	if err := file.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("the file's password, overridden: want WRONGPASS, got %v", err)
	}
	env := redis.NewClient(&redis.Options{Addr: listen, Password: "from-env-secret", MaxRetries: -1})
	defer env.Close()
	if err := env.Ping(ctx).Err(); err != nil {
		t.Fatalf("the environment's password: %v", err)
	}
	if code := p.stop(); code != 0 {
		t.Fatalf("exit status %d after the signal, want 0", code)
	}
	if strings.Contains(p.out.String(), "from-env-secret") || strings.Contains(p.out.String(), "from-file") {
		t.Fatalf("a password was logged:\n%s", p.out.String())
	}
}

// TestLogFlags: -log-format json gives one JSON object per line with the
// start-up summary; -log-level warn hides it.
func TestLogFlags(t *testing.T) {
	cfg := writeConfig(t, "listen = \"127.0.0.1:0\"\nmetrics_listen = \"\"\n[quorum]\nmasters = [\"127.0.0.1:1\"]\nprobe_interval = \"0s\"\n")
	p := startRun(t, "-config", cfg, "-log-format", "json")
	waitFor(t, func() bool { return strings.Contains(p.out.String(), `"msg":"lockproxy started"`) }, "a JSON start-up line")
	p.stop()
	sc := bufio.NewScanner(strings.NewReader(p.out.String()))
	for sc.Scan() {
		var rec map[string]any
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		if rec["msg"] == "lockproxy started" {
			for _, k := range []string{"version", "commit", "listen", "masters", "n", "q", "node_timeout", "max_ttl", "config"} {
				if _, ok := rec[k]; !ok {
					t.Errorf("start-up line lacks %q: %v", k, rec)
				}
			}
		}
	}
	bad := writeConfig(t, "lisen = \"x\"\n")
	code, _, stderr := runOnce(t, "-config", bad, "-log-format", "json")
	var rec map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &rec); code != 2 || err != nil || !strings.Contains(fmt.Sprint(rec["msg"]), bad+":1: unknown key") {
		t.Fatalf("config error with -log-format json: exit %d, %q", code, stderr)
	}

	q := startRun(t, "-config", cfg, "-log-level", "warn", "-listen", "127.0.0.1:0")
	time.Sleep(50 * time.Millisecond) // nothing to poll for: the line must not come
	q.stop()
	if strings.Contains(q.out.String(), "lockproxy started") {
		t.Fatalf("-log-level warn printed an info line:\n%s", q.out.String())
	}
}

// TestTLSEndToEnd: masters that speak only TLS, require a client
// certificate and an ACL user's password; lockproxy in front of them with a
// TLS listener that requires client certificates and a password; redis-cli
// --tls as the client. Then the same masters with a wrong password: down,
// with WRONGPASS in INFO quorum, and NOQUORUM for the client.
func TestTLSEndToEnd(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (apt-get install -y redis-tools): %v", err)
	}
	pki := newPKI(t)
	const (
		masterPass = "master-secret"
		clientPass = "client-secret"
	)
	var tlsAddrs []string
	var masters []*redisproc.Server
	for range 3 {
		port := freePort(t)
		m, err := redisproc.Start(redisproc.Options{Dir: t.TempDir(), ExtraArgs: []string{
			"--tls-port", port, "--tls-cert-file", pki.ServerCert, "--tls-key-file", pki.ServerKey,
			"--tls-ca-cert-file", pki.CA, "--tls-auth-clients", "yes",
			"--user", "default", "off",
			"--user", "lockproxy", "on", ">" + masterPass, "~*", "&*", "+@all",
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Stop() })
		masters = append(masters, m)
		tlsAddrs = append(tlsAddrs, "127.0.0.1:"+port)
	}
	config := `listen = "127.0.0.1:0"
tls_listen = "127.0.0.1:0"
tls_cert_file = "` + pki.ServerCert + `"
tls_key_file = "` + pki.ServerKey + `"
tls_ca_file = "` + pki.CA + `"
metrics_listen = "127.0.0.1:0"
requirepass = "` + clientPass + `"
[quorum]
masters = ` + tomlList(tlsAddrs) + `
master_username = "lockproxy"
node_timeout = "1s"               # a loaded test machine must not turn into NOQUORUM
bootstrap = true
probe_interval = "50ms"
master_tls = { ca_file = "` + pki.CA + `", cert_file = "` + pki.ClientCert + `", key_file = "` + pki.ClientKey + `" }
`
	path := writeConfig(t, config)
	t.Setenv(envMasterPassword, masterPass)
	p := startRun(t, "-config", path)
	listen, tlsListen, metricsAddr := p.addrs()
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: listen, Password: clientPass, Protocol: 3, MaxRetries: -1})
	defer plain.Close()
	waitFor(t, func() bool {
		q, _ := plain.Info(ctx, "quorum").Result()
		return strings.Contains(q, "masters_up:3") && strings.Contains(q, "quorum_available:1") && strings.Count(q, "latency_ms=0.") == 3
	}, "3 TLS masters up and counting, with probe latencies, in INFO quorum")

	_, tlsPort, _ := strings.Cut(tlsListen, ":")
	redisCLI := func(withCert bool, args ...string) (string, error) {
		base := []string{"--tls", "--cacert", pki.CA, "-h", "127.0.0.1", "-p", tlsPort, "--user", "default", "--pass", clientPass, "--no-auth-warning"}
		if withCert {
			base = append(base, "--cert", pki.ClientCert, "--key", pki.ClientKey)
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, cli, append(base, args...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if out, err := redisCLI(true, "SET", "tls:lock", "tok", "NX", "PX", "10000"); err != nil || out != "OK" {
		t.Fatalf("redis-cli --tls SET NX: %v %q", err, out)
	}
	if out, err := redisCLI(true, "SET", "tls:lock", "other", "NX", "PX", "10000"); err != nil || out != "" {
		t.Fatalf("redis-cli --tls contended SET NX: %v %q, want nil (empty)", err, out)
	}
	if out, err := redisCLI(true, "GET", "tls:lock"); err != nil || out != "tok" {
		t.Fatalf("redis-cli --tls GET: %v %q", err, out)
	}
	if out, _ := redisCLI(false, "PING"); out == "PONG" {
		t.Fatalf("a TLS client without a certificate was served, though tls_ca_file asks for one")
	}

	// The lock is on every master, which lockproxy reached over TLS as the
	// ACL user.
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(pki.CA)
	pool.AppendCertsFromPEM(caPEM)
	clientCert, err := tls.LoadX509KeyPair(pki.ClientCert, pki.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	for i, addr := range tlsAddrs {
		m := redis.NewClient(&redis.Options{Addr: addr, Username: "lockproxy", Password: masterPass, MaxRetries: -1,
			TLSConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{clientCert}}})
		waitFor(t, func() bool { v, _ := m.Get(ctx, "tls:lock").Result(); return v == "tok" }, "the token on master "+addr)
		m.Close()
		if v, err := masters[i].Do("GET", "tls:lock"); err == nil {
			t.Fatalf("master %d answered a plain, unauthenticated GET (%q): the test's masters are not locked down", i, v)
		}
	}

	// /metrics over HTTP, in Prometheus text format with TYPE lines.
	resp, err := http.Get("http://" + metricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		"# TYPE lockproxy_quorum_decision_seconds histogram",
		`lockproxy_quorum_decision_seconds_bucket{op="acquire",le="0.001"} `,
		`lockproxy_requests_total{op="acquire",outcome="acquired"} 1`,
		`lockproxy_requests_total{op="acquire",outcome="contended"} 1`,
		`lockproxy_master_state{master="` + tlsAddrs[0] + `",state="up"} 1`,
		`lockproxy_master_latency_seconds_bucket{master="` + tlsAddrs[0] + `",le="0.001"} `,
		`lockproxy_build_info{version="` + version + `",commit="`,
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if code := p.stop(); code != 0 {
		t.Fatalf("exit status %d after the signal, want 0", code)
	}

	// A wrong master password: the masters stay down, INFO says why, and
	// clients get NOQUORUM, never a lock.
	t.Setenv(envMasterPassword, "wrong-password")
	p2 := startRun(t, "-config", path)
	listen, _, _ = p2.addrs()
	plain2 := redis.NewClient(&redis.Options{Addr: listen, Password: clientPass, MaxRetries: -1})
	defer plain2.Close()
	waitFor(t, func() bool {
		q, _ := plain2.Info(ctx, "quorum").Result()
		return strings.Count(q, "WRONGPASS") == 3 && strings.Contains(q, "masters_down:3")
	}, "WRONGPASS for every master in INFO quorum")
	if _, err := plain2.SetNX(ctx, "tls:other", "t", 10*time.Second).Result(); err == nil || !strings.HasPrefix(err.Error(), "NOQUORUM") {
		t.Fatalf("with a wrong master password: want NOQUORUM, got %v", err)
	}
	p2.stop()
	for _, secret := range []string{masterPass, "wrong-password", clientPass} {
		if strings.Contains(p.out.String()+p2.out.String(), secret) {
			t.Fatalf("the secret %q was logged", secret)
		}
	}
}
