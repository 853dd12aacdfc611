package analyze

import (
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"
)

// hostile scripts: each must end in a refusal of its class, with its
// reason, within the budget.
var hostile = []struct {
	name  string
	body  string
	class Class
	text  string
}{
	{"endless loop", `while true do end`, ClassBudget, "a probe run exceeded 20000 steps"},
	{"endless loop behind pcall", `while true do pcall(function() while true do end end) end`, ClassBudget, "steps"},
	{"doubling string", `local s = "x" while true do s = s .. s end`, ClassBudget, "bytes of strings"},
	{"string.rep huge", `return string.rep("x", 1e9)`, ClassBudget, "bytes of strings"},
	{"string.rep in a loop", `local t = {} for i = 1, 1e6 do t[i] = string.rep("x", 100000) end`, ClassBudget, "bytes"},
	{"table growth", `local t = {} local i = 0 while true do i = i + 1 t[i] = i end`, ClassBudget, "steps"},
	{"tables of tables", `local t = {} while true do t[#t + 1] = {{}, {}, {}} end`, ClassBudget, "steps"},
	// These two end on the analysis's steps, or (slower machines, the race
	// detector) on its CPU time first.
	{"allocates in every run", `local t = {} for i = 1, 2500 do t[i] = {i} end return redis.call("DEL", KEYS[1])`, ClassBudget, "the analysis "},
	{"closures in every run", `for i = 1, 5000 do local f = function() return i end end return redis.call("DEL", KEYS[1])`, ClassBudget, "the analysis "},
	{"strings in every run", `local t = {} for i = 1, 100 do t[i] = string.rep("x", 1000) .. i end return redis.call("DEL", KEYS[1])`, ClassBudget, "the analysis built more than 8388608 bytes"},
	{"unpack growth", `local t = {1} while true do t = {unpack(t), unpack(t)} end`, ClassBudget, "steps"},
	{"format width", `return string.format("%999999999d", 1)`, ClassBehaviour, "invalid format (width or precision too long)"},
	{"deep recursion", `local function f(n) return 1 + f(n + 1) end return f(1)`, ClassBehaviour, "stack overflow"},
	{"deep recursion through pcall", `local function f() pcall(f) while true do pcall(error, "x") end end f()`, ClassBudget, "steps"},
	{"recursive __index", `local t = setmetatable({}, {__index = function(t, k) return t[k] end}) return t.x`, ClassBehaviour, "stack overflow"},
	{"deep JSON", `return cjson.decode(string.rep("[", 100000))`, ClassBehaviour, "Found too many nested data structures (1001)"},
	{"many JSON tables", `local t = {} while true do t[#t+1] = cjson.decode("[" .. string.rep("[],", 10000) .. "[]]") end`, ClassBudget, ""},
	{"ZRANGE of a growing set", `for i = 1, 1e6 do redis.call("ZADD", KEYS[1], i, i) redis.call("ZRANGE", KEYS[1], 0, -1) end`, ClassBudget, ""},
	{"SELECT 1", `redis.call("SELECT", 1) return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, ClassDatabase, "SELECT 1: lockproxy serves database 0 only"},
	{"key built by concatenation", `return redis.call("SET", KEYS[1] .. ":x", ARGV[1], "NX", "PX", ARGV[2])`, ClassKey, "does not come verbatim from KEYS or ARGV"},
	{"FLUSHALL", `redis.call("FLUSHALL") return 1`, ClassCommand, "FLUSHALL is not a command the analyzer models"},
	{"FLUSHALL behind pcall", `pcall(redis.call, "FLUSHALL") return redis.call("DEL", KEYS[1])`, ClassCommand, "FLUSHALL"},
	{"CONFIG SET", `redis.pcall("CONFIG", "SET", "maxmemory-policy", "allkeys-lru") return 1`, ClassCommand, "CONFIG is not a command"},
	{"EVAL", `return redis.call("EVAL", "return 1", 0)`, ClassCommand, "EVAL is not a command"},
	{"KEYS", `return redis.call("KEYS", "*")`, ClassCommand, "KEYS is not a command"},
	{"math.random", `if math.random() < 0.5 then return redis.call("DEL", KEYS[1]) end return 0`, ClassRandom, "math.random makes the script's behaviour depend on chance"},
	{"os.time", `return redis.call("SET", KEYS[1], ARGV[1], "EXAT", os.time() + 10)`, ClassClock, "os.*"},
	{"loadstring", `return loadstring("return redis.call('DEL', KEYS[1])")()`, ClassLibrary, "loadstring runs code built at run time"},
	{"coroutine", `local co = coroutine.create(function() end) return 1`, ClassLibrary, "coroutine"},
	{"cmsgpack", `return cmsgpack.pack({1})`, ClassLibrary, "cmsgpack"},
	{"string pattern", `if string.match(ARGV[1], "^(a+)+$") then return 1 end return 0`, ClassLibrary, "Lua patterns are not run"},
	{"global mutated across runs", `table.insert(string, "x") if #string > 1 then return redis.call("DEL", KEYS[1]) end return 0`, ClassNondeterministic, `the script changed string[`},
	{"library function replaced", `redis.sha1hex = nil return 1`, ClassNondeterministic, `the script changed redis["sha1hex"]`},
	{"new global", `counter = (counter or 0) + 1 return counter`, ClassBehaviour, "Script attempted to access nonexistent global variable 'counter'"},
	{"table address in the reply", `redis.call("GET", KEYS[1]) return tostring({})`, ClassNondeterministic, "two identical runs differ"},
	{"the clock in the reply", `redis.call("GET", KEYS[1]) return redis.call("TIME")[1]`, ClassClock, "the reply"},
	{"the clock in a value", `return redis.call("SET", KEYS[1], redis.call("TIME")[1], "NX", "PX", ARGV[1])`, ClassClock, "the content of key KEYS[1]"},
	{"the clock doubled in an expiry", `local t = redis.call("TIME") return redis.call("SET", KEYS[1], ARGV[1], "NX", "PXAT", t[1] * 2000)`, ClassClock, "the expiry of key KEYS[1]"},
	{"lock without expiry", `return redis.call("SET", KEYS[1], ARGV[1], "NX")`, ClassBehaviour, "without an expiry"},
	{"extends another's lock", `return redis.call("PEXPIRE", KEYS[1], ARGV[1])`, ClassBehaviour, "re-sets the TTL of KEYS[1] whoever holds it"},
	{"mode argument forcing", `if ARGV[3] == "force" then return redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2]) end
return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, ClassBehaviour, `with ARGV[3] = "force"`},
	{"another key forcing", `if redis.call("GET", KEYS[2]) == "admin" then return redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2]) end
return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, ClassBehaviour, `with KEYS[2] holding "admin"`},
	{"body too large", "return 1 --" + strings.Repeat("x", 20000), ClassCompile, "more than the 16384"},
	{"not Lua", `return redis.call(`, ClassCompile, "not valid Lua"},
	{"goto", `goto x ::x:: return 1`, ClassCompile, "goto"},
	{"deep nesting", "return " + strings.Repeat("- ", 300) + "1", ClassCompile, "nests"},
	{"deep table nesting", "return " + strings.Repeat("{", 5000) + strings.Repeat("}", 5000), ClassCompile, "nests"},
}

