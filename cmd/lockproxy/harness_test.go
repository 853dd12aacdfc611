package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockproxy runs run() in-process, as the binary would, with its output
// captured.
type lockproxy struct {
	t      *testing.T
	cancel context.CancelFunc
	done   chan int
	out    *syncBuffer
	stdout *syncBuffer
	code   int
	exited bool
}

// syncBuffer is a bytes.Buffer written by the server's goroutines and read
// by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRun starts run(args) and stops it when the test ends.
func startRun(t *testing.T, args ...string) *lockproxy {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &lockproxy{t: t, cancel: cancel, done: make(chan int, 1), out: &syncBuffer{}, stdout: &syncBuffer{}}
	go func() { p.done <- run(ctx, args, p.stdout, p.out) }()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("lockproxy output:\n%s", p.out.String())
		}
	})
	return p
}

// runOnce runs run(args) to completion: for flags and configurations that
// make it exit at once.
func runOnce(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	code = run(ctx, args, &o, &e)
	return code, o.String(), e.String()
}

// stop cancels the run (as SIGTERM does) and returns its exit code.
func (p *lockproxy) stop() int {
	if !p.exited {
		p.cancel()
		select {
		case p.code = <-p.done:
		case <-time.After(10 * time.Second):
			p.t.Fatalf("lockproxy did not stop within 10s of its signal")
		}
		p.exited = true
	}
	return p.code
}

var startedLine = regexp.MustCompile(`msg="lockproxy started".* listen=(\S+) tls_listen=(\S+) metrics=(\S+)`)

// addrs waits for the start-up line and returns the listen, TLS and
// metrics addresses ("off" when not listening).
func (p *lockproxy) addrs() (listen, tlsListen, metricsAddr string) {
	p.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := startedLine.FindStringSubmatch(p.out.String()); m != nil {
			return m[1], m[2], m[3]
		}
		select {
		case code := <-p.done:
			p.code, p.exited = code, true
			p.t.Fatalf("lockproxy exited with %d before it started:\n%s", code, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no start-up line within 10s:\n%s", p.out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// writeConfig writes a config file into a temporary directory.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "lockproxy.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// waitFor polls cond until it holds or 10s pass.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// freePort returns a port free on 127.0.0.1 right now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

// pki is a throw-away certificate authority with a server certificate for
// 127.0.0.1/localhost and a client certificate, as PEM files.
type pki struct {
	CA, ServerCert, ServerKey, ClientCert, ClientKey string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	caKey := newKey(t)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lockproxy test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	p := &pki{CA: filepath.Join(dir, "ca.crt")}
	writePEM(t, p.CA, "CERTIFICATE", caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (certFile, keyFile string) {
		key := newKey(t)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: name},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     []string{"localhost"},
			IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
		writePEM(t, certFile, "CERTIFICATE", der)
		writePEM(t, keyFile, "PRIVATE KEY", keyDER)
		return certFile, keyFile
	}
	p.ServerCert, p.ServerKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.ClientCert, p.ClientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// tomlList renders strings as a TOML array.
func tomlList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = `"` + s + `"`
	}
	return "[" + strings.Join(q, ", ") + "]"
}
