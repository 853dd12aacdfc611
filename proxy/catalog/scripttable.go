package catalog

import (
	"container/list"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"sync/atomic"
)

// Table answers EVALSHA and SCRIPT EXISTS: which sha1s name a
// catalogued script. The catalog's own sha1s are always known. The sha1s
// of reformatted copies that clients EVALed or loaded (SCRIPT LOAD) are
// learned, at most max of them, the least recently used going first: a
// client that sends the sha1 of a dropped copy gets NOSCRIPT, and its
// library falls back to EVAL, which teaches it again. Without the bound,
// 300,000 EVALs of one script with different comments kept 300,000 entries.
//
// SCRIPT FLUSH is per connection. On one Redis it empties the server's
// cache for every client; through lockproxy one client must not make every
// other client's EVALSHA fail. So a flush changes only the view of the
// connection that sent it: from then on it sees, as it would on Redis, only
// the sha1s loaded (EVAL or SCRIPT LOAD, by any connection) after its
// flush: NOSCRIPT for the others, so that its library falls back to EVAL.
// Loads are stamped from a counter once some connection has flushed;
// until then none is, and the hot path takes no lock for catalogued sha1s.
// A connection keeps the stamp of its last flush (Flush returns it) and
// passes it to Lookup: 0 while it never flushed.
//
// A Table is safe for concurrent use.
type Table struct {
	cat       *Catalog
	max       int
	catLoaded map[string]*atomic.Uint64 // catalog sha1 → stamp of its last load; the map is immutable
	flushed   atomic.Bool               // some connection ran SCRIPT FLUSH: stamp loads
	stamp     atomic.Uint64             // orders loads and flushes

	mu      sync.Mutex               // protects learned, lru and bytes
	learned map[string]*list.Element // client sha1 → its element in lru
	lru     list.List                // of *learnedScript, the most recently used first
	bytes   int                      // heldBytes of the learned scripts
	// maxBytes bounds bytes (MaxHeldScriptBytes; tests set it lower).
	maxBytes int
}

type learnedScript struct {
	sha    string
	sc     *Script
	loaded uint64 // stamp of its last load; 0 before any flush
	bytes  int    // heldBytes(sc) when sc is not the catalog's
}

// MaxHeldScriptBytes bounds, by heldBytes, the scripts not in the catalog
// that the Table keeps (understood ones, and [[scripts]] entries given the
// client's text), and those the Understander keeps (fixed): a client's
// script text may be 16 KiB (analyze.Options.MaxBodyBytes), which made a
// learned understood script about 36 KB, so 10,000 of them 360 MB. Plain
// lock scripts, about 4 KB each, are bounded by the counts first.
const MaxHeldScriptBytes = 32 << 20

// heldBytes is about what keeping sc costs, when it is not a catalog
// entry: its text, what the masters run (a wrapped copy), its summary, and
// the rest of the Script and its ScriptOp (about 4 KB, measured).
func heldBytes(sc *Script) int {
	n := 4096 + len(sc.Body) + len(sc.Semantics)
	if sc.op != nil && sc.op.Body != sc.Body {
		n += len(sc.op.Body)
	}
	return n
}

// DefaultLearnedScripts bounds the learned sha1s (proxy.Config.LearnedScripts):
// far more than the reformatted copies real libraries send (one per
// library version), about 2 MB when full.
const DefaultLearnedScripts = 10000

// NewTable returns the table of cat's scripts, which learns at most max
// sha1s of reformatted copies (max <= 0: DefaultLearnedScripts).
func NewTable(cat *Catalog, max int) *Table {
	if max <= 0 {
		max = DefaultLearnedScripts
	}
	t := &Table{cat: cat, max: max, maxBytes: MaxHeldScriptBytes, catLoaded: map[string]*atomic.Uint64{}, learned: map[string]*list.Element{}}
	for _, sc := range cat.Scripts() {
		t.catLoaded[sc.SHA1] = new(atomic.Uint64)
	}
	return t
}

// Lookup returns the script sha (hex, any case) names for a connection
// whose last SCRIPT FLUSH has the stamp flushed (0: none), or nil
// (NOSCRIPT). A learned sha1 found is marked recently used.
func (t *Table) Lookup(sha []byte, flushed uint64) *Script {
	var buf [40]byte
	if len(sha) != len(buf) {
		return nil
	}
	for i, ch := range sha {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	if sc := t.cat.bySHA[string(buf[:])]; sc != nil { // no allocation: a map index
		if flushed == 0 || t.catLoaded[sc.SHA1].Load() > flushed {
			return sc
		}
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.learned[string(buf[:])]
	if e == nil {
		return nil
	}
	ls := e.Value.(*learnedScript)
	if flushed != 0 && ls.loaded <= flushed {
		return nil
	}
	t.lru.MoveToFront(e)
	return ls.sc
}

// load records that a client loaded sc under sha (lower-case hex of the
// text it sent): by EVAL or SCRIPT LOAD.
func (t *Table) load(sha string, sc *Script) {
	var stamp uint64
	if t.flushed.Load() {
		stamp = t.stamp.Add(1)
	}
	if v := t.catLoaded[sha]; v != nil {
		for old := v.Load(); stamp > old && !v.CompareAndSwap(old, stamp); old = v.Load() {
		}
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	size := 0
	if t.cat.bySHA[sc.SHA1] != sc {
		size = heldBytes(sc)
	}
	if e := t.learned[sha]; e != nil {
		ls := e.Value.(*learnedScript)
		t.bytes += size - ls.bytes
		ls.sc, ls.loaded, ls.bytes = sc, max(ls.loaded, stamp), size
		t.lru.MoveToFront(e)
	} else {
		t.learned[sha] = t.lru.PushFront(&learnedScript{sha: sha, sc: sc, loaded: stamp, bytes: size})
		t.bytes += size
	}
	for t.lru.Len() > t.max || (t.bytes > t.maxBytes && t.lru.Len() > 1) {
		old := t.lru.Back()
		ls := old.Value.(*learnedScript)
		delete(t.learned, ls.sha)
		t.bytes -= ls.bytes
		t.lru.Remove(old)
	}
}

// LoadBody records that a client loaded sc (EVAL or SCRIPT LOAD) by
// sending body, and returns body's sha1, which now names sc. The
// catalogued body itself, the usual case, costs no allocation.
func (t *Table) LoadBody(body []byte, sc *Script) string {
	sum := sha1.Sum(body)
	var h [40]byte
	hex.Encode(h[:], sum[:])
	sha := sc.SHA1
	if string(h[:]) != sha {
		sha = string(h[:])
	}
	t.load(sha, sc)
	return sha
}

// Flush is SCRIPT FLUSH from one connection: it returns the stamp that
// connection passes to Lookup from then on, so that it no longer sees
// what was loaded before; other connections see no change.
func (t *Table) Flush() (flushed uint64) {
	t.flushed.Store(true)
	return t.stamp.Add(1)
}

// Len is the number of sha1s known: the catalog's and the learned ones.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.catLoaded) + len(t.learned)
}
