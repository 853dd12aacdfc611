package batching

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// This file sets a connection up before it carries any Op: dial, AUTH,
// the master's version (CheckVersion), then the Init commands.

// connect dials, authenticates, reads the server's version when
// CheckVersion asks for it, and runs the Init commands, synchronously.
func (p *Pipeline) connect() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), p.opt.DialTimeout)
	defer cancel()
	conn, err := p.opt.Dial(ctx, "tcp", p.opt.Addr)
	if err != nil {
		return nil, err
	}
	auth := resp.AppendAuth(nil, p.opt.Username, p.opt.Password)
	if len(auth) == 0 && p.opt.CheckVersion == nil && len(p.opt.Init) == 0 {
		return conn, nil
	}
	conn.SetDeadline(time.Now().Add(p.opt.DialTimeout))
	if err := p.setUp(conn, auth); err != nil {
		conn.Close()
		return nil, err
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// infoServer is the command a connection's version is read with.
var infoServer = resp.AppendCommandString(nil, "INFO", "server")

// setUp sends AUTH (when auth is not empty) and INFO server (when
// CheckVersion is set) and checks their replies, then the Init commands: a
// master whose version is refused is sent nothing else, no script loaded.
// Without CheckVersion, AUTH and Init go in one write. An error reply
// fails it, naming the command but never the credentials.
func (p *Pipeline) setUp(conn net.Conn, auth []byte) error {
	var cmds [][]byte
	if len(auth) > 0 {
		cmds = append(cmds, auth)
	}
	nAuth := len(cmds)
	if p.opt.CheckVersion != nil {
		cmds = append(cmds, infoServer)
		if err := exchange(conn, cmds, func(i int, r resp.Reply) error {
			if i < nAuth {
				return authReply(r)
			}
			return p.checkVersion(r)
		}); err != nil {
			return err
		}
		cmds, nAuth = nil, 0
	}
	return exchange(conn, append(cmds, p.opt.Init...), func(i int, r resp.Reply) error {
		switch {
		case i < nAuth:
			return authReply(r)
		case r.Type == resp.Error:
			return fmt.Errorf("init command %q failed: %s", firstWords(p.opt.Init[i-nAuth]), r.Str)
		}
		return nil
	})
}

// authReply is AUTH's failure, if r is one.
func authReply(r resp.Reply) error {
	if r.Type == resp.Error {
		return fmt.Errorf("AUTH failed: %s", r.Str)
	}
	return nil
}

// checkVersion reads INFO server's reply r, records the version and asks
// CheckVersion whether this master may be used.
func (p *Pipeline) checkVersion(r resp.Reply) error {
	if r.Type == resp.Error {
		return fmt.Errorf("INFO server failed: %s (lockproxy reads each master's version with it; the master user needs +info)", r.Str)
	}
	if r.Type != resp.Bulk && r.Type != resp.Verbatim {
		return fmt.Errorf("INFO server answered a reply of type %q, not its text", r.Type)
	}
	v, err := ParseServerInfo(string(r.Str))
	if err != nil {
		return err
	}
	p.version.Store(&v)
	return p.opt.CheckVersion(p.opt.Index, v)
}

// exchange writes cmds in one go and reads one reply per command, handing
// each to check in order; check's first error ends it.
func exchange(conn net.Conn, cmds [][]byte, check func(i int, r resp.Reply) error) error {
	if len(cmds) == 0 {
		return nil
	}
	var hs []byte
	for _, c := range cmds {
		hs = append(hs, c...)
	}
	if _, err := conn.Write(hs); err != nil {
		return refusal(conn, err)
	}
	rb := make([]byte, 0, 4096)
	for i := 0; i < len(cmds); {
		r, used, err := resp.Parse(rb)
		if err == resp.ErrIncomplete {
			if len(rb) == cap(rb) {
				rb = append(rb, 0)[:len(rb)]
			}
			m, rerr := conn.Read(rb[len(rb):cap(rb)])
			if rerr != nil {
				return fmt.Errorf("reading init replies: %w", rerr)
			}
			rb = rb[:len(rb)+m]
			continue
		}
		if err != nil {
			return err
		}
		if err := check(i, r); err != nil {
			return err
		}
		rb = rb[used:]
		i++
	}
	return nil
}

// refusal is why the handshake's write failed with err. A master that
// refused the TLS handshake once it had completed on this side (TLS 1.3:
// the master requires a client certificate) sent its reason, an alert,
// before closing; the write sees only the reset, which says nothing of
// what to fix. So the alert is read, briefly, and preferred.
func refusal(conn net.Conn, err error) error {
	conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	var b [64]byte
	_, rerr := conn.Read(b[:])
	var op *net.OpError
	if errors.As(rerr, &op) && op.Op == "remote error" {
		return rerr
	}
	return err
}

// firstWords renders the command name and first argument of an encoded
// command (SCRIPT LOAD), not the rest (a script's body).
func firstWords(cmd []byte) string {
	parts := bytes.Split(cmd, []byte("\r\n"))
	var words []string
	for i := 2; i < len(parts) && len(words) < 2; i += 2 {
		words = append(words, string(parts[i]))
	}
	return fmt.Sprint(words)
}
