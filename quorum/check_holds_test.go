package quorum

import (
	"strings"
	"testing"

	"github.com/lockproxy/lockproxy/internal/redisproc"
)

// TestHoldsIsExact: lockproxy_holds, on a real master, says a key holds a
// token only in the shapes lock libraries write it, never for a token that
// is merely part of another holder's value (review, helper-69: a
// one-character token passed for another client's UUID, a Redisson
// count "1" for its holder, and the guards left that lock to the script).
func TestHoldsIsExact(t *testing.T) {
	m := redisproc.ForTest(t, 1)[0]
	const uuid = "9f1c2e4a-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
	cases := []struct {
		name  string
		setup []string // a command writing k
		tok   string   // Lua expression of the token
		want  bool
	}{
		{"whole value", []string{"SET", "k", uuid}, `"` + uuid + `"`, true},
		{"one character of a UUID", []string{"SET", "k", uuid}, `"9"`, false},
		{"a UUID's middle", []string{"SET", "k", uuid}, `"5b6d-4e7f"`, false},
		{"empty token", []string{"SET", "k", uuid}, `""`, false},
		{"JSON string", []string{"SET", "k", `"` + uuid + `"`}, `"` + uuid + `"`, true},
		{"JSON object field", []string{"SET", "k", `{"owner":"` + uuid + `","n":1}`}, `"` + uuid + `"`, true},
		{"JSON with spaces", []string{"SET", "k", ` { "owner" : "` + uuid + `" }`}, `"` + uuid + `"`, true},
		{"cjson escaped base64", []string{"SET", "k", `{"owner":"ab\/cd+12=="}`}, `"ab/cd+12=="`, true},
		{"JSON field name", []string{"SET", "k", `{"owner":"` + uuid + `"}`}, `"owner"`, false},
		{"JSON part of a field", []string{"SET", "k", `{"owner":"` + uuid + `"}`}, `"9f1c"`, false},
		{"across two JSON strings", []string{"SET", "k", `{"a":"x","b":"y"}`}, `"x\",\"b\":\"y"`, false},
		{"quote and comma", []string{"SET", "k", `{"a":"x","b":"y"}`}, `","`, false},
		{"nested JSON field", []string{"SET", "k", `{"a":{"owner":"` + uuid + `"}}`}, `"` + uuid + `"`, false},
		{"JSON array element", []string{"SET", "k", `["` + uuid + `"]`}, `"` + uuid + `"`, false},
		{"not JSON", []string{"SET", "k", `{owner:` + uuid}, `"` + uuid + `"`, false},
		{"JSON over 4 KiB", []string{"SET", "k", `{"owner":"` + uuid + `","pad":"` + strings.Repeat("x", 4096) + `"}`}, `"` + uuid + `"`, false},
		{"hash field", []string{"HSET", "k", uuid + ":1", "1"}, `"` + uuid + `:1"`, true},
		{"hash count", []string{"HSET", "k", uuid + ":1", "1"}, `"1"`, false},
		{"hash value", []string{"HSET", "k", "owner", uuid}, `"` + uuid + `"`, false},
		{"sorted-set member", []string{"ZADD", "k", "1", uuid}, `"` + uuid + `"`, true},
		{"sorted-set part of a member", []string{"ZADD", "k", "1", uuid}, `"9f1c"`, false},
		{"set member", []string{"SADD", "k", uuid}, `"` + uuid + `"`, true},
		{"prefix", []string{"SET", "k", uuid + "meta"}, `{p = "` + uuid + `"}`, true},
		{"prefix elsewhere", []string{"SET", "k", "x" + uuid}, `{p = "` + uuid + `"}`, false},
		{"empty prefix", []string{"SET", "k", uuid}, `{p = ""}`, false},
		{"prefix of a hash", []string{"HSET", "k", uuid, "1"}, `{p = "` + uuid + `"}`, false},
		{"absent", nil, `"` + uuid + `"`, false},
		{"exists", []string{"SET", "k", "x"}, `nil`, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := m.Do("DEL", "k"); err != nil {
				t.Fatal(err)
			}
			if c.setup != nil {
				if _, err := m.Do(c.setup...); err != nil {
					t.Fatal(err)
				}
			}
			got, err := m.Do("EVAL", checkLua+"return lockproxy_holds(KEYS[1], "+c.tok+") and 1 or 0", "1", "k")
			if err != nil {
				t.Fatal(err)
			}
			if (got == "1") != c.want {
				t.Errorf("lockproxy_holds(%v, %s) = %s, want %v", c.setup, c.tok, got, c.want)
			}
		})
	}
}
