package quorum

import (
	"testing"

	"github.com/lockproxy/lockproxy/internal/resp"
)

func TestAuthOfInitCommands(t *testing.T) {
	cmd := func(args ...string) []byte {
		var b [][]byte
		for _, a := range args {
			b = append(b, []byte(a))
		}
		return resp.AppendCommand(nil, b...)
	}
	for _, c := range []struct {
		init       [][]byte
		user, pass string
	}{
		{nil, "", ""},
		{[][]byte{cmd("SCRIPT", "LOAD", "return 1")}, "", ""},
		{[][]byte{cmd("auth", "s3cret")}, "", "s3cret"},
		{[][]byte{cmd("SCRIPT", "LOAD", "x"), cmd("AUTH", "app", "p\r\nw")}, "app", "p\r\nw"},
		{[][]byte{[]byte("*2\r\n$4\r\nAUTH\r\n$99\r\nshort\r\n")}, "", ""},
	} {
		if u, p := authOf(c.init); u != c.user || p != c.pass {
			t.Errorf("authOf(%q) = %q, %q; want %q, %q", c.init, u, p, c.user, c.pass)
		}
	}
}
