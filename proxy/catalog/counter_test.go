package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// TestCounterPlaces: an acquire script's fencing counter is handed out
// only where the proxy can put the quorum's value, an integer in one
// place of the reply. Returned as a string ({1, tostring(token)} or
// tostring(token)), one master's own INCR would reach the client and
// could go back after that master is cut off: refused, saying why
// (review, helper-50: {1, tostring(token)} was accepted).
func TestCounterPlaces(t *testing.T) {
	const acquire = "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then local token = redis.call('incr', KEYS[2]); "
	for _, c := range []struct {
		name, tail, refusal string
		at                  int
	}{
		{"integer", "return token end return nil", "", 0},
		{"array", "return {1, token} end return nil", "", 2},
		{"string", "return tostring(token) end return nil", "", -1},
		{"string in an array", "return {1, tostring(token)} end return nil", "as a string", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := []byte(acquire + c.tail)
			sem, err := analyze.Analyze(body, analyze.Options{})
			if c.at < 0 {
				// The whole reply as a string: the analysis already
				// refuses it, as the reply changes with the counter.
				if err == nil {
					t.Fatalf("accepted: %s", sem)
				}
				return
			}
			if err != nil {
				t.Fatalf("analysis refused it: %v", err)
			}
			s, err := fromSemantics(body, "0000000000000000000000000000000000000002", sem, time.Hour, 0.01)
			if c.refusal == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if s.CounterAt != c.at {
					t.Fatalf("counter at %d, want %d", s.CounterAt, c.at)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.refusal) {
				t.Fatalf("fromSemantics = %v; want a refusal saying %q (%s)", err, c.refusal, sem)
			}
		})
	}
}
