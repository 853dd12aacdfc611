package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"

	"github.com/lockproxy/lockproxy/proxy"
)

// tlsMaterial is what the TLS options load: the masters' dialer (nil:
// plain TCP) and the clients' server config (nil: no TLS listener).
type tlsMaterial struct {
	masterDial proxy.DialFunc
	clientTLS  *tls.Config
}

// loadTLS reads every certificate and key the config names; an error
// names the option's line.
func loadTLS(cfg *fileConfig) (tm tlsMaterial, err error) {
	if t := cfg.Quorum.MasterTLS; t != nil {
		tm.masterDial, err = proxy.MasterTLS{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
			ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}.Dialer()
		if err != nil {
			return tm, fmt.Errorf("config: %s: quorum.master_tls.%v", fileErrorAt(cfg.src, "quorum.master_tls.", err), err)
		}
	}
	if cfg.TLSListen != "" {
		tm.clientTLS, err = proxy.ServerTLS{CertFile: cfg.TLSCertFile, KeyFile: cfg.TLSKeyFile, CAFile: cfg.TLSCAFile}.Config()
		if err != nil {
			return tm, fmt.Errorf("config: %s: tls_%v", fileErrorAt(cfg.src, "tls_", err), err)
		}
	}
	return tm, nil
}

// fileErrorAt names the line of the option a proxy.FileError is about.
func fileErrorAt(src *source, prefix string, err error) string {
	var fe *proxy.FileError
	if errors.As(err, &fe) {
		return src.at(prefix + fe.Field)
	}
	return src.at(strings.TrimSuffix(prefix, "."))
}
