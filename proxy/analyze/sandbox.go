package analyze

import (
	"fmt"
	"sort"

	lua "github.com/yuin/gopher-lua"
)

// vm is one Lua state with Redis's script environment, reused by every run
// of one analysis. Redis 7 makes the globals and the library tables
// read-only, so no state survives from one EVAL to the next; here the same
// is enforced by erroring on new globals, by refusing when a run changed a
// library table (checked after every run against a snapshot), and by fresh
// KEYS and ARGV tables per run.
type vm struct {
	L      *lua.LState
	proto  *lua.FunctionProto
	b      *budget
	r      *run                 // the run in progress
	keys   *lua.LTable          // this run's KEYS
	argv   *lua.LTable          // this run's ARGV
	keysMT *lua.LTable          // records reads of KEYS beyond its end
	argvMT *lua.LTable          // same for ARGV
	hidden map[*lua.LTable]bool // tables whose metatable belongs to the sandbox
	frozen []frozenTable
	null   *lua.LUserData // cjson.null
	// keepError is pcall's error handler: it returns the error unchanged.
	keepError *lua.LFunction
}

// frozenTable is a library table and its entries when the sandbox was
// built, KEYS and ARGV aside (every run replaces them).
type frozenTable struct {
	name    string
	t       *lua.LTable
	entries []kv
}

type kv struct{ k, v lua.LValue }

// refusedGlobals are globals whose use is refused outright, with the reason
// shown in the refusal. Redis lacks most of them; those it has (load,
// loadstring, coroutine, cmsgpack, struct, gcinfo…) the model does not provide.
var refusedGlobals = map[string]string{
	"os":             "os.* (clock and process) is not available to lock scripts",
	"io":             "io.* is not available to lock scripts",
	"debug":          "debug.* is not available to lock scripts",
	"require":        "require is not available to lock scripts",
	"module":         "module is not available to lock scripts",
	"dofile":         "dofile is not available to lock scripts",
	"loadfile":       "loadfile is not available to lock scripts",
	"load":           "load runs code built at run time, which the analyzer does not analyze",
	"loadstring":     "loadstring runs code built at run time, which the analyzer does not analyze",
	"setfenv":        "setfenv is not available to lock scripts",
	"getfenv":        "getfenv is not available to lock scripts",
	"newproxy":       "newproxy is not available to lock scripts",
	"coroutine":      "coroutine.* is not provided by the analyzer",
	"cmsgpack":       "cmsgpack.* is not provided by the analyzer",
	"struct":         "struct.* is not provided by the analyzer",
	"collectgarbage": "collectgarbage reads the memory state, which is not deterministic",
	"gcinfo":         "gcinfo reads the memory state, which is not deterministic",
}

func newVM(proto *lua.FunctionProto, b *budget) *vm {
	L := lua.NewState(lua.Options{
		SkipOpenLibs: true,
		// Lua 5.1 allows 200 nested C calls; Lua-to-Lua calls are not Go
		// recursion in gopher-lua but Lua-Go-Lua ones (pcall, sort, metamethods)
		// are, and this bounds both.
		CallStackSize:    200,
		RegistrySize:     1024,
		RegistryMaxSize:  16 * 1024, // values on the Lua stack: 256 KiB at most
		RegistryGrowStep: 1024,
	})
	v := &vm{L: L, proto: proto, b: b, hidden: map[*lua.LTable]bool{}}
	v.keepError = L.NewFunction(func(L *lua.LState) int { return 1 })
	L.SetContext(b)
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	g := L.G.Global
	for _, name := range []string{"collectgarbage", "dofile", "getfenv", "load", "loadfile", "loadstring",
		"module", "require", "newproxy", "print", "setfenv", "_printregs", "_GOPHER_LUA_VERSION"} {
		g.RawSetString(name, lua.LNil)
	}
	v.installBase(g)
	v.installString(g.RawGetString("string").(*lua.LTable))
	v.installTable(g.RawGetString("table").(*lua.LTable))
	v.installMath(g.RawGetString("math").(*lua.LTable))
	g.RawSetString("bit", v.bitLib())
	g.RawSetString("cjson", v.cjsonLib())
	g.RawSetString("redis", v.redisLib())
	g.RawSetString(concatName, L.NewFunction(v.concat))
	for i, what := range [3]string{"initial value", "limit", "step"} {
		g.RawSetString(forNames[i], L.NewFunction(forNumber(what)))
	}
	v.keysMT = v.argMeta(func(r *run) *int { return &r.keysMiss })
	v.argvMT = v.argMeta(func(r *run) *int { return &r.argvMiss })
	g.RawSetString("KEYS", L.NewTable())
	g.RawSetString("ARGV", L.NewTable())
	v.protect(g, "_G", v.globalIndex)
	for _, name := range []string{"string", "table", "math", "bit", "cjson", "redis"} {
		t := g.RawGetString(name).(*lua.LTable)
		v.protect(t, name, v.libIndex(name))
	}
	return v
}

