package ops

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/fakemaster"
)

// TestProbeAuthenticates: the probe gives the masters the credentials it
// was given, byte for byte, before its PING; refused, it PINGs nothing and
// tries again at the next interval.
func TestProbeAuthenticates(t *testing.T) {
	const pass = "AUTH \r\n$4\r\nPING\x00\xff"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []struct {
		name, given string
		want        func(cs []fakemaster.Command) bool
	}{
		{"right password", pass, func(cs []fakemaster.Command) bool {
			// A probe that timed out on a busy machine connects again and
			// authenticates again before its PING (CI saw AUTH, AUTH,
			// PING): every command before the first PING is that AUTH.
			for i, c := range cs {
				if c.Is("PING") {
					return i > 0
				}
				if !c.Is("AUTH", "lp", pass) {
					return false
				}
			}
			return false
		}},
		{"wrong password", "nope", func(cs []fakemaster.Command) bool {
			return len(cs) >= 2 && cs[0].Is("AUTH", "lp", "nope") && cs[1].Is("AUTH", "lp", "nope")
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := fakemaster.Start(t)
			m.RequirePass("lp", pass)
			pm := NewMetrics(nil, []string{m.Addr()})
			stop := pm.StartProbes(ProbeOptions{Interval: 5 * time.Millisecond, Username: "lp", Password: c.given, Logger: quiet})
			defer stop()
			m.WaitFor(t, c.name, c.want)
		})
	}
}
