package catalog

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
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

// paddedRelease is an understood release whose text is about 15 KB (a
// comment; the analyzer reads up to 16 KiB), distinct for each i.
func paddedRelease(i int) (body []byte, sha string) {
	b := fmt.Sprintf("-- %s\nlocal v%d = redis.call(\"get\", KEYS[1])\nif v%d == ARGV[1] then return redis.call(\"del\", KEYS[1]) else return 0 end", strings.Repeat("x", 15<<10), i, i)
	sum := sha1.Sum([]byte(b))
	return []byte(b), hex.EncodeToString(sum[:])
}

// What the Understander and the Table keep of understood scripts is
// bounded in bytes, not only in count: a client's text may be 16 KiB, and
// an understood script kept its text twice (the masters run a wrapped
// copy), about 36 KB each: 4,096 verdicts and 10,000 learned sha1s could
// hold 360 MB. Past MaxHeldScriptBytes the least recently used go first.
func TestHeldScriptBytesBounded(t *testing.T) {
	const limit, n = 256 << 10, 20
	u := NewUnderstander(time.Minute, 0.01)
	defer u.Close()
	u.maxBytes = limit
	tab := NewTable(&Catalog{bySHA: map[string]*Script{}}, 0)
	tab.maxBytes = limit
	for i := range n {
		body, sha := paddedRelease(i)
		j, err := u.Start(body, sha, nil)
		if err != nil {
			t.Fatal(err)
		}
		<-j.Done()
		sc, refused, _ := u.Lookup(sha)
		if sc == nil {
			t.Fatalf("padded release %d refused: %v", i, refused)
		}
		tab.LoadBody(body, sc)
	}
	kept := 0
	for i := range n {
		if _, sha := paddedRelease(i); tab.Lookup([]byte(sha), 0) != nil {
			kept++
		}
	}
	if u.bytes > limit || tab.bytes > limit || kept == n {
		t.Errorf("after %d understood scripts of ~36 KB: the Understander holds %d bytes in %d, the Table %d bytes in %d sha1s; want at most %d bytes each", n, u.bytes, u.lru.Len(), tab.bytes, kept, limit)
	}
	if _, sha := paddedRelease(n - 1); tab.Lookup([]byte(sha), 0) == nil {
		t.Errorf("the most recently loaded script was dropped")
	}
}
