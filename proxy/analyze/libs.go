package analyze

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// maxResults bounds the values one library call may push (unpack,
// string.byte), as Lua 5.1's "too many results to unpack" does.
const maxResults = 8000

// luaNumber formats a number as Lua 5.1 does for tostring and `..` ("%.14g").
func luaNumber(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e14 {
		return strconv.FormatInt(int64(f), 10)
	}
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', 14, 64)
}

// toStr converts a string or a number as Lua's implicit conversion does.
func toStr(lv lua.LValue) (string, bool) {
	switch x := lv.(type) {
	case lua.LString:
		return string(x), true
	case lua.LNumber:
		return luaNumber(float64(x)), true
	}
	return "", false
}

// concat is the `..` operator (see compile): the VM's own would allocate
// the result without telling anyone.
func (v *vm) concat(L *lua.LState) int {
	a, b := L.Get(1), L.Get(2)
	sa, oka := toStr(a)
	sb, okb := toStr(b)
	if oka && okb {
		if !v.b.alloc(int64(len(sa) + len(sb))) {
			v.refuseLua(v.b.refusal)
		}
		L.Push(lua.LString(sa + sb))
		return 1
	}
	mm := L.GetMetaField(a, "__concat")
	if mm == lua.LNil {
		mm = L.GetMetaField(b, "__concat")
	}
	if mm == lua.LNil {
		bad := a
		if oka {
			bad = b
		}
		L.RaiseError("attempt to concatenate a %s value", bad.Type().String())
	}
	L.Push(mm)
	L.Push(a)
	L.Push(b)
	L.Call(2, 1)
	return 1
}

// forNumber returns the function a numeric for's value named what goes
// through (compile.go, forNames): a number as it is, a string that reads as
// one converted, as Lua 5.1's OP_FORPREP does, anything else the error
// Redis's Lua raises.
func forNumber(what string) lua.LGFunction {
	return func(L *lua.LState) int {
		switch x := L.Get(1).(type) {
		case lua.LNumber:
			L.Push(x)
			return 1
		case lua.LString:
			if n, ok := strNumber(string(x)); ok {
				L.Push(n)
				return 1
			}
		}
		L.RaiseError("'for' %s must be a number", what)
		return 0
	}
}

// strNumber reads s as a number the way the VM's arithmetic does.
func strNumber(s string) (lua.LNumber, bool) {
	s = strings.Trim(s, " \t\n")
	if v, err := strconv.ParseInt(s, 0, 64); err == nil {
		return lua.LNumber(v), true
	}
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		return lua.LNumber(v), true
	}
	return 0, false
}

// installBase replaces the base functions whose stock versions could let a
// script escape the sandbox, see its own machinery or work unboundedly.
func (v *vm) installBase(g *lua.LTable) {
	L := v.L
	orig := func(name string) lua.LGFunction { return g.RawGetString(name).(*lua.LFunction).GFunction }
	getmt, setmt, tostr := orig("getmetatable"), orig("setmetatable"), orig("tostring")
	g.RawSetString("pcall", L.NewFunction(v.pcall))
	g.RawSetString("xpcall", L.NewFunction(v.xpcall(orig("xpcall"))))
	g.RawSetString("getmetatable", L.NewFunction(func(L *lua.LState) int {
		if t, ok := L.Get(1).(*lua.LTable); ok && (v.hidden[t] || t == v.keys || t == v.argv) {
			L.Push(lua.LNil)
			return 1
		}
		return getmt(L)
	}))
	g.RawSetString("setmetatable", L.NewFunction(func(L *lua.LState) int {
		if t, ok := L.Get(1).(*lua.LTable); ok && (v.hidden[t] || t == v.keys || t == v.argv) {
			L.RaiseError("cannot change a protected metatable")
		}
		return setmt(L)
	}))
	g.RawSetString("rawset", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		if v.hidden[t] {
			L.RaiseError("Attempt to modify a readonly table")
		}
		t.RawSet(L.CheckAny(2), L.CheckAny(3))
		L.Push(t)
		return 1
	}))
	g.RawSetString("tostring", L.NewFunction(func(L *lua.LState) int {
		if n, ok := L.Get(1).(lua.LNumber); ok {
			L.Push(lua.LString(luaNumber(float64(n))))
			return 1
		}
		return tostr(L)
	}))
	g.RawSetString("unpack", L.NewFunction(func(L *lua.LState) int {
		t := L.CheckTable(1)
		i, j := L.OptInt(2, 1), L.OptInt(3, t.Len())
		if i > j {
			return 0
		}
		n := int64(j) - int64(i) + 1
		if n > maxResults || !v.b.charge(n) {
			L.RaiseError("too many results to unpack")
		}
		for k := i; k <= j; k++ {
			L.Push(t.RawGetInt(k))
		}
		return int(n)
	}))
}

