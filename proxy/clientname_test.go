package proxy_test

import (
	"strings"
	"testing"
)

// TestClientNamesRefusedAsRedis: a client name, lib-name or lib-ver with a
// space, a newline or any byte outside printable ASCII is refused with
// Redis's text, by CLIENT SETNAME, HELLO … SETNAME and CLIENT SETINFO, so
// that nobody can add fields to another's CLIENT INFO line. SETNAME and
// HELLO are compared with a real redis-server (7.0 has no SETINFO: its
// text is copied from networking.c, clientSetinfoCommand).
func TestClientNamesRefusedAsRedis(t *testing.T) {
	c := startCluster(t, 1)
	proxyConn := dialRaw(t, c.addr)
	redisConn := dialRaw(t, c.masters[0].Addr)
	const nameErr = "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
	bad := []string{"a b", "x\nid=1 name=admin", "a\r\nb", "tab\there", "nul\x00", "del\x7f", "caf\xc3\xa9"}
	for _, name := range bad {
		for _, cmd := range [][]string{
			{"CLIENT", "SETNAME", name},
			{"HELLO", "2", "SETNAME", name},
			{"HELLO", "3", "setname", name},
		} {
			got := proxyConn.do(cmd...)
			if got != nameErr {
				t.Errorf("%q through lockproxy = %q, want %q", cmd, got, nameErr)
			}
			if want := redisConn.do(cmd...); got != want {
				t.Errorf("%q: lockproxy answers %q, Redis %q", cmd, got, want)
			}
		}
		for _, attr := range []string{"lib-name", "LIB-VER"} {
			want := "-ERR " + attr + " cannot contain spaces, newlines or special characters.\r\n"
			if got := proxyConn.do("CLIENT", "SETINFO", attr, name); got != want {
				t.Errorf("CLIENT SETINFO %s %q = %q, want %q", attr, name, got, want)
			}
		}
	}
	// Nothing of the refused values was kept.
	if got := proxyConn.do("CLIENT", "GETNAME"); got != "$-1\r\n" {
		t.Errorf("CLIENT GETNAME after refused names = %q, want nil", got)
	}
	info := proxyConn.do("CLIENT", "INFO")
	if strings.Contains(info, "admin") || strings.Count(info, "=") != 7 {
		t.Errorf("CLIENT INFO after refused names = %q, want 7 fields and no injected one", info)
	}
}

// TestClientNamesBounded: a client name, lib-name or lib-ver over 4096
// bytes is refused with an error that gives the limit; one of 4096 is
// kept. Without the bound each idle connection held a MiB per attribute,
// outside every budget.
func TestClientNamesBounded(t *testing.T) {
	c := startCluster(t, 1)
	r := dialRaw(t, c.addr)
	long := strings.Repeat("n", 4097)
	for _, tc := range []struct {
		cmd  []string
		what string
	}{
		{[]string{"CLIENT", "SETNAME", long}, "client name"},
		{[]string{"HELLO", "3", "SETNAME", long}, "client name"},
		{[]string{"CLIENT", "SETINFO", "lib-name", long}, "lib-name"},
		{[]string{"CLIENT", "SETINFO", "Lib-Ver", long}, "lib-ver"},
	} {
		want := "-ERR " + tc.what + " of 4097 bytes is longer than lockproxy's limit of 4096 bytes\r\n"
		if got := r.do(tc.cmd...); got != want {
			t.Errorf("%s … (4097 bytes) = %.80q, want %q", strings.Join(tc.cmd[:len(tc.cmd)-1], " "), got, want)
		}
	}
	if got := r.do("PING"); got != "+PONG\r\n" {
		t.Fatalf("PING after the refusals = %q (still RESP2, connection usable)", got)
	}
	if got := r.do("CLIENT", "GETNAME"); got != "$-1\r\n" {
		t.Errorf("CLIENT GETNAME after a refused long name = %.80q, want nil", got)
	}
	max := long[:4096]
	if got := r.do("CLIENT", "SETNAME", max); got != "+OK\r\n" {
		t.Fatalf("CLIENT SETNAME of 4096 bytes = %q", got)
	}
	if got := r.do("CLIENT", "GETNAME"); got != "$4096\r\n"+max+"\r\n" {
		t.Errorf("CLIENT GETNAME after a 4096-byte name = %.80q", got)
	}
}

