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
