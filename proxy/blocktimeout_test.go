package proxy

import (
	"testing"
	"time"
)

// BLPOP's timeout as redis-server 7.0.15 reads it: seconds, rounded up to
// whole milliseconds; its errors for what it refuses; a timeout longer
// than lockproxy's clock can hold waits as long as it can.
func TestParseBlockTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"0", 0, ""},
		{"1", time.Second, ""},
		{"0.5", 500 * time.Millisecond, ""},
		{"0.0000000001", time.Millisecond, ""},
		{"0.0011", 2 * time.Millisecond, ""},
		{"1e13", maxBlockTimeout / time.Millisecond * time.Millisecond, ""},
		{"-1", 0, "ERR timeout is negative"},
		{"-0.0001", 0, ""}, // ceil(-0.1ms) is 0: block forever, as Redis 7.0 does
		{"-0.001", 0, "ERR timeout is negative"},
		{"inf", 0, "ERR timeout is negative"},
		{"1e20", 0, "ERR timeout is negative"},
		{"nan", 0, "ERR timeout is not a float or out of range"},
		{"x", 0, "ERR timeout is not a float or out of range"},
		{" 1", 0, "ERR timeout is not a float or out of range"},
	} {
		got, err := parseBlockTimeout([]byte(c.in))
		if got != c.want || err != c.err {
			t.Errorf("%q: %v %q, want %v %q", c.in, got, err, c.want, c.err)
		}
	}
}