func TestHostile(t *testing.T) {
	for _, c := range hostile {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			sem, err := Analyze([]byte(c.body), Options{})
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("got %v, %v; want a refusal", sem, err)
			}
			if r.Class != c.class || !strings.Contains(r.Error(), c.text) {
				t.Errorf("got %s refusal %q; want %s containing %q", r.Class, r, c.class, c.text)
			}
			if d := time.Since(start); d > 5*time.Second { // the refusal comes from steps or bytes, long before the 5s backstop
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestHostileMemory measures what a hostile analysis allocates in total
// (garbage included, an upper bound of what it holds at once) and the
// largest heap seen while it runs, and holds both under bounds derived
// from the default budgets.
func TestHostileMemory(t *testing.T) {
	const (
		maxTotal = 128 << 20 // bytes allocated by one analysis, all garbage included
		maxPeak  = 32 << 20  // heap growth while it runs
	)
	for _, c := range hostile {
		total, peak := measure(func() { Analyze([]byte(c.body), Options{}) })
		t.Logf("%-32s allocated %6.1f MiB, heap +%5.1f MiB", c.name, float64(total)/(1<<20), float64(peak)/(1<<20))
		if total > maxTotal || peak > maxPeak {
			t.Errorf("%s: allocated %d bytes, heap grew by %d", c.name, total, peak)
		}
	}
}

// measure runs f and returns the bytes it allocated and how much the heap
// grew at most, sampled every 100µs.
func measure(f func()) (total, peak uint64) {
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var maxHeap atomic.Uint64
	done := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Microsecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > maxHeap.Load() {
				maxHeap.Store(m.HeapAlloc)
			}
		}
	}()
	f()
	close(done)
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.HeapAlloc > maxHeap.Load() {
		maxHeap.Store(after.HeapAlloc)
	}
	if h := maxHeap.Load(); h > before.HeapAlloc {
		peak = h - before.HeapAlloc
	}
	return after.TotalAlloc - before.TotalAlloc, peak
}

