package analyze

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// ReplyType is the RESP2 type of a reply.
type ReplyType uint8

const (
	NilReply    ReplyType = iota + 1 // null bulk string ($-1)
	StatusReply                      // +text
	ErrorReply                       // -text
	IntReply                         // :n
	BulkReply                        // $len text
	ArrayReply                       // *n elements
)

// Reply is one RESP reply: a master's answer to a script, or a command's
// answer inside the model.
type Reply struct {
	Type  ReplyType
	Str   string  // StatusReply, ErrorReply, BulkReply
	Int   int64   // IntReply
	Elems []Reply // ArrayReply
}

var (
	nilReply = Reply{Type: NilReply}
	okReply  = Reply{Type: StatusReply, Str: "OK"}
)

func intReply(n int64) Reply      { return Reply{Type: IntReply, Int: n} }
func bulkReply(s string) Reply    { return Reply{Type: BulkReply, Str: s} }
func errReply(s string) Reply     { return Reply{Type: ErrorReply, Str: s} }
func arrayReply(e ...Reply) Reply { return Reply{Type: ArrayReply, Elems: e} }

// String renders r as redis-cli would, compactly: nil, +OK, :1, "OK",
// -ERR text, [:1 :2000].
func (r Reply) String() string {
	switch r.Type {
	case NilReply:
		return "nil"
	case StatusReply:
		return "+" + r.Str
	case ErrorReply:
		return "-" + r.Str
	case IntReply:
		return ":" + strconv.FormatInt(r.Int, 10)
	case BulkReply:
		return strconv.Quote(r.Str)
	case ArrayReply:
		parts := make([]string, len(r.Elems))
		for i, e := range r.Elems {
			parts[i] = e.String()
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return "?"
}

// Equal reports whether two replies are the same RESP value.
func (r Reply) Equal(o Reply) bool {
	if r.Type != o.Type || r.Str != o.Str || r.Int != o.Int || len(r.Elems) != len(o.Elems) {
		return false
	}
	for i := range r.Elems {
		if !r.Elems[i].Equal(o.Elems[i]) {
			return false
		}
	}
	return true
}

// luaToReply converts a script's return value as Redis does: numbers are
// truncated to integers, true is 1 and false nil, a table with a string
// err or ok field is an error or status reply, any other table an array
// that stops at its first nil.
func (v *vm) luaToReply(lv lua.LValue, depth int) Reply {
	v.b.charge(1)
	switch x := lv.(type) {
	case lua.LNumber:
		return intReply(truncInt(float64(x)))
	case lua.LString:
		return bulkReply(string(x))
	case lua.LBool:
		if x {
			return intReply(1)
		}
		return nilReply
	case *lua.LTable:
		if e, ok := x.RawGetString("err").(lua.LString); ok {
			return errReply(string(e))
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return Reply{Type: StatusReply, Str: string(s)}
		}
		if depth > 100 {
			return errReply("ERR reached lua stack limit")
		}
		out := Reply{Type: ArrayReply}
		for i := 1; v.b.refusal == nil; i++ {
			e := x.RawGetInt(i)
			if e == lua.LNil {
				break
			}
			out.Elems = append(out.Elems, v.luaToReply(e, depth+1))
		}
		return out
	}
	return nilReply
}

// truncInt is C's (long long) cast of a double as x86-64 performs it:
// truncation, and the "integer indefinite" MinInt64 out of range or for
// NaN, which is what Redis answers there.
func truncInt(f float64) int64 {
	if math.IsNaN(f) || f >= math.MaxInt64 || f < math.MinInt64 {
		return math.MinInt64
	}
	return int64(f)
}

// replyToLua converts a command's reply for the script as Redis does:
// integers to numbers, bulk strings to strings, nil to false, status to
// {ok=…}, error to {err=…} (redis.pcall; redis.call raises instead), arrays
// to tables.
func (v *vm) replyToLua(r Reply) lua.LValue {
	switch r.Type {
	case IntReply:
		return lua.LNumber(r.Int)
	case BulkReply:
		return lua.LString(r.Str)
	case StatusReply:
		t := v.L.NewTable()
		t.RawSetString("ok", lua.LString(r.Str))
		return t
	case ErrorReply:
		t := v.L.NewTable()
		t.RawSetString("err", lua.LString(r.Str))
		return t
	case ArrayReply:
		t := v.L.CreateTable(len(r.Elems), 0)
		for _, e := range r.Elems {
			t.Append(v.replyToLua(e))
		}
		return t
	}
	return lua.LFalse
}

// redisArg converts one argument of redis.call as Redis 7 does: strings
// as they are, numbers with "%.17g".
func redisArg(lv lua.LValue) (string, bool) {
	switch x := lv.(type) {
	case lua.LString:
		return string(x), true
	case lua.LNumber:
		f := float64(x)
		if f == math.Trunc(f) && math.Abs(f) < 1e17 {
			return strconv.FormatInt(int64(f), 10), true
		}
		switch {
		case math.IsInf(f, 1):
			return "inf", true
		case math.IsInf(f, -1):
			return "-inf", true
		case math.IsNaN(f):
			return "nan", true
		}
		return strconv.FormatFloat(f, 'g', 17, 64), true
	}
	return "", false
}
