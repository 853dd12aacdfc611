package quorum

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/redis/rueidis"
)

// The monitor's connection to a master: its rueidis client, and decoding
// the marker script's answer.

func (w *watch) newClient() (rueidis.Client, error) {
	c, err := rueidis.NewClient(w.clientOption())
	if c == nil {
		return nil, err
	}
	return c, nil
}

// clientOption is the monitor's connection to the master: database
// MarkerDB, no client-side cache.
func (w *watch) clientOption() rueidis.ClientOption {
	cfg := w.m.e.cfg
	opt := rueidis.ClientOption{
		InitAddress:       []string{w.addr},
		ForceSingleClient: true, // even when the first dial fails: it redials on use
		DisableCache:      true,
		SelectDB:          MarkerDB,
		ClientName:        "lockproxy-monitor",
		Dialer:            net.Dialer{Timeout: checkTimeout, KeepAlive: 15 * time.Second},
		ConnWriteTimeout:  checkTimeout,
		BlockingPoolSize:  1,
	}
	opt.Username, opt.Password = cfg.MasterUsername, cfg.MasterPassword
	if cfg.Dial != nil {
		dial := cfg.Dial
		opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}
	}
	return opt
}

func parseMarkerReply(res []rueidis.RedisMessage) (r markerReply, err error) {
	if len(res) != 7 {
		return r, fmt.Errorf("marker script: %d values, want 7", len(res))
	}
	if r.now, err = res[0].AsInt64(); err != nil {
		return
	}
	if r.state, err = res[1].ToString(); err != nil {
		return
	}
	if r.end, err = res[2].AsInt64(); err != nil {
		return
	}
	if r.start, err = res[3].AsInt64(); err != nil {
		return
	}
	if r.recorded, err = res[4].AsInt64(); err != nil {
		return
	}
	if r.repair, err = res[5].ToString(); err != nil {
		return
	}
	r.cause, err = res[6].ToString()
	return
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
