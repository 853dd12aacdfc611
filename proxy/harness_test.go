package proxy_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/proxy/pubsub"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// cluster is n real masters with a lockproxy in front, all started by the
// test and stopped by its cleanup.
type cluster struct {
	t          testing.TB
	masters    []*redisproc.Server
	engine     *quorum.Engine
	srv        *proxy.Server
	addr       string
	clientTLS  *tls.Config // the clients' side of a TLS listener; nil: plain TCP
	quarantine bool        // the engine runs the restart quarantine
	hub        *pubsub.Hub // withHub
	info       *redis.Client
}

type clusterOpt func(*proxy.Config, *quorum.Config)

// startCluster starts n masters and a lockproxy serving plain TCP, on the
// engine's event loop.
func startCluster(t testing.TB, n int, opts ...clusterOpt) *cluster {
	t.Helper()
	return startClusterWith(t, n, false, opts...)
}

// startClusterTLS is startCluster with a TLS listener: its clients are
// served by redcon, a goroutine each.
func startClusterTLS(t testing.TB, n int, opts ...clusterOpt) *cluster {
	t.Helper()
	return startClusterWith(t, n, true, opts...)
}

// transports runs f on each client transport: plain TCP on the event loop,
// and TLS through redcon.
func transports(t *testing.T, f func(t *testing.T, start func(t testing.TB, n int, opts ...clusterOpt) *cluster)) {
	t.Run("loop", func(t *testing.T) { f(t, startCluster) })
	t.Run("tls", func(t *testing.T) { f(t, startClusterTLS) })
}

func startClusterWith(t testing.TB, n int, useTLS bool, opts ...clusterOpt) *cluster {
	t.Helper()
	c := startFront(t, redisproc.ForTest(t, n), useTLS, opts...)
	c.waitUp(n)
	if !c.quarantine {
		// Votes count once each master's eviction policy was read.
		c.waitVoting(n)
	}
	return c
}

// startFront starts a lockproxy in this process in front of masters that
// the test started (several lockproxies may share them) and stops it with
// the test. It does not wait for the masters.
func startFront(t testing.TB, masters []*redisproc.Server, useTLS bool, opts ...clusterOpt) *cluster {
	t.Helper()
	c := &cluster{t: t, masters: masters}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	cat, err := catalog.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	bodies := cat.MasterScripts()
	// 250ms, not the 50ms default: the suite runs under -race on a loaded
	// 2-core CI machine, and these tests check outcomes, not speed (tests
	// of timing set their own node_timeout).
	qc := quorum.Config{NodeTimeout: 250 * time.Millisecond, MaxTTL: time.Minute, Scripts: bodies, Logger: logger}
	for _, m := range c.masters {
		qc.Masters = append(qc.Masters, m.Addr)
	}
	pc := proxy.Config{Catalog: cat, Logger: logger, Version: "test"}
	for _, o := range opts {
		o(&pc, &qc)
	}
	c.engine, err = quorum.New(qc)
	if err != nil {
		t.Fatal(err)
	}
	pc.Engine = c.engine
	c.wireHub(&pc)
	c.srv, err = proxy.New(pc)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c.addr = ln.Addr().String()
	if useTLS {
		cert, pool := testCertificate(t)
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}})
		c.clientTLS = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
	}
	served := make(chan struct{})
	go func() { c.srv.Serve(ln); close(served) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c.srv.Shutdown(ctx)
		<-served
		c.engine.Close()
	})
	c.quarantine = qc.Quarantine
	return c
}

// waitUp polls until up masters are connected.
func (c *cluster) waitUp(up int) {
	c.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := 0
		for _, m := range c.engine.Masters() {
			if m.Up {
				n++
			}
		}
		if n >= up {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	c.t.Fatalf("masters not connected within 10s: %+v", c.engine.Masters())
}

func (c *cluster) client(opts ...func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: c.addr, Protocol: 2, MaxRetries: -1, DisableIdentity: true, TLSConfig: c.clientTLS}
	for _, f := range opts {
		f(o)
	}
	cl := redis.NewClient(o)
	c.t.Cleanup(func() { cl.Close() })
	return cl
}

// onMasters returns GET key on each master ("(nil)" when missing).
func (c *cluster) onMasters(key string) []string {
	c.t.Helper()
	out := make([]string, len(c.masters))
	for i, m := range c.masters {
		v, err := m.Do("GET", key)
		if err != nil {
			c.t.Fatalf("GET %s on master %d: %v", key, i, err)
		}
		out[i] = v
	}
	return out
}

func count(vals []string, v string) int {
	n := 0
	for _, x := range vals {
		if x == v {
			n++
		}
	}
	return n
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// dial opens a raw client connection, with TLS when the cluster serves it.
func (c *cluster) dial() net.Conn {
	c.t.Helper()
	conn, err := c.tryDial()
	if err != nil {
		c.t.Fatal(err)
	}
	return conn
}

// tryDial is dial answering its error.
func (c *cluster) tryDial() (net.Conn, error) {
	conn, err := net.Dial("tcp", c.addr)
	if err != nil {
		return nil, err
	}
	if c.clientTLS != nil {
		tc := tls.Client(conn, c.clientTLS)
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		if err := tc.Handshake(); err != nil {
			conn.Close()
			return nil, err
		}
		tc.SetDeadline(time.Time{})
		return tc, nil
	}
	return conn, nil
}

// tcpOf is the TCP connection under conn (plain or TLS).
func tcpOf(conn net.Conn) *net.TCPConn {
	if tc, ok := conn.(*tls.Conn); ok {
		return tc.NetConn().(*net.TCPConn)
	}
	return conn.(*net.TCPConn)
}

// exchange writes in on a fresh connection and reads until the server
// closes it or wait passes; closed reports which.
func (c *cluster) exchange(in string, wait time.Duration) (out string, closed bool) {
	c.t.Helper()
	conn := c.dial()
	defer conn.Close()
	return exchangeOn(c.t, conn, in, wait)
}

func exchangeOn(t testing.TB, conn net.Conn, in string, wait time.Duration) (out string, closed bool) {
	t.Helper()
	if _, err := conn.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(wait))
	b, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return string(b), false
	}
	return string(b), true
}

var (
	certOnce sync.Once
	certPair tls.Certificate
	certPool *x509.CertPool
	certErr  error
)

// testCertificate is a self-signed certificate for 127.0.0.1, made once.
func testCertificate(t testing.TB) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	certOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			certErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "lockproxy test"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			certErr = err
			return
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			certErr = err
			return
		}
		certPair = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
		certPool = x509.NewCertPool()
		certPool.AddCert(leaf)
	})
	if certErr != nil {
		t.Fatal(certErr)
	}
	return certPair, certPool
}

// expect writes in on a fresh connection and reads at least n bytes, or
// until the server closes it or wait passes. closed says whether the
// server closed it: after n bytes, a connection still open 50ms later is
// taken as open.
func (c *cluster) expect(in string, n int, wait time.Duration) (out string, closed bool) {
	c.t.Helper()
	conn := c.dial()
	defer conn.Close()
	if _, err := conn.Write([]byte(in)); err != nil {
		c.t.Fatal(err)
	}
	var b []byte
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(wait)
	for {
		if soon := time.Now().Add(50 * time.Millisecond); len(b) >= n && soon.Before(deadline) {
			deadline = soon
		}
		conn.SetReadDeadline(deadline)
		k, err := conn.Read(buf)
		b = append(b, buf[:k]...)
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return string(b), false
		case err != nil:
			return string(b), true
		}
	}
}