// pcall is Lua's pcall, but with a handler that returns the error as it
// is: gopher-lua formats a stack trace for every error caught without one,
// which a script catching errors in a loop at depth would make cost far
// more than the instructions counted.
func (v *vm) pcall(L *lua.LState) int {
	fn := L.CheckAny(1)
	if fn.Type() != lua.LTFunction && L.GetMetaField(fn, "__call").Type() != lua.LTFunction {
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + fn.Type().String() + " value"))
		return 2
	}
	if err := L.PCall(L.GetTop()-1, lua.MultRet, v.keepError); err != nil {
		v.chargeError()
		L.Push(lua.LFalse)
		if ae, ok := err.(*lua.ApiError); ok {
			L.Push(ae.Object)
		} else {
			L.Push(lua.LString(err.Error()))
		}
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// errorCost is what catching an error charges: at the bottom of a deep
// stack gopher-lua still formats a trace of every frame, which a loop of
// failing pcalls would otherwise repeat for free.
const errorCost = 256

func (v *vm) chargeError() {
	if !v.b.charge(errorCost) {
		v.refuseLua(v.b.refusal)
	}
}

// xpcall is Lua's xpcall, charging for the errors it catches.
func (v *vm) xpcall(orig lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		n := orig(L)
		if n > 0 && L.Get(-n) == lua.LFalse {
			v.chargeError()
		}
		return n
	}
}

// installMath refuses randomness; the rest of math is pure.
func (v *vm) installMath(m *lua.LTable) {
	for _, name := range []string{"random", "randomseed"} {
		fn := "math." + name
		m.RawSetString(name, v.L.NewFunction(func(L *lua.LState) int {
			v.refuseLua(&Refusal{Class: ClassRandom, Command: fn, Reason: fn + " makes the script's behaviour depend on chance"})
			return 0
		}))
	}
}

// installTable bounds the table functions whose work or output grows with
// their input.
func (v *vm) installTable(t *lua.LTable) {
	L := v.L
	orig := func(name string) lua.LGFunction { return t.RawGetString(name).(*lua.LFunction).GFunction }
	insert, remove, sortFn := orig("insert"), orig("remove"), orig("sort")
	charged := func(f lua.LGFunction, cost func(n int) int64) *lua.LFunction {
		return L.NewFunction(func(L *lua.LState) int {
			if !v.b.charge(cost(L.CheckTable(1).Len())) {
				v.refuseLua(v.b.refusal)
			}
			return f(L)
		})
	}
	linear := func(n int) int64 { return int64(n)/8 + 1 }
	t.RawSetString("insert", charged(insert, linear))
	t.RawSetString("remove", charged(remove, linear))
	t.RawSetString("sort", charged(sortFn, func(n int) int64 { return int64(n)*int64(1+bitsLen(n)) + 1 }))
	t.RawSetString("concat", L.NewFunction(v.tableConcat))
}

func bitsLen(n int) int { return len(strconv.FormatInt(int64(n), 2)) }

func (v *vm) tableConcat(L *lua.LState) int {
	t := L.CheckTable(1)
	sep := L.OptString(2, "")
	i, j := L.OptInt(3, 1), L.OptInt(4, t.Len())
	if i > j {
		L.Push(lua.LString(""))
		return 1
	}
	if !v.b.charge(int64(j-i)/8 + 1) {
		v.refuseLua(v.b.refusal)
	}
	parts := make([]string, 0, min(j-i+1, maxResults))
	total := int64(0)
	for k := i; k <= j; k++ {
		s, ok := toStr(t.RawGetInt(k))
		if !ok {
			L.RaiseError("invalid value (at index %d) in table for 'concat'", k)
		}
		total += int64(len(s) + len(sep))
		if total > v.b.opt.MaxRunBytes {
			break // alloc below refuses
		}
		parts = append(parts, s)
	}
	if !v.b.alloc(total) {
		v.refuseLua(v.b.refusal)
	}
	L.Push(lua.LString(strings.Join(parts, sep)))
	return 1
}
