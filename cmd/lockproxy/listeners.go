package main

import (
	"fmt"
	"net"
)

// listeners are the sockets lockproxy serves on; nil where the config
// turns one off.
type listeners struct {
	plain, tls, metrics net.Listener
	open                []net.Listener // every one opened, to close
}

// openListeners binds every address the config names, so that an unusable
// one fails the start before any master is dialled. On error, the ones
// already open are in the result, for close.
func openListeners(cfg *fileConfig) (*listeners, error) {
	l := &listeners{}
	listen := func(key, addr string) (net.Listener, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("config: %s: %s %q cannot be used: %v", cfg.src.at(key), key, addr, err)
		}
		l.open = append(l.open, ln)
		return ln, nil
	}
	var err error
	if cfg.Listen != "" {
		if l.plain, err = listen("listen", cfg.Listen); err != nil {
			return l, err
		}
	}
	if cfg.TLSListen != "" {
		if l.tls, err = listen("tls_listen", cfg.TLSListen); err != nil {
			return l, err
		}
	}
	if cfg.MetricsListen != nil && *cfg.MetricsListen != "" {
		if l.metrics, err = listen("metrics_listen", *cfg.MetricsListen); err != nil {
			return l, err
		}
	}
	return l, nil
}

// close closes every listener opened (closing one already closed by a
// shutdown is harmless).
func (l *listeners) close() {
	for _, ln := range l.open {
		ln.Close()
	}
}

func addrOf(ln net.Listener) string {
	if ln == nil {
		return "off"
	}
	return ln.Addr().String()
}
