package redisproc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/lockproxy/lockproxy/internal/resp"
)

// doTimeout bounds one Do call: dial, write and read together.
const doTimeout = time.Second

// ReplyError is an error reply of the server ("-ERR ..."), as opposed to a
// network failure. Its text is the reply without the leading '-'.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Do sends one command over a fresh TCP connection and returns the reply as
// text: a status or bulk string as is, an integer in decimal, a nil reply as
// "(nil)", an array as its elements joined by spaces. An error reply is
// returned as a ReplyError; a network failure, including the 1s deadline
// (errors.Is(err, os.ErrDeadlineExceeded)), as a wrapped net error.
//
// Do is for checks in tests, not for load: it dials for every call.
func (s *Server) Do(args ...string) (string, error) {
	return s.do(doTimeout, args)
}

// do is Do with its deadline as a parameter.
func (s *Server) do(timeout time.Duration, args []string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redisproc: Do needs a command")
	}
	deadline := time.Now().Add(timeout)
	conn, err := net.DialTimeout("tcp", s.Addr, timeout)
	if err != nil {
		return "", fmt.Errorf("redisproc: %s: %w", s.Addr, err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(deadline); err != nil {
		return "", fmt.Errorf("redisproc: %s: %w", s.Addr, err)
	}
	if _, err := conn.Write(resp.AppendCommandString(nil, args...)); err != nil {
		return "", fmt.Errorf("redisproc: %s %s: %w", s.Addr, args[0], err)
	}
	reply, err := readReply(conn)
	if err != nil {
		var re ReplyError
		if errors.As(err, &re) {
			return "", re
		}
		return "", fmt.Errorf("redisproc: %s %s: %w", s.Addr, args[0], err)
	}
	return reply, nil
}

// readReply reads one RESP2 reply and renders it as Do documents. An error
// reply nested in an array (EXEC) fails the whole reply.
func readReply(r io.Reader) (string, error) {
	rep, err := resp.NewReader(r, 4096).Next()
	if err != nil {
		return "", err
	}
	return render(rep)
}

func render(r resp.Reply) (string, error) {
	switch r.Type {
	case resp.Status, resp.Bulk:
		return string(r.Str), nil
	case resp.Integer:
		return strconv.FormatInt(r.Int, 10), nil
	case resp.Error:
		return "", ReplyError(r.Str)
	case resp.Nil:
		return "(nil)", nil
	}
	parts := make([]string, len(r.Elems))
	for i, e := range r.Elems {
		var err error
		if parts[i], err = render(e); err != nil {
			return "", err
		}
	}
	return strings.Join(parts, " "), nil
}
