package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/lockproxy/lockproxy/proxy/analyze"
)

// TestUnderstoodRefusalBounded: what the Understander keeps of a refusal
// by sha1, and sends to every client that runs the script, is at most
// maxRefusalText bytes, whatever the analysis said. Without the bound,
// 4,096 refusals of 1.4 MB each (a long key quoted three times) held
// 11.6 GB of RSS in a proxy.
func TestUnderstoodRefusalBounded(t *testing.T) {
	u := NewUnderstander(time.Minute, 0.01)
	defer u.Close()
	long := "it failed: " + strings.Repeat("\u00e9", 500000) // 2-byte runes: the cut must not split one
	u.analyze = func(context.Context, []byte) (*analyze.Semantics, error) { return nil, errors.New(long) }
	j, err := u.Start([]byte("return 1"), "e0e1f5e0bc54fbcd4d1a1e9b2b5f01e5b7ed8e4f", nil)
	if err != nil {
		t.Fatal(err)
	}
	<-j.Done()
	sc, refused, known := u.Lookup("e0e1f5e0bc54fbcd4d1a1e9b2b5f01e5b7ed8e4f")
	if !known || sc != nil || refused == nil {
		t.Fatalf("Lookup = %v, %v, %v; want a refusal", sc, refused, known)
	}
	msg := refused.Error()
	if len(msg) > maxRefusalText {
		t.Errorf("kept refusal is %d bytes, want at most %d", len(msg), maxRefusalText)
	}
	if !utf8.ValidString(msg) || !strings.HasPrefix(msg, "it failed: ") || !strings.HasSuffix(msg, "(1000011 bytes)") {
		t.Errorf("kept refusal %.80q…%q: want the start of the text, cut on a rune, and its length", msg, msg[max(0, len(msg)-40):])
	}
}

// TestUnderstoodScriptBounded: an accepted script's constant replies are
// kept with its sha1 (the vote rule, the "not done" reply, the summary),
// so a lock script answering a 60 KB string built at run time kept about
// 230 KB, and 4,096 of them about 1 GB (found by review). Scripts whose
// behaviour takes more than maxSemantics bytes to say are refused.
func TestUnderstoodScriptBounded(t *testing.T) {
	for _, body := range []string{
		`if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return string.rep("r", 60000) end return nil`,
		`if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then return 1 end return string.rep("n", 20000)`,
	} {
		u := NewUnderstander(time.Minute, 0.01)
		const sha = "0000000000000000000000000000000000000001"
		j, err := u.Start([]byte(body), sha, nil)
		if err != nil {
			t.Fatal(err)
		}
		<-j.Done()
		sc, refused, _ := u.Lookup(sha)
		u.Close()
		if sc != nil {
			t.Errorf("%.60s…: accepted, keeping %d bytes of summary and a %d-byte reply", body, len(sc.Semantics), len(sc.NoReply.Str))
			continue
		}
		// Refused for its long constant values, or, trying the many
		// contents and remaining TTLs the analyzer tries, for the bytes
		// its runs build (each builds the 20-60 KB string): short both.
		if refused == nil || !(strings.Contains(refused.Error(), "long constant values") || strings.Contains(refused.Error(), "bytes of strings")) || len(refused.Error()) > maxRefusalText {
			t.Errorf("%.60s…: %v; want a short refusal for long constant values", body, refused)
		}
	}
}
