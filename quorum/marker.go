package quorum

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// The quarantine monitor's connection to a master's marker: its rueidis
// client, and decoding the marker script's answer.

func (w *watch) newClient() (rueidis.Client, error) {
	cfg := w.m.e.cfg
	opt := rueidis.ClientOption{
		InitAddress:       []string{w.addr},
		ForceSingleClient: true, // even when the first dial fails: it redials on use
		DisableCache:      true,
		SelectDB:          MarkerDB,
		ClientName:        "lockproxy-quarantine",
		Dialer:            net.Dialer{Timeout: checkTimeout, KeepAlive: 15 * time.Second},
		ConnWriteTimeout:  checkTimeout,
		BlockingPoolSize:  1,
	}
	opt.Username, opt.Password = authOf(cfg.Auth)
	if cfg.Dial != nil {
		dial := cfg.Dial
		opt.DialCtxFn = func(ctx context.Context, addr string, _ *net.Dialer, _ *tls.Config) (net.Conn, error) {
			return dial(ctx, "tcp", addr)
		}
	}
	c, err := rueidis.NewClient(opt)
	if c == nil {
		return nil, err
	}
	return c, nil
}

func parseMarkerReply(res []rueidis.RedisMessage) (now int64, state string, end int64, err error) {
	if len(res) != 3 {
		return 0, "", 0, fmt.Errorf("marker script: %d values, want 3", len(res))
	}
	if now, err = res[0].AsInt64(); err != nil {
		return
	}
	if state, err = res[1].ToString(); err != nil {
		return
	}
	end, err = res[2].AsInt64()
	return
}

// authOf finds the user and password of an AUTH command among the
// pipelines' Init commands (RESP-encoded), for the monitor's own client.
func authOf(cmds [][]byte) (user, pass string) {
	for _, c := range cmds {
		args := decodeCommand(c)
		if len(args) < 2 || !strings.EqualFold(args[0], "AUTH") {
			continue
		}
		if len(args) == 3 {
			return args[1], args[2]
		}
		return "", args[1]
	}
	return "", ""
}

// decodeCommand splits a RESP array of bulk strings; nil if malformed.
func decodeCommand(c []byte) []string {
	readLine := func() (string, bool) {
		for i := 0; i+1 < len(c); i++ {
			if c[i] == '\r' && c[i+1] == '\n' {
				l := string(c[:i])
				c = c[i+2:]
				return l, true
			}
		}
		return "", false
	}
	h, ok := readLine()
	if !ok || len(h) < 2 || h[0] != '*' {
		return nil
	}
	n, err := strconv.Atoi(h[1:])
	if err != nil || n < 0 || n > 16 {
		return nil
	}
	var args []string
	for j := 0; j < n; j++ {
		h, ok := readLine()
		if !ok || len(h) < 2 || h[0] != '$' {
			return nil
		}
		l, err := strconv.Atoi(h[1:])
		if err != nil || l < 0 || l+2 > len(c) {
			return nil
		}
		args = append(args, string(c[:l]))
		c = c[l+2:]
	}
	return args
}

func absDuration(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}
