package compat

import (
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockproxy/lockproxy/internal/redisproc"
	"github.com/lockproxy/lockproxy/proxy"
)

// nMasters is the size of the shared deployment; q its quorum.
const (
	nMasters = 5
	q        = nMasters/2 + 1
)

// env is what every test of the package shares: 5 real masters and a
// lockproxy in front of them with the default configuration. Tests keep
// out of each other's way by key prefix (prefixOf), so they may run in
// parallel; a test that needs another configuration starts its own
// lockproxy on the same masters (startProxy).
//
// The same checks also run against one plain redis-server without
// lockproxy (plainRedis): there a driver proves that it drives its library
// correctly, so that a failure through lockproxy is lockproxy's.
type env struct {
	masters []*redisproc.Server
	addr    string // what clients dial: the shared lockproxy, or the plain master itself
	quorum  int    // masters that must agree: q behind lockproxy, 1 for plain redis
}

var (
	sharedOnce sync.Once
	shared     *env
	sharedErr  error
	plainOnce  sync.Once
	plain      *env
	plainErr   error
	sharedStop []func() // run by TestMain after the tests, last first; guarded by stopMu
	stopMu     sync.Mutex
)

// atStop registers f to run after all tests (TestMain).
func atStop(f func()) {
	stopMu.Lock()
	defer stopMu.Unlock()
	sharedStop = append(sharedStop, f)
}

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(sharedStop) - 1; i >= 0; i-- {
		sharedStop[i]()
	}
	os.Exit(code)
}

// setup returns the shared environment, starting it on first use. A
// missing redis-server is a failure, never a skip.
func setup(t *testing.T) *env {
	t.Helper()
	sharedOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockproxy-compat-")
		if err != nil {
			sharedErr = err
			return
		}
		atStop(func() { os.RemoveAll(dir) })
		masters, err := redisproc.StartN(dir, nMasters)
		if err != nil {
			sharedErr = fmt.Errorf("starting %d redis-server masters (apt-get install -y redis-server; .ci/run does): %w", nMasters, err)
			return
		}
		atStop(func() {
			for _, m := range masters {
				m.Stop()
			}
		})
		addr, stop, err := startProxy(masters, proxy.Config{}, nil)
		if err != nil {
			sharedErr = err
			return
		}
		atStop(stop)
		shared = &env{masters: masters, addr: addr, quorum: q}
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

// plainRedis returns the environment of one plain redis-server, no
// lockproxy: clients dial the master itself, and the checks read it alone
// (a quorum of 1). Drivers run there to show they pass against the Redis
// their library was written for. Tests share it by key prefix, like setup;
// TestLibsPlainRedis watches every script sent to it (MONITOR), so a test
// that sends scripts of other libraries there must say so to that check.
func plainRedis(t *testing.T) *env {
	t.Helper()
	plainOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockproxy-compat-plain-")
		if err != nil {
			plainErr = err
			return
		}
		atStop(func() { os.RemoveAll(dir) })
		masters, err := redisproc.StartN(dir, 1)
		if err != nil {
			plainErr = fmt.Errorf("starting a plain redis-server (apt-get install -y redis-server; .ci/run does): %w", err)
			return
		}
		atStop(func() { masters[0].Stop() })
		plain = &env{masters: masters, addr: masters[0].Addr, quorum: 1}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plain
}

// ownRedis starts a plain redis-server for t alone, stopped with it: for
// checks that send scripts the shared plain server must not see (its
// MONITOR check) or change its settings (notify-keyspace-events).
func ownRedis(t *testing.T) *env {
	t.Helper()
	m := redisproc.ForTest(t, 1)
	return &env{masters: m, addr: m[0].Addr, quorum: 1}
}

// prefixOf is the key prefix of test t: every key a test locks starts with
// it, so tests on the shared masters never meet.
func prefixOf(t *testing.T) string {
	return "compat:" + regexp.MustCompile(`[^A-Za-z0-9_]+`).ReplaceAllString(t.Name(), "_") + ":"
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// do runs one command on master i.
func (e *env) do(t *testing.T, i int, args ...string) string {
	t.Helper()
	v, err := e.masters[i].Do(args...)
	if err != nil {
		t.Fatalf("master %d (%s): %s: %v", i, e.masters[i].Addr, strings.Join(args, " "), err)
	}
	return v
}

// values returns the holder of key on each master, "(nil)" where it is
// missing: a string's value; for the locks that are not strings, the
// members of a sorted set (Symfony's RedisStore) or the fields of a hash,
// sorted and joined by ",".
func (e *env) values(t *testing.T, key string) []string {
	t.Helper()
	out := make([]string, len(e.masters))
	for i := range e.masters {
		out[i] = e.holder(t, i, key)
	}
	return out
}

func (e *env) holder(t *testing.T, i int, key string) string {
	t.Helper()
	v, err := e.masters[i].Do("GET", key)
	if err == nil {
		return v
	}
	if !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("master %d (%s): GET %s: %v", i, e.masters[i].Addr, key, err)
	}
	var members string
	switch typ := e.do(t, i, "TYPE", key); typ {
	case "none", "string": // changed since the GET
		return e.holder(t, i, key)
	case "zset":
		members = e.do(t, i, "ZRANGE", key, "0", "-1")
	case "hash":
		members = e.do(t, i, "HKEYS", key)
	default:
		t.Fatalf("%s on master %d is a %s, not a lock", key, i, typ)
	}
	return sortedList(strings.Fields(members))
}

// sortedList joins xs, sorted, with ",": a set of holders as one word.
func sortedList(xs []string) string {
	xs = append([]string(nil), xs...)
	sort.Strings(xs)
	return strings.Join(xs, ",")
}

// pttls returns PTTL key on each master in ms (-2: missing).
func (e *env) pttls(t *testing.T, key string) []int64 {
	t.Helper()
	out := make([]int64, len(e.masters))
	for i := range e.masters {
		v := e.do(t, i, "PTTL", key)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("PTTL %s on master %d: %q", key, i, v)
		}
		out[i] = n
	}
	return out
}

