package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy/catalog"
	"github.com/lockproxy/lockproxy/quorum"
	"github.com/redis/go-redis/v9"
)

// TestConfigErrors: every configuration mistake stops the start with exit
// status 2 and a message naming the file, the line and the key.
func TestConfigErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	ten := make([]string, 10)
	for i := range ten {
		ten[i] = fmt.Sprintf("127.0.0.1:%d", 7001+i)
	}
	const masters = "[quorum]\nmasters = [\"127.0.0.1:7001\"]\n"
	for _, tc := range []struct {
		name string
		toml string
		line int      // 0: no line expected (the message names a flag)
		want []string // substrings of the message
		args []string // extra flags
	}{
		{name: "unknown key", toml: "listen = \"127.0.0.1:0\"\nlisten_addr = \"x\"\n", line: 2,
			want: []string{`unknown key "listen_addr"`}},
		{name: "misspelt key", toml: "reqirepass = \"x\"\n", line: 1,
			want: []string{`unknown key "reqirepass"`, `did you mean "requirepass"`}},
		{name: "unknown key in table", toml: "[quorum]\nmasters = [\"127.0.0.1:7001\"]\nnode_timeout_ms = 50\n", line: 3,
			want: []string{`unknown key "quorum.node_timeout_ms"`}},
		{name: "key above its table", toml: "node_timeout = \"20ms\"\n" + masters, line: 1,
			want: []string{`unknown key "node_timeout"`, `"quorum.node_timeout" (under [quorum])`}},
		{name: "string expected", toml: "listen = 7379\n", line: 1,
			want: []string{"listen: expected a string, got an integer"}},
		{name: "array expected", toml: "[quorum]\nmasters = \"127.0.0.1:7001\"\n", line: 2,
			want: []string{"quorum.masters: expected an array of strings", "got a string"}},
		{name: "bool expected", toml: masters + "quarantine = \"yes\"\n", line: 3,
			want: []string{"quorum.quarantine: expected true or false, got a string"}},
		{name: "integer expected", toml: "max_clients = 1.5\n", line: 1,
			want: []string{"max_clients: expected an integer, got a float"}},
		{name: "bad duration", toml: masters + "node_timeout = \"50 ms\"\n", line: 3,
			want: []string{"quorum.node_timeout", `"50 ms" is not a duration`, `"50ms"`}},
		{name: "duration without unit", toml: masters + "max_ttl = 60\n", line: 3,
			want: []string{"quorum.max_ttl", `"60" is not a duration`}},
		{name: "negative duration", toml: "default_ttl = \"-1s\"\n", line: 1,
			want: []string{"default_ttl", "negative"}},
		{name: "syntax error", toml: "listen = \"127.0.0.1:0\n", line: 1,
			want: []string{`1 | listen = "127.0.0.1:0`}},
		{name: "no masters", toml: "[quorum]\nmasters = []\n", line: 2,
			want: []string{"quorum.masters has 0 masters; lockproxy needs 1 to 9"}},
		{name: "ten masters", toml: "[quorum]\nmasters = " + tomlList(ten) + "\n", line: 2,
			want: []string{"quorum.masters has 10 masters; lockproxy needs 1 to 9"}},
		{name: "duplicate master", toml: "[quorum]\nmasters = [\"127.0.0.1:7001\", \"127.0.0.1:7002\", \"127.0.0.1:7001\"]\n", line: 2,
			want: []string{`lists "127.0.0.1:7001" twice`}},
		{name: "master not host:port", toml: "[quorum]\nmasters = [\"127.0.0.1\"]\n", line: 2,
			want: []string{`"127.0.0.1" is not host:port`}},
		{name: "node_timeout not below max_ttl", toml: masters + "node_timeout = \"2s\"\nmax_ttl = \"2s\"\n", line: 3,
			want: []string{"quorum.node_timeout (2s) must be smaller than quorum.max_ttl (2s"}},
		{name: "default_ttl above max_ttl", toml: "default_ttl = \"2m\"\n" + masters, line: 1,
			want: []string{"default_ttl (2m0s) exceeds quorum.max_ttl (1m0s)"}},
		{name: "default_ttl without validity", toml: "default_ttl = \"2ms\"\n" + masters, line: 1,
			want: []string{"default_ttl (2ms) leaves no validity after the clock drift allowance"}},
		{name: "input total below four commands", toml: "client_query_buffer_total = 1000000\n" + masters, line: 1,
			want: []string{"client_query_buffer_total 1000000 must be at least 4 × client_query_buffer_limit (8388608)"}},
		// Limits near the int64 limit: the checks must not wrap and let
		// them through (the guard's arithmetic on them would).
		{name: "bulk length at the int64 limit", toml: "proto_max_bulk_len = 9223372036854775807\nclient_query_buffer_limit = 9223372036854775807\n" + masters, line: 2,
			want: []string{"client_query_buffer_limit 9223372036854775807 must exceed proto_max_bulk_len (9223372036854775807) by at least 64"}},
		{name: "query buffer at the int64 limit", toml: "proto_max_bulk_len = 1000\nclient_query_buffer_limit = 9223372036854775807\nclient_query_buffer_total = 9223372036854775807\n" + masters, line: 3,
			want: []string{"client_query_buffer_total 9223372036854775807 must be at least 4 × client_query_buffer_limit (9223372036854775807)"}},
		{name: "negative query buffer", toml: "client_query_buffer_limit = -9223372036854775808\n" + masters, line: 1,
			want: []string{"client_query_buffer_limit -9223372036854775808 must exceed proto_max_bulk_len"}},
		{name: "quarantine check too long", toml: masters + "quarantine_check = \"1m\"\n", line: 3,
			want: []string{"quorum.quarantine_check 1m0s is outside [10ms, 5s]", "SWAPDB"}},
		{name: "quarantine check zero", toml: masters + "quarantine_check = \"0s\"\n", line: 3,
			want: []string{"quorum.quarantine_check 0s is outside [10ms, 5s]"}},
		{name: "drift factor", toml: masters + "clock_drift_factor = 0.7\n", line: 3,
			want: []string{"quorum.clock_drift_factor 0.7 is outside [0, 0.5)"}},
		{name: "listen not host:port", toml: "listen = \"7379\"\n" + masters, line: 1,
			want: []string{`listen "7379" is not host:port`}},
		{name: "listen address in use", toml: fmt.Sprintf("listen = %q\n", busy.Addr()) + masters, line: 1,
			want: []string{"listen", "cannot be used", "address already in use"}},
		{name: "listen address not local", toml: "listen = \"192.0.2.1:7379\"\n" + masters, line: 1,
			want: []string{`listen "192.0.2.1:7379" cannot be used`}},
		{name: "metrics address in use", toml: fmt.Sprintf("listen = \"127.0.0.1:0\"\nmetrics_listen = %q\n", busy.Addr()) + masters, line: 2,
			want: []string{"metrics_listen", "cannot be used"}},
		{name: "log level", toml: "log_level = \"verbose\"\n", line: 1,
			want: []string{`log_level "verbose" is not one of debug, info, warn, error`}},
		{name: "tls_listen without certificate", toml: "tls_listen = \"127.0.0.1:0\"\n", line: 1,
			want: []string{"tls_listen needs tls_cert_file and tls_key_file"}},
		{name: "certificate without tls_listen", toml: "tls_cert_file = \"a.pem\"\n", line: 1,
			want: []string{"tls_cert_file is set but tls_listen is not"}},
		{name: "missing certificate file", toml: "listen = \"127.0.0.1:0\"\ntls_listen = \"127.0.0.1:0\"\ntls_cert_file = \"/nonexistent/cert.pem\"\ntls_key_file = \"/nonexistent/key.pem\"\n" + masters, line: 3,
			want: []string{"tls_cert_file /nonexistent/cert.pem", "no such file"}},
		{name: "missing master CA file", toml: masters + "master_tls = { ca_file = \"/nonexistent/ca.pem\" }\n", line: 3,
			want: []string{"quorum.master_tls.ca_file /nonexistent/ca.pem", "no such file"}},
		{name: "master CA file in a table", toml: masters + "[quorum.master_tls]\nserver_name = \"redis\"\nca_file = \"/nonexistent/ca.pem\"\n", line: 5,
			want: []string{"quorum.master_tls.ca_file"}},
		{name: "master user without password", toml: masters + "master_username = \"lockproxy\"\n", line: 3,
			want: []string{"quorum.master_username is set without a password", "LOCKPROXY_MASTER_PASSWORD"}},
		{name: "per-connection subscriptions above the proxy's", toml: masters + "[pubsub]\nmax_channels = 500\nmax_per_connection = 1000\n", line: 5,
			want: []string{"pubsub.max_per_connection 1000 exceeds pubsub.max_channels 500: one connection could take every channel"}},
		{name: "patterns above channels", toml: masters + "[pubsub]\nmax_channels = 500\nmax_per_connection = 50\nmax_patterns = 1000\n", line: 6,
			want: []string{"pubsub.max_patterns 1000 exceeds pubsub.max_channels 500"}},
		{name: "per-connection patterns above the proxy's", toml: masters + "[pubsub]\nmax_patterns_per_connection = 2000\n", line: 4,
			want: []string{"pubsub.max_patterns_per_connection 2000 exceeds pubsub.max_patterns 1000: one connection could take every pattern"}},
		{name: "bad -masters flag", toml: masters, args: []string{"-masters", "a:1,a:1"},
			want: []string{"flag -masters: quorum.masters lists \"a:1\" twice"}},
		{name: "bad -log-level flag", toml: masters, args: []string{"-log-level", "loud"},
			want: []string{"flag -log-level: log_level \"loud\""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeConfig(t, tc.toml)
			args := append([]string{"-config", path}, tc.args...)
			code, _, stderr := runOnce(t, args...)
			if code != 2 {
				t.Errorf("exit status %d, want 2; stderr:\n%s", code, stderr)
			}
			if tc.line > 0 && !strings.Contains(stderr, fmt.Sprintf("%s:%d", path, tc.line)) {
				t.Errorf("stderr does not name %s:%d:\n%s", path, tc.line, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if !strings.Contains("\n"+stderr, "\nlockproxy: ") {
				t.Errorf("stderr should have a line starting with the program name:\n%s", stderr)
			}
		})
	}
}

// TestShippedConfigLoads: config.toml in the repository is valid and its
// every key is one lockproxy reads.
func TestShippedConfigLoads(t *testing.T) {
	cfg, err := loadConfig("../../config.toml", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Quorum.Masters) != 5 {
		t.Fatalf("config.toml has %d masters, want the documented 5", len(cfg.Quorum.Masters))
	}
	// Every key lockproxy reads is documented in config.toml, assigned or
	// in a comment.
	data := string(cfg.src.data)
	for key := range configKeys() {
		name := key[strings.LastIndex(key, ".")+1:]
		if strings.HasPrefix(key, "scripts.") {
			continue // documented in the [[scripts]] comment block
		}
		if !strings.Contains(data, name) {
			t.Errorf("config.toml does not document %s", key)
		}
	}
}

// TestShippedConfigScriptsExample: the commented [[scripts]] example at the
// end of config.toml, uncommented as an operator would, loads and
// registers each of its scripts: an example that duplicates a built-in
// script stops the start ("remove this entry").
func TestShippedConfigScriptsExample(t *testing.T) {
	data, err := os.ReadFile("../../config.toml")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	start := -1
	for i, l := range lines {
		if l == "# [[scripts]]" {
			start = i
			break
		}
	}
	if start < 0 {
		t.Fatal(`config.toml has no commented "# [[scripts]]" example`)
	}
	var example strings.Builder
	for _, l := range lines[start:] {
		example.WriteString(strings.TrimPrefix(strings.TrimPrefix(l, "#"), " ") + "\n")
	}
	cfg, err := loadConfig(writeConfig(t, example.String()), nil)
	if err != nil {
		t.Fatalf("config.toml's [[scripts]] example, uncommented: %v\n%s", err, example.String())
	}
	if len(cfg.Scripts) < 2 {
		t.Fatalf("config.toml's [[scripts]] example decodes to %d entries, want its acquire and its release", len(cfg.Scripts))
	}
	cat, err := catalog.New(cfg.Scripts)
	if err != nil {
		t.Fatalf("config.toml's [[scripts]] example, uncommented, stops the start: %v", err)
	}
	for _, sc := range cfg.Scripts {
		if s := cat.Match([]byte(sc.Body)); s == nil || s.Name != sc.Name {
			t.Errorf("config.toml's example script %q is not recognized as itself (got %v)", sc.Name, s)
		}
	}
}

func TestScanKeys(t *testing.T) {
	keys := scanKeys([]byte(`# comment = 1
listen = "a" # trailing = comment
[quorum]
masters = ["a:1"]
master_tls = { ca_file = "x", server_name = "y" }
[[scripts]]
name = "s"
body = '''
fake = 1
'''
kind = "release"
`))
	for key, line := range map[string]int{
		"listen": 2, "quorum.masters": 4, "quorum.master_tls": 5, "quorum.master_tls.ca_file": 5,
		"quorum.master_tls.server_name": 5, "scripts.name": 7, "scripts.kind": 11,
	} {
		if got := keys[key].line; got != line {
			t.Errorf("%s at line %d, want %d", key, got, line)
		}
	}
	if _, ok := keys["scripts.fake"]; ok {
		t.Errorf("a line inside a multi-line string was taken for a key")
	}
	if keys["listen"].raw != `"a"` {
		t.Errorf("raw value of listen = %q", keys["listen"].raw)
	}
}

// TestScriptOtherTTLArgsDecode: [[scripts]] other_ttl_args decodes into the
// catalog entry; a wrong shape names its line.
func TestScriptOtherTTLArgsDecode(t *testing.T) {
	path := writeConfig(t, `[quorum]
masters = ["127.0.0.1:7001"]
[[scripts]]
name = "release and signal"
body = 'if redis.call("get", KEYS[1]) == ARGV[1] then redis.call("del", KEYS[1]) redis.call("rpush", KEYS[2], 1) redis.call("pexpire", KEYS[2], ARGV[2]) return 1 end return 0'
kind = "release"
vote = "one"
other_ttl_args = [{ arg = 2, unit = "ms" }]
`)
	cfg, err := loadConfig(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.New(cfg.Scripts)
	if err != nil {
		t.Fatal(err)
	}
	sc := cat.Scripts()[len(cat.Scripts())-1]
	if len(sc.OtherTTLs) != 1 || sc.OtherTTLs[0] != (catalog.ArgTTL{Arg: 2, Unit: quorum.Millis}) {
		t.Fatalf("other_ttl_args decoded as %+v", sc.OtherTTLs)
	}
	path = writeConfig(t, "[quorum]\nmasters = [\"127.0.0.1:7001\"]\n[[scripts]]\nname = \"x\"\nother_ttl_args = 2\n")
	if _, err := loadConfig(path, nil); err == nil || !strings.Contains(err.Error(), ":5: scripts.other_ttl_args: expected an array of inline tables") {
		t.Fatalf("other_ttl_args = 2: %v", err)
	}
}

// TestHardeningKeys: idle_timeout, handshake_timeout,
// client_query_buffer_total and allow_force_acquire reach the server.
func TestHardeningKeys(t *testing.T) {
	m := redisproc.ForTest(t, 1)
	path := writeConfig(t, `listen = "127.0.0.1:0"
metrics_listen = ""
idle_timeout = "300ms"
handshake_timeout = ""
client_query_buffer_total = 40000000
allow_force_acquire = false
[quorum]
masters = ["`+m[0].Addr+`"]
bootstrap = true
probe_interval = "0s"
`)
	p := startRun(t, "-config", path)
	listen, _, _ := p.addrs()
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: listen, Protocol: 2, MaxRetries: 3})
	defer cl.Close()
	info, err := cl.Info(ctx, "clients").Result()
	if err != nil || !strings.Contains(info, "client_query_buffer_total:40000000") {
		t.Fatalf("INFO clients: %v %q", err, info)
	}
	err = cl.Eval(ctx, `local r = redis.call("SET",KEYS[1],ARGV[1],"PX",ARGV[2]);redis.call("GET",KEYS[1]);return r`, []string{"k"}, "t", "1000").Err()
	if err == nil || !strings.Contains(err.Error(), "allow_force_acquire = false") {
		t.Fatalf("force acquisition with allow_force_acquire = false: %v", err)
	}
	// handshake_timeout is off: a silent connection is closed by
	// idle_timeout, after about 300ms.
	silent, err := net.Dial("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	silent.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := silent.Read(make([]byte, 1)); err == nil || time.Since(start) < 200*time.Millisecond || time.Since(start) > 4*time.Second {
		t.Fatalf("idle connection: %v after %v, want closed after about 300ms", err, time.Since(start))
	}
}

// TestScriptNoReplyInteger: no_reply is documented as an integer
// (no_reply = 0) and as a string ("nil"); both decode (issue 13: the
// integer used to be refused with "expected a string, got an integer").
func TestScriptNoReplyInteger(t *testing.T) {
	for _, v := range []string{`0`, `"0"`, `-1`, `"nil"`} {
		path := writeConfig(t, `[quorum]
masters = ["127.0.0.1:7001"]
[[scripts]]
name = "release"
body = 'local v = redis.call("get", KEYS[1]) if v == ARGV[1] then return redis.call("unlink", KEYS[1]) end return 0'
kind = "release"
vote = "one"
no_reply = `+v+"\n")
		cfg, err := loadConfig(path, nil)
		if err != nil {
			t.Fatalf("no_reply = %s: %v", v, err)
		}
		cat, err := catalog.New(cfg.Scripts)
		if err != nil {
			t.Fatalf("no_reply = %s: %v", v, err)
		}
		sc := cat.Scripts()[len(cat.Scripts())-1]
		want := strings.Trim(v, `"`)
		if got := sc.NoReply.String(); got != want && !(want == "nil" && got == "(nil)") {
			t.Fatalf("no_reply = %s decoded as %s", v, got)
		}
	}
}