// TestClientNamesValid: names Redis accepts are kept and shown, by every
// way of setting them; an empty name unsets it.
func TestClientNamesValid(t *testing.T) {
	c := startCluster(t, 1)
	r := dialRaw(t, c.addr)
	for _, cmd := range [][]string{
		{"CLIENT", "SETNAME", "worker-1:{eu}"},
		{"CLIENT", "SETINFO", "lib-name", "go-redis(redsync,go1.22)"},
		{"CLIENT", "SETINFO", "lib-ver", "9.23.0"},
	} {
		if got := r.do(cmd...); got != "+OK\r\n" {
			t.Fatalf("%q = %q, want +OK", cmd, got)
		}
	}
	if got := r.do("CLIENT", "GETNAME"); got != "$13\r\nworker-1:{eu}\r\n" {
		t.Errorf("CLIENT GETNAME = %q", got)
	}
	info := r.do("CLIENT", "INFO")
	for _, want := range []string{" name=worker-1:{eu} ", " lib-name=go-redis(redsync,go1.22) ", " lib-ver=9.23.0\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("CLIENT INFO = %q, want it to contain %q", info, want)
		}
	}
	if got := r.do("HELLO", "3", "SETNAME", "~!renamed!~"); !strings.HasPrefix(got, "%7\r\n") {
		t.Fatalf("HELLO 3 SETNAME = %q", got)
	}
	if got := r.do("CLIENT", "GETNAME"); got != "$11\r\n~!renamed!~\r\n" {
		t.Errorf("CLIENT GETNAME after HELLO SETNAME = %q", got)
	}
	if got := r.do("CLIENT", "SETNAME", ""); got != "+OK\r\n" {
		t.Fatalf("CLIENT SETNAME \"\" = %q", got)
	}
	if got := r.do("CLIENT", "GETNAME"); got != "_\r\n" {
		t.Errorf("CLIENT GETNAME after an empty name = %q, want the RESP3 null", got)
	}
}

// TestUnknownSubcommandSaysWhatIsSupported: CLIENT and COMMAND with a
// subcommand lockproxy lacks answer Redis's "unknown subcommand" error
// (clients probing for newer ones match it), followed by the subcommands
// lockproxy does support. Before, it pointed to CLIENT HELP and COMMAND
// HELP, which lockproxy refuses the same way: the error sent the reader
// in a circle.
func TestUnknownSubcommandSaysWhatIsSupported(t *testing.T) {
	c := startCluster(t, 1)
	r := dialRaw(t, c.addr)
	for _, tc := range []struct {
		cmd  []string
		want []string // named in the error
	}{
		{[]string{"CLIENT", "LIST"}, []string{"SETNAME", "GETNAME", "ID", "SETINFO", "INFO", "TRACKING"}},
		{[]string{"CLIENT", "HELP"}, []string{"SETNAME", "TRACKING"}},
		{[]string{"COMMAND", "GETKEYS", "GET", "k"}, []string{"COUNT", "DOCS", "INFO", "LIST"}},
		{[]string{"COMMAND", "HELP"}, []string{"COUNT", "DOCS"}},
	} {
		got := r.do(tc.cmd...)
		prefix := "-ERR unknown subcommand '" + tc.cmd[1] + "'."
		if !strings.HasPrefix(got, prefix) {
			t.Errorf("%q = %q, want it to start with %q (Redis's text)", tc.cmd, got, prefix)
		}
		if strings.Contains(strings.TrimPrefix(got, prefix), "HELP") {
			t.Errorf("%q = %q: it sends the reader to a HELP lockproxy does not answer", tc.cmd, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%q = %q, want it to name the supported subcommand %s", tc.cmd, got, w)
			}
		}
	}
}