// poll calls cond every 5ms until it reports true or 3s have passed, and
// returns the last result.
func poll(cond func() bool) bool {
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func count[T comparable](xs []T, f func(T) bool) int {
	n := 0
	for _, x := range xs {
		if f(x) {
			n++
		}
	}
	return n
}

// checkHeld: a client was just told it holds key with token, so a quorum
// of masters holds it now, and all of them soon (the masters past the
// quorum get the same write in the same batch). For a sorted-set or hash
// lock, token lists its members or fields, joined by "," in any order.
func (e *env) checkHeld(t *testing.T, key, token string) error {
	t.Helper()
	members := sortedList(strings.Split(token, ","))
	is := func(v string) bool { return v == token || v == members }
	if got := e.values(t, key); count(got, is) < e.quorum {
		return fmt.Errorf("%s = %q on %d masters, want a quorum (%d): %q", key, token, count(got, is), e.quorum, got)
	}
	if !poll(func() bool { return count(e.values(t, key), is) == len(e.masters) }) {
		return fmt.Errorf("%s = %q on fewer than all %d healthy masters: %q", key, token, len(e.masters), e.values(t, key))
	}
	return nil
}

// checkGranted is checkHeld for a grant that may have raced a release made
// through another proxy: a quorum holds key with token, and no master
// holds anything else once the release has run everywhere. The masters
// that the release had not reached when the grant arrived refused it, so
// such a lock may stay on a quorum only (a safe grant, as Redlock's).
func (e *env) checkGranted(t *testing.T, key, token string) error {
	t.Helper()
	members := sortedList(strings.Split(token, ","))
	mine := func(v string) bool { return v == token || v == members } // as checkHeld
	if got := e.values(t, key); count(got, mine) < e.quorum {
		return fmt.Errorf("%s = %q on %d masters, want a quorum (%d): %q", key, token, count(got, mine), e.quorum, got)
	}
	if !poll(func() bool {
		return count(e.values(t, key), func(v string) bool { return !mine(v) && v != "(nil)" }) == 0
	}) {
		return fmt.Errorf("%s held by another than %q on some master: %q", key, token, e.values(t, key))
	}
	return nil
}

// checkGone: key is on no master (a release deletes it everywhere).
func (e *env) checkGone(t *testing.T, key string) error {
	t.Helper()
	if !poll(func() bool { return count(e.values(t, key), func(v string) bool { return v != "(nil)" }) == 0 }) {
		return fmt.Errorf("%s still on masters after release: %q", key, e.values(t, key))
	}
	return nil
}

// checkPTTL: on a quorum of masters, key's PTTL is within [lo, hi] ms.
func (e *env) checkPTTL(t *testing.T, key string, lo, hi int64) error {
	t.Helper()
	got := e.pttls(t, key)
	if n := count(got, func(v int64) bool { return lo <= v && v <= hi }); n < e.quorum {
		return fmt.Errorf("PTTL %s in [%d, %d] ms on %d masters, want a quorum (%d): %v", key, lo, hi, n, e.quorum, got)
	}
	return nil
}

// keys returns the keys under prefix on each master, sorted.
func (e *env) keys(t *testing.T, prefix string) [][]string {
	t.Helper()
	out := make([][]string, len(e.masters))
	for i := range e.masters {
		v := e.do(t, i, "KEYS", prefix+"*")
		if v != "" {
			out[i] = strings.Fields(v)
			sort.Strings(out[i])
		}
	}
	return out
}

// checkKeys: every master holds exactly these keys under prefix.
func (e *env) checkKeys(t *testing.T, prefix string, want ...string) error {
	t.Helper()
	sort.Strings(want)
	ok := func() bool {
		for _, ks := range e.keys(t, prefix) {
			if strings.Join(ks, " ") != strings.Join(want, " ") {
				return false
			}
		}
		return true
	}
	if !poll(ok) {
		return fmt.Errorf("keys %s* on the masters = %q, want %q on each", prefix, e.keys(t, prefix), want)
	}
	return nil
}

// must fails t at once on a check's error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
