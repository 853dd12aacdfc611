package analyze

import (
	"errors"

	lua "github.com/yuin/gopher-lua"
)

// outcome is what one run of the script produced.
type outcome struct {
	reply Reply  // the script's reply; an ErrorReply when err is set
	err   string // the script's error, "" when it returned
	pre   keyspace
	r     *run // the run: final keyspace in r.db, the commands in r.calls
}

// argMeta returns a metatable for KEYS or ARGV whose __index records the
// highest index a script read beyond the end: that is how the analysis
// learns how many KEYS and ARGV a script needs. getmetatable hides them.
func (v *vm) argMeta(miss func(*run) *int) *lua.LTable {
	mt := v.L.NewTable()
	mt.RawSetString("__index", v.L.NewFunction(func(L *lua.LState) int {
		if n, ok := L.Get(2).(lua.LNumber); ok && v.r != nil && float64(n) == float64(int(n)) && n >= 1 {
			if p := miss(v.r); int(n) > *p {
				*p = int(n)
			}
		}
		L.Push(lua.LNil)
		return 1
	}))
	return mt
}

// exec runs the script once on r. A refusal stops the analysis; a script
// error is an outcome like any other.
func (v *vm) exec(r *run) (outcome, *Refusal) {
	v.b.startRun()
	v.r = r
	defer func() { v.r = nil }()
	o := outcome{pre: r.db.clone(), r: r}
	v.keys = v.argTable(r.vals[:r.nkeys], v.keysMT)
	v.argv = v.argTable(r.vals[r.nkeys:], v.argvMT)
	g := v.L.G.Global
	g.RawSetString("KEYS", v.keys)
	g.RawSetString("ARGV", v.argv)
	v.L.Push(v.L.NewFunctionFromProto(v.proto))
	err := v.L.PCall(0, 1, nil)
	if v.b.refusal != nil {
		if v.b.refusal.Probe == "" {
			v.b.refusal.Probe = r.probe
		}
		return o, v.b.refusal
	}
	if err != nil {
		o.err = errorText(err)
		o.reply = errReply("ERR " + o.err)
	} else {
		o.reply = v.luaToReply(v.L.Get(-1), 0)
		v.L.Pop(1)
		if v.b.refusal != nil {
			return o, v.b.refusal
		}
	}
	return o, nil
}

func (v *vm) argTable(vals []string, mt *lua.LTable) *lua.LTable {
	t := v.L.CreateTable(len(vals), 0)
	for _, s := range vals {
		t.Append(lua.LString(s))
	}
	v.L.SetMetatable(t, mt)
	return t
}

// errorText is the message of a script error: the error value when it is a
// string, else its type.
func errorText(err error) string {
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		if s, ok := ae.Object.(lua.LString); ok {
			return string(s)
		}
		if t, ok := ae.Object.(*lua.LTable); ok {
			if e, ok := t.RawGetString("err").(lua.LString); ok {
				return string(e)
			}
		}
		return ae.Object.Type().String() + " error value"
	}
	return err.Error()
}
