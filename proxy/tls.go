package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"
)

// TLS and credentials of lockproxy's connections: the TLS listener clients
// connect to, and the TLS dialer and AUTH command for the masters.

// FileError is a certificate or key file that could not be used; Field is
// the option that named it ("cert_file", "ca_file"…), so that the caller can
// point at its line in the configuration.
type FileError struct {
	Field, Path string
	Err         error
}

func (e *FileError) Error() string { return e.Field + " " + e.Path + ": " + e.Err.Error() }
func (e *FileError) Unwrap() error { return e.Err }

// ServerTLS configures the client-facing TLS listener.
type ServerTLS struct {
	// CertFile and KeyFile are the PEM certificate (chain) and key that
	// lockproxy presents. Required. They are read again when they change on
	// disk (checked at most once a second, at a handshake), so a renewed
	// certificate is served without a restart.
	CertFile, KeyFile string
	// CAFile, when set, makes clients present a certificate signed by one
	// of these PEM CAs (mutual TLS); "" asks for no client certificate.
	CAFile string
}

// Config returns the tls.Config for tls.NewListener, after loading every
// file once so that a bad file fails the start.
func (t ServerTLS) Config() (*tls.Config, error) {
	if t.CertFile == "" || t.KeyFile == "" {
		return nil, &FileError{Field: "cert_file", Path: `""`, Err: errors.New("a TLS listener needs both a certificate and a key file")}
	}
	r := &certReloader{certFile: t.CertFile, keyFile: t.KeyFile}
	if err := r.load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}
	if t.CAFile != "" {
		pool, err := loadPool("ca_file", t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// certReloader serves a certificate pair and reloads it when either file's
// modification time changes.
type certReloader struct {
	certFile, keyFile string

	mu      sync.Mutex // protects the fields below
	cert    *tls.Certificate
	mtimes  [2]time.Time
	checked time.Time
}

func (r *certReloader) load() error {
	var mt [2]time.Time
	for i, f := range [2]struct{ field, path string }{{"cert_file", r.certFile}, {"key_file", r.keyFile}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			return &FileError{Field: f.field, Path: f.path, Err: err}
		}
		mt[i] = fi.ModTime()
	}
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return &FileError{Field: "cert_file", Path: r.certFile, Err: fmt.Errorf("with key_file %s: %w", r.keyFile, err)}
	}
	r.mu.Lock()
	r.cert, r.mtimes, r.checked = &cert, mt, time.Now()
	r.mu.Unlock()
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	cert, stale := r.cert, time.Since(r.checked) >= time.Second
	if stale {
		r.checked = time.Now()
	}
	mt := r.mtimes
	r.mu.Unlock()
	if !stale {
		return cert, nil
	}
	changed := false
	for i, f := range [2]string{r.certFile, r.keyFile} {
		if fi, err := os.Stat(f); err == nil && !fi.ModTime().Equal(mt[i]) {
			changed = true
		}
	}
	if changed {
		// A half-written pair fails to load: keep serving the old one
		// and try again at a later handshake.
		if err := r.load(); err == nil {
			r.mu.Lock()
			cert = r.cert
			r.mu.Unlock()
		}
	}
	return cert, nil
}

// MasterTLS configures TLS towards the masters.
type MasterTLS struct {
	// CAFile verifies the masters' certificates; "" uses the system's CAs.
	CAFile string
	// CertFile and KeyFile are a client certificate for masters that ask
	// for one (redis tls-auth-clients yes); "" presents none.
	CertFile, KeyFile string
	// ServerName is the name the masters' certificates must carry; "" uses
	// the host of each master's address (an IP address is checked against
	// the certificate's IP SANs).
	ServerName string
	// InsecureSkipVerify accepts any certificate: encryption without
	// authentication of the masters. For tests only.
	InsecureSkipVerify bool
}

// DialFunc connects to a master (quorum.Config.Dial).
type DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

// Dialer returns a quorum.Config.Dial that connects with TLS and finishes
// the handshake within the dial's deadline.
func (t MasterTLS) Dialer() (DialFunc, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
	if t.CAFile != "" {
		pool, err := loadPool("ca_file", t.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case t.CertFile != "" && t.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, &FileError{Field: "cert_file", Path: t.CertFile, Err: fmt.Errorf("with key_file %s: %w", t.KeyFile, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	case t.CertFile != "":
		return nil, &FileError{Field: "key_file", Path: `""`, Err: errors.New("cert_file is set: the client certificate needs its key_file too")}
	case t.KeyFile != "":
		return nil, &FileError{Field: "cert_file", Path: `""`, Err: errors.New("key_file is set: the client key needs its cert_file too")}
	}
	d := &tls.Dialer{NetDialer: &net.Dialer{KeepAlive: 15 * time.Second}, Config: cfg}
	return d.DialContext, nil
}

func loadPool(field, path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, &FileError{Field: field, Path: path, Err: err}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, &FileError{Field: field, Path: path, Err: errors.New("no PEM certificate in it")}
	}
	return pool, nil
}
