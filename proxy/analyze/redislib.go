package analyze

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// redisLib is the `redis` table: call and pcall answered by the model, and
// the helpers Redis 7 provides.
func (v *vm) redisLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fns := map[string]lua.LGFunction{
		"call":  v.redisCall(true),
		"pcall": v.redisCall(false),
		"status_reply": func(L *lua.LState) int {
			r := L.NewTable()
			r.RawSetString("ok", lua.LString(L.CheckString(1)))
			L.Push(r)
			return 1
		},
		"error_reply": func(L *lua.LState) int {
			r := L.NewTable()
			r.RawSetString("err", lua.LString(errorCode(L.CheckString(1))))
			L.Push(r)
			return 1
		},
		"sha1hex": func(L *lua.LState) int {
			s := L.CheckString(1)
			if !v.b.charge(int64(len(s))/64 + 1) {
				v.refuseLua(v.b.refusal)
			}
			sum := sha1.Sum([]byte(s))
			L.Push(lua.LString(hex.EncodeToString(sum[:])))
			return 1
		},
		"log": func(L *lua.LState) int {
			if L.GetTop() < 2 {
				L.RaiseError("redis.log() requires two arguments or more.")
			}
			if _, ok := L.Get(1).(lua.LNumber); !ok {
				L.RaiseError("First argument must be a number (log level).")
			}
			return 0
		},
		// Replication settings do not change what a script does to the keys.
		"set_repl":           func(L *lua.LState) int { return 0 },
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	for name, n := range map[string]int{"LOG_DEBUG": 0, "LOG_VERBOSE": 1, "LOG_NOTICE": 2, "LOG_WARNING": 3,
		"REPL_NONE": 0, "REPL_AOF": 1, "REPL_SLAVE": 2, "REPL_REPLICA": 2, "REPL_ALL": 3} {
		t.RawSetString(name, lua.LNumber(n))
	}
	return t
}

// errorCode gives an error_reply text an error code, as Redis 7 does: a
// leading '-' is dropped, and a text that does not start with an upper-case
// word gets "ERR ".
func errorCode(s string) string {
	s = strings.TrimPrefix(s, "-")
	word, _, found := strings.Cut(s, " ")
	if !found || word == "" || strings.ToUpper(word) != word {
		return "ERR " + s
	}
	return s
}

// redisCall is redis.call (raise true) or redis.pcall: the arguments are
// converted as Redis converts them, the model executes the command, and its
// reply is converted back. redis.call raises a command's error as a string
// without position, as Redis 7 does; redis.pcall returns it as {err=…}.
func (v *vm) redisCall(raise bool) lua.LGFunction {
	return func(L *lua.LState) int {
		n := L.GetTop()
		if n == 0 {
			L.Error(lua.LString("ERR Please specify at least one argument for this redis lib call"), 0)
		}
		args := make([]string, n)
		size := int64(0)
		for i := range args {
			s, ok := redisArg(L.Get(i + 1))
			if !ok {
				L.Error(lua.LString("ERR Lua redis lib command arguments must be strings or integers"), 0)
			}
			args[i] = s
			size += int64(len(s))
		}
		// The model keeps what the arguments carry: count their bytes.
		if !v.b.alloc(size) || !v.b.charge(int64(n)) {
			v.refuseLua(v.b.refusal)
		}
		r := v.r.exec(args)
		// The reply becomes Lua values: count them, or a loop of ZRANGE
		// over a large set would allocate without limit.
		if n, size := replySize(r); v.b.refusal == nil && (!v.b.charge(n) || !v.b.alloc(size)) {
			v.refuseLua(v.b.refusal)
		}
		if v.b.refusal != nil {
			v.refuseLua(v.b.refusal)
		}
		if r.Type == ErrorReply && raise {
			L.Error(lua.LString(r.Str), 0)
		}
		L.Push(v.replyToLua(r))
		return 1
	}
}

// replySize counts a reply's values and string bytes.
func replySize(r Reply) (n, bytes int64) {
	n, bytes = 1, int64(len(r.Str))
	for _, e := range r.Elems {
		en, eb := replySize(e)
		n, bytes = n+en, bytes+eb
	}
	return n, bytes
}
