package catalog

import (
	"fmt"
	"strings"
	"testing"
)

// TestScriptTableLookup: a sha1 is found in any case, as SCRIPT EXISTS and
// EVALSHA find it on Redis; other lengths are unknown; a catalogued sha1
// is found without allocating.
func TestScriptTableLookup(t *testing.T) {
	cat := newTestCatalog(t)
	tab := NewTable(cat, 10)
	var c uint64 // a connection that never flushed
	sc := cat.Scripts()[0]
	learned := strings.Repeat("ab12", 10)
	tab.load(learned, sc)
	for _, q := range []string{learned, strings.ToUpper(learned), "AB12" + learned[4:], sc.SHA1, strings.ToUpper(sc.SHA1)} {
		if tab.Lookup([]byte(q), c) != sc {
			t.Errorf("lookup(%q) missed", q)
		}
	}
	for _, q := range []string{"00", strings.Repeat("A", 100), strings.Repeat("0", 40)} {
		if tab.Lookup([]byte(q), c) != nil {
			t.Errorf("lookup(%q) found a script", q)
		}
	}
	sha := []byte(strings.ToUpper(sc.SHA1))
	if n := testing.AllocsPerRun(100, func() { tab.Lookup(sha, c) }); n != 0 {
		t.Errorf("lookup of a catalogued sha1: %v allocations", n)
	}
	body := []byte(sc.Body)
	if n := testing.AllocsPerRun(100, func() { tab.LoadBody(body, sc) }); n != 0 {
		t.Errorf("loadBody of a catalogued body: %v allocations", n)
	}
}

// TestScriptTableBounded: past max learned sha1s, the least recently used
// goes; the catalog's stay.
func TestScriptTableBounded(t *testing.T) {
	cat := newTestCatalog(t)
	tab := NewTable(cat, 3)
	var c uint64 // a connection that never flushed
	sc := cat.Scripts()[0]
	sha := func(i int) string { return fmt.Sprintf("%040x", i+1) }
	for i := 0; i < 3; i++ {
		tab.load(sha(i), sc)
	}
	tab.Lookup([]byte(sha(0)), c) // used: 1 is now the least recently used
	tab.load(sha(3), sc)
	for i, want := range []bool{true, false, true, true} {
		if got := tab.Lookup([]byte(sha(i)), c) != nil; got != want {
			t.Errorf("sha %d known = %v, want %v", i, got, want)
		}
	}
	if n := tab.Len(); n != len(cat.Scripts())+3 {
		t.Errorf("len = %d, want the catalog's %d + 3", n, len(cat.Scripts()))
	}
	for _, s := range cat.Scripts() {
		if tab.Lookup([]byte(s.SHA1), c) != s {
			t.Errorf("catalogued %s dropped", s.Name)
		}
	}
}

// TestScriptTableFlushView: a flush hides from the flushing connection
// what was loaded before it, catalog included, and nothing from the
// others; what is loaded afterwards, by anyone, it sees again.
func TestScriptTableFlushView(t *testing.T) {
	cat := newTestCatalog(t)
	tab := NewTable(cat, 10)
	var a, b uint64 // two connections' flush stamps
	sc := cat.Scripts()[0]
	learned := strings.Repeat("cd", 20)
	tab.load(learned, sc)
	b = tab.Flush()
	for _, sha := range []string{learned, sc.SHA1} {
		if tab.Lookup([]byte(sha), a) != sc {
			t.Errorf("%s: another connection's flush hid it", sha)
		}
		if tab.Lookup([]byte(sha), b) != nil {
			t.Errorf("%s: still seen by the connection that flushed", sha)
		}
	}
	tab.load(sc.SHA1, sc) // someone EVALs the catalogued body
	tab.load(learned, sc)
	if tab.Lookup([]byte(sc.SHA1), b) != sc || tab.Lookup([]byte(learned), b) != sc {
		t.Errorf("loaded after the flush, still hidden")
	}
	a = tab.Flush()
	if tab.Lookup([]byte(sc.SHA1), a) != nil || tab.Lookup([]byte(sc.SHA1), b) != sc {
		t.Errorf("a second flush, by a, changed b's view or not a's")
	}
}
