package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
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
	if _, err := conn.Write(appendCommand(nil, args)); err != nil {
		return "", fmt.Errorf("redisproc: %s %s: %w", s.Addr, args[0], err)
	}
	reply, err := readReply(bufio.NewReader(conn))
	if err != nil {
		var re ReplyError
		if errors.As(err, &re) {
			return "", re
		}
		return "", fmt.Errorf("redisproc: %s %s: %w", s.Addr, args[0], err)
	}
	return reply, nil
}

// appendCommand encodes args as a RESP array of bulk strings.
func appendCommand(b []byte, args []string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	return b
}

// readReply reads one RESP2 reply and renders it as Do documents. An error
// reply nested in an array (EXEC) fails the whole reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return "", errors.New("malformed reply: empty line")
	}
	kind, rest := line[0], line[1:]
	switch kind {
	case '+', ':':
		return rest, nil
	case '-':
		return "", ReplyError(rest)
	case '$':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("malformed bulk length %q", rest)
		}
		if n < 0 {
			return "(nil)", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(rest)
		if err != nil {
			return "", fmt.Errorf("malformed array length %q", rest)
		}
		if n < 0 {
			return "(nil)", nil
		}
		parts := make([]string, n)
		for i := range parts {
			if parts[i], err = readReply(r); err != nil {
				return "", err
			}
		}
		return strings.Join(parts, " "), nil
	default:
		return "", fmt.Errorf("unsupported reply type %q", kind)
	}
}
