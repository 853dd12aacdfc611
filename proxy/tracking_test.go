package proxy_test

import (
	"strings"
	"testing"
)

// TestClientTrackingOptIn: CLIENT TRACKING ON OPTIN is accepted (rueidis
// sends it on every connection unless caching is off) and CLIENT CACHING
// YES, which would track the next read, is refused: nothing is ever
// tracked, so no invalidation is ever owed. Every other mode is refused,
// saying how to turn caching off. Where lockproxy answers as Redis would
// (syntax, conflicting options, CACHING out of place) the text is compared
// with a real redis-server, on a connection taken through the same steps.
func TestClientTrackingOptIn(t *testing.T) {
	c := startCluster(t, 1)
	p := dialRaw(t, c.addr)
	r := dialRaw(t, c.masters[0].Addr)
	const (
		ok       = "+OK\r\n"
		modeErr  = "-ERR CLIENT TRACKING is supported in OPTIN mode only"
		cacheErr = "-ERR CLIENT CACHING YES is not supported"
	)
	same := func(cmd ...string) {
		t.Helper()
		got, want := p.do(cmd...), r.do(cmd...)
		if got != want {
			t.Errorf("%q: lockproxy answers %q, Redis %q", cmd, got, want)
		}
	}
	prefixed := func(want string, cmd ...string) {
		t.Helper()
		if got := p.do(cmd...); !strings.HasPrefix(got, want) || !strings.Contains(got, "DisableCache: true") {
			t.Errorf("%q = %q, want %q… saying how to turn caching off", cmd, got, want)
		}
	}
	// Tracking off.
	same("CLIENT", "CACHING")
	same("CLIENT", "TRACKING")
	same("CLIENT", "CACHING", "yes", "extra")
	same("CLIENT", "CACHING", "yes")
	same("CLIENT", "CACHING", "no")
	same("CLIENT", "CACHING", "maybe")
	same("CLIENT", "TRACKING", "maybe")
	same("CLIENT", "TRACKING", "on", "prefix", "p")
	same("CLIENT", "TRACKING", "on", "optin", "optout")
	same("CLIENT", "TRACKING", "on", "bcast", "optin")
	same("CLIENT", "TRACKING", "on", "redirect", "abc")
	same("CLIENT", "TRACKING", "on", "noloop", "junk")
	same("CLIENT", "TRACKING", "off")
	// The modes that track reads without asking are refused.
	for _, cmd := range [][]string{
		{"CLIENT", "TRACKING", "on"},
		{"CLIENT", "TRACKING", "ON", "OPTOUT"},
		{"CLIENT", "TRACKING", "on", "optout", "noloop"},
		{"CLIENT", "TRACKING", "on", "bcast"},
		{"CLIENT", "TRACKING", "on", "bcast", "prefix", "lock:"},
	} {
		prefixed(modeErr, cmd...)
	}
	if got := p.do("CLIENT", "CACHING", "yes"); !strings.HasPrefix(got, "-ERR CLIENT CACHING can be called only") {
		t.Errorf("CLIENT CACHING after a refused TRACKING = %q: tracking must still be off", got)
	}
	// OPTIN: accepted; CACHING YES refused, CACHING NO as Redis.
	for _, conn := range []*rawConn{p, r} {
		if got := conn.do("CLIENT", "TRACKING", "on", "optin"); got != ok {
			t.Fatalf("CLIENT TRACKING on optin = %q", got)
		}
	}
	same("CLIENT", "CACHING", "no")
	same("CLIENT", "CACHING", "maybe")
	prefixed(cacheErr, "CLIENT", "CACHING", "YES")
	// Commands go on as before; nothing is tracked.
	if got := p.do("SET", "lock:t", "tok", "NX", "PX", "10000"); got != ok {
		t.Errorf("SET NX with tracking on = %q", got)
	}
	if got := p.do("GET", "lock:t"); got != "$3\r\ntok\r\n" {
		t.Errorf("GET with tracking on = %q", got)
	}
	// OFF, and RESET, end it.
	same("CLIENT", "TRACKING", "off")
	same("CLIENT", "CACHING", "no")
	if got := p.do("CLIENT", "TRACKING", "on", "OPTIN", "NOLOOP"); got != ok {
		t.Fatalf("CLIENT TRACKING on optin noloop = %q", got)
	}
	if got := p.do("RESET"); got != "+RESET\r\n" {
		t.Fatalf("RESET = %q", got)
	}
	if got := p.do("CLIENT", "CACHING", "no"); !strings.HasPrefix(got, "-ERR CLIENT CACHING can be called only") {
		t.Errorf("CLIENT CACHING after RESET = %q: RESET turns tracking off", got)
	}
}