// TestRefusalTextBounded: a refusal quotes what the script built at run
// time (a key, an error message, a reply), and its text goes to the client
// and into the proxy's cache of verdicts by sha1. Each field is cut to
// MaxRefusalField, so a script cannot make its refusal as large as its
// string budget (a 120 KB key quoted three times was 1.4 MB, and 4,096
// of them in the cache 6 GB).
func TestRefusalTextBounded(t *testing.T) {
	const most = len("script refused: ") + 4*(MaxRefusalField+len("probe: ; ")) + 2
	for _, c := range []struct{ name, body string }{
		{"key built at run time", `local k = string.rep("\200", 120000) return redis.call("GET", k)`},
		{"long error message", `error(string.rep("e", 200000))`},
		{"long error after a key", `redis.call("GET", KEYS[1]) error(string.rep("é", 100000))`},
		{"long reply", `redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) return string.rep("r", 20000)`},
		{"long command name", `return redis.call(string.rep("c", 50000), KEYS[1])`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Analyze([]byte(c.body), Options{})
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("got %v; want a refusal", err)
			}
			msg := r.Error()
			if len(msg) > most {
				t.Errorf("refusal text is %d bytes, want at most %d: %.300q…", len(msg), most, msg)
			}
			if !utf8.ValidString(msg) {
				t.Errorf("refusal text is not valid UTF-8 after the cut: %.300q…", msg)
			}
			if !strings.Contains(msg, "bytes)") {
				t.Errorf("refusal text does not say what was cut: %q", msg)
			}
		})
	}
}

// TestHostileCPU: a step that hashes a long string used as a table key
// costs a thousand times a plain step, so the step count let such a
// script take seconds of the proxy's CPU per analysis (found by review:
// 3-4 s each, and a legitimate client's new script waited 20 s behind a
// few of them). The analysis's own CPU time is bounded too (MaxCPU).
func TestHostileCPU(t *testing.T) {
	body := `local a = string.rep("a", 200000)
local t = {}
for i = 1, 6000 do t[a] = i end
if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end
return 0`
	start := time.Now()
	_, err := Analyze([]byte(body), Options{MaxCPU: 100 * time.Millisecond})
	var r *Refusal
	if !errors.As(err, &r) || r.Class != ClassBudget || !strings.Contains(r.Reason, "more than 100ms of CPU") {
		t.Fatalf("got %v; want a budget refusal for the CPU it used", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the analysis took %v", d)
	}
	if got := (Options{}).withDefaults().MaxCPU; got != 500*time.Millisecond*raceFactor {
		t.Errorf("default MaxCPU %v, want 500ms, times %d under the race detector (docs/analyzer.md)", got, raceFactor)
	}
}
