package ops

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/quorum"
)

// TestInfoSections: INFO renders the sections asked for, in any case, and
// what the front end reports of itself; without masters reachable, every
// master is down and the quorum unavailable.
func TestInfoSections(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := quorum.New(quorum.Config{Masters: []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}, MaxTTL: 10 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	src := Sources{Metrics: NewMetrics(nil, e.Config().Masters), Engine: e, Front: Front{
		RedisVersion: "7.0.0", Clients: 3, MaxClients: 10, Accepted: 5, ScriptsKnown: 29, Started: time.Now(),
	}}

	text := Info([]string{"CLIENTS", "stats"}, src)
	for _, want := range []string{"# Clients\r\n", "connected_clients:3\r\n", "maxclients:10\r\n", "# Stats\r\n", "total_connections_received:5\r\n", "scripts_known:29\r\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("INFO clients stats lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "# Server") || strings.Contains(text, "# Quorum") {
		t.Errorf("INFO clients stats has other sections:\n%s", text)
	}

	text = Info(nil, src)
	for _, want := range []string{"# Server\r\n", "redis_version:7.0.0\r\n", "# Keyspace\r\n", "# Quorum\r\n", "masters:3\r\n", "quorum:2\r\n", "quorum_available:0\r\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("INFO lacks %q:\n%s", want, text)
		}
	}
}
