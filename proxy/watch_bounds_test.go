package proxy_test

import (
	"strings"
	"testing"
)

// TestWatchedKeyBytesBounded: the names of the keys a connection watches
// are kept for its life (counted in client_query_buffer_total), and
// bounded like client names: 4096 bytes together. 16 names of 1 MiB on
// each of 60 idle connections held 1.5 GB (review, helper-59). A WATCH
// past the bound is refused whole, saying so; what was watched stays.
func TestWatchedKeyBytesBounded(t *testing.T) {
	c := startCluster(t, 1)
	p := dialRaw(t, c.addr)
	if got := p.do("WATCH", strings.Repeat("k", 5000)); !strings.HasPrefix(got, "-ERR lockproxy watches at most 4096 bytes of key names per connection") {
		t.Fatalf("WATCH of a 5000-byte key = %q", got)
	}
	if got := p.do("WATCH", strings.Repeat("a", 2000), strings.Repeat("b", 2000)); got != "+OK\r\n" {
		t.Fatalf("WATCH of 4000 bytes = %q", got)
	}
	// Watched already: costs nothing more.
	if got := p.do("WATCH", strings.Repeat("a", 2000), "c"); got != "+OK\r\n" {
		t.Fatalf("WATCH of a watched key and 1 byte more = %q", got)
	}
	if got := p.do("WATCH", "d", strings.Repeat("e", 100)); !strings.Contains(got, "would make it at least 4102") {
		t.Fatalf("WATCH past 4096 bytes = %q", got)
	}
	if got := p.do("UNWATCH"); got != "+OK\r\n" {
		t.Fatalf("UNWATCH = %q", got)
	}
	if got := p.do("WATCH", strings.Repeat("f", 4096)); got != "+OK\r\n" {
		t.Fatalf("WATCH of 4096 bytes after UNWATCH = %q", got)
	}
}
