package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/redis/go-redis/v9"
)

// TestServerCertificateReload: a certificate renewed on disk is served to
// new connections without a restart; a broken pair is not.
func TestServerCertificateReload(t *testing.T) {
	a, b := newPKI(t), newPKI(t)
	dir := t.TempDir()
	cert, key := dir+"/server.crt", dir+"/server.key"
	install := func(p *pki, mtime time.Time) {
		for _, f := range [][2]string{{p.ServerCert, cert}, {p.ServerKey, key}} {
			data, err := os.ReadFile(f[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f[1], data, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(f[1], mtime, mtime)
		}
	}
	install(a, time.Now().Add(-time.Hour))
	cfg, err := proxy.ServerTLS{CertFile: cert, KeyFile: key}.Config()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tln := tls.NewListener(ln, cfg)
	go func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			go func() { c.(*tls.Conn).Handshake(); c.Close() }()
		}
	}()
	served := func() []byte {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].Raw
	}
	certDER := func(p *pki) []byte {
		c, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
		if err != nil {
			t.Fatal(err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(served(), certDER(a)) {
		t.Fatal("the first certificate is not the one served")
	}
	// A half-written renewal (certificate of b, key of a) keeps a served.
	if err := os.WriteFile(cert, mustRead(t, b.ServerCert), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(cert, time.Now(), time.Now())
	// Files are checked at most once a second: watch for longer than that,
	// so that a reload of the broken pair is attempted.
	for end := time.Now().Add(1200 * time.Millisecond); time.Now().Before(end); {
		if !bytes.Equal(served(), certDER(a)) {
			t.Fatal("a mismatched certificate and key replaced the working pair")
		}
		time.Sleep(20 * time.Millisecond)
	}
	install(b, time.Now().Add(time.Minute))
	waitFor(t, func() bool { return bytes.Equal(served(), certDER(b)) }, "the renewed certificate to be served")
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// TestMasterTLSWithoutClientCertificateSaysSo: a master that requires a
// client certificate (tls-auth-clients yes, Redis's default) and lockproxy
// configured with ca_file alone. With TLS 1.3 the handshake completes on
// lockproxy's side and the master sends its refusal after; INFO quorum
// (and NOQUORUM) showed the write's "connection reset by peer", which does
// not say what to fix. It must say the master wants a certificate.
func TestMasterTLSWithoutClientCertificateSaysSo(t *testing.T) {
	pki := newPKI(t)
	port := freePort(t)
	m, err := redisproc.Start(redisproc.Options{Dir: t.TempDir(), ExtraArgs: []string{
		"--tls-port", port, "--tls-cert-file", pki.ServerCert, "--tls-key-file", pki.ServerKey,
		"--tls-ca-cert-file", pki.CA, "--tls-auth-clients", "yes",
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop() })
	path := writeConfig(t, `listen = "127.0.0.1:0"
metrics_listen = ""
[quorum]
masters = ["127.0.0.1:`+port+`"]
bootstrap = true
probe_interval = "0s"
master_tls = { ca_file = "`+pki.CA+`" }
`)
	p := startRun(t, "-config", path)
	listen, _, _ := p.addrs()
	c := redis.NewClient(&redis.Options{Addr: listen, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	var info string
	waitFor(t, func() bool {
		info, _ = c.Info(ctx, "quorum").Result()
		return strings.Contains(info, "last_error=") && !strings.Contains(info, "last_error=,") && !strings.Contains(info, "last_error=not connected yet")
	}, "the master's error in INFO quorum")
	// Every redial (50ms, 100ms, 200ms… apart) says so: whether the write
	// or the read sees the refusal first varies between them.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		info, _ = c.Info(ctx, "quorum").Result()
		if !strings.Contains(info, "certificate required") {
			t.Fatalf("INFO quorum for a master that requires a client certificate lockproxy lacks:\n%s\nwant its reason (tls: certificate required)", info)
		}
	}
}
