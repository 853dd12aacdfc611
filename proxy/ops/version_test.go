package ops

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/fakemaster"
	"github.com/lockproxy/lockproxy/quorum"
)

// TestMasterVersionsExported: INFO's per-master lines and /metrics carry
// each master's version as its connection read it: a Valkey 8's own and
// its redis_version, and a Redis 6.2's, which lockproxy refused (down,
// last_error saying why and what to do).
func TestMasterVersionsExported(t *testing.T) {
	valkey, old := fakemaster.Start(t), fakemaster.Start(t)
	valkey.SetInfoServer("# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n")
	old.SetInfoServer("# Server\r\nredis_version:6.2.16\r\n")
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := quorum.New(quorum.Config{Masters: []string{valkey.Addr(), old.Addr()}, MaxTTL: 10 * time.Second, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	deadline := time.Now().Add(10 * time.Second)
	for st := e.Masters(); !st[0].Up || st[1].Server.Version == ""; st = e.Masters() {
		if time.Now().After(deadline) {
			t.Fatalf("versions not read within 10s: %+v", st)
		}
		time.Sleep(time.Millisecond)
	}
	src := Sources{Metrics: NewMetrics(nil, e.Config().Masters), Engine: e}
	text := Info([]string{"quorum"}, src)
	for _, want := range []string{
		",server=valkey,version=8.0.1,redis_version=7.2.4\r\n",
		"master1:addr=" + old.Addr() + ",state=down,",
		",server=redis,version=6.2.16,redis_version=6.2.16\r\n",
		"older than Redis 7.0",
		"upgrade it",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("INFO quorum lacks %q:\n%s", want, text)
		}
	}
	var b strings.Builder
	WritePrometheus(&b, src)
	for _, want := range []string{
		`lockproxy_master_server_info{master="` + valkey.Addr() + `",server="valkey",version="8.0.1",redis_version="7.2.4"} 1`,
		`lockproxy_master_server_info{master="` + old.Addr() + `",server="redis",version="6.2.16",redis_version="6.2.16"} 1`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