// protect makes t read-only as Redis 7 does (new keys error), answers
// missing keys with index, and snapshots t so that a run that changed it
// anyway (an existing key, or table.insert) is refused.
func (v *vm) protect(t *lua.LTable, name string, index lua.LGFunction) {
	mt := v.L.NewTable()
	mt.RawSetString("__newindex", v.L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	mt.RawSetString("__index", v.L.NewFunction(index))
	v.L.SetMetatable(t, mt)
	v.hidden[t] = true
	f := frozenTable{name: name, t: t}
	t.ForEach(func(k, val lua.LValue) {
		if k != lua.LString("KEYS") && k != lua.LString("ARGV") {
			f.entries = append(f.entries, kv{k, val})
		}
	})
	sort.Slice(f.entries, func(i, j int) bool { return lua.LVAsString(f.entries[i].k) < lua.LVAsString(f.entries[j].k) })
	v.frozen = append(v.frozen, f)
}

// globalIndex answers a read of a global that does not exist: a refusal for
// the facilities the analyzer will not model, Redis's own error otherwise.
func (v *vm) globalIndex(L *lua.LState) int {
	name := L.CheckString(2)
	if why, ok := refusedGlobals[name]; ok {
		class := ClassLibrary
		if name == "os" {
			class = ClassClock
		}
		v.refuseLua(&Refusal{Class: class, Command: name, Reason: why})
	}
	L.RaiseError("Script attempted to access nonexistent global variable '%s'", name)
	return 0
}

// libIndex answers a read of a missing field of a library table: Redis's
// libraries have fields this sandbox does not provide (cjson.encode_keep_buffer,
// redis.setresp…), and using one is refused by name rather than read as nil.
// The string table is also every string's __index, where a missing field
// is an ordinary nil (("x").owner).
func (v *vm) libIndex(lib string) lua.LGFunction {
	return func(L *lua.LState) int {
		key := L.Get(2)
		if s, ok := key.(lua.LString); ok && lib != "string" {
			v.refuseLua(&Refusal{Class: ClassLibrary, Command: lib + "." + string(s), Reason: lib + "." + string(s) + " is not provided by the analyzer"})
		}
		L.Push(lua.LNil)
		return 1
	}
}

// refuseLua records r and unwinds the running script. The error is
// catchable by the script's pcall, but the budget is closed from now on, so
// the next instruction raises again until the script is out.
func (v *vm) refuseLua(r *Refusal) {
	if v.r != nil && r.Probe == "" {
		r.Probe = v.r.probe
	}
	v.b.fail(r)
	v.L.RaiseError("%s", v.b.refusal.Error())
}

// checkFrozen refuses a script that changed a library table or the
// globals: an existing entry replaced, or anything added to the array part
// (table.insert). New keys cannot be added: __newindex raises, as in Redis,
// and rawset and setmetatable refuse these tables.
func (v *vm) checkFrozen() *Refusal {
	for _, f := range v.frozen {
		changed := ""
		if f.t.Len() != 0 {
			changed = "1"
		}
		for _, e := range f.entries {
			if changed == "" && f.t.RawGet(e.k) != e.v {
				changed = lua.LVAsString(e.k)
			}
		}
		if changed != "" {
			return &Refusal{Class: ClassNondeterministic, Command: f.name,
				Reason: fmt.Sprintf("the script changed %s[%q]; Redis keeps library tables read-only and a script must not carry state from one run to the next", f.name, changed)}
		}
	}
	return nil
}
