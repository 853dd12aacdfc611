package analyze

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// maxJSONDepth is Lua CJSON's default nesting limit for encode and decode.
const maxJSONDepth = 1000

// cjsonLib is the part of Lua CJSON lock scripts use: encode, decode and
// null. Its other functions are refused by name (see libIndex).
func (v *vm) cjsonLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	v.null = L.NewUserData()
	t.RawSetString("null", v.null)
	t.RawSetString("encode", L.NewFunction(func(L *lua.LState) int {
		var b strings.Builder
		v.jsonEncode(L, &b, L.CheckAny(1), 0)
		L.Push(lua.LString(b.String()))
		return 1
	}))
	t.RawSetString("decode", L.NewFunction(func(L *lua.LState) int {
		s := L.CheckString(1)
		if !v.b.charge(int64(len(s))/16 + 1) {
			v.refuseLua(v.b.refusal)
		}
		v.noteDecoded(s)
		d := jsonDecoder{v: v, s: s}
		val := d.value(0)
		d.space()
		if d.i < len(s) {
			d.fail("the end of the string")
		}
		L.Push(val)
		return 1
	}))
	return t
}

// noteDecoded records which keys hold the string being decoded: the
// analysis then tries JSON values in them.
func (v *vm) noteDecoded(s string) {
	if v.r == nil {
		return
	}
	for name, e := range v.r.db {
		if e.typ == typeString && e.str == s {
			if v.r.decoded == nil {
				v.r.decoded = map[string]bool{}
			}
			v.r.decoded[name] = true
		}
	}
}

func (v *vm) jsonEncode(L *lua.LState, b *strings.Builder, lv lua.LValue, depth int) {
	if depth > maxJSONDepth {
		L.RaiseError("Cannot serialise, excessive nesting (%d)", depth)
	}
	before := b.Len()
	switch x := lv.(type) {
	case *lua.LNilType:
		b.WriteString("null")
	case lua.LBool:
		b.WriteString(strconv.FormatBool(bool(x)))
	case lua.LNumber:
		f := float64(x)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			L.RaiseError("Cannot serialise number: must not be NaN or Inf")
		}
		b.WriteString(luaNumber(f))
	case lua.LString:
		jsonQuote(b, string(x))
	case *lua.LUserData:
		if x != v.null {
			L.RaiseError("Cannot serialise userdata: type not supported")
		}
		b.WriteString("null")
	case *lua.LTable:
		v.jsonTable(L, b, x, depth)
	default:
		L.RaiseError("Cannot serialise %s: type not supported", lv.Type().String())
	}
	if !v.b.alloc(int64(b.Len() - before)) {
		v.refuseLua(v.b.refusal)
	}
}

// jsonTable encodes a table as CJSON does: an array when every key is a
// positive integer and the array is not excessively sparse, else an object
// with string or number keys. Object keys are sorted here; CJSON follows the
// hash order, which differs between Lua builds anyway.
func (v *vm) jsonTable(L *lua.LState, b *strings.Builder, t *lua.LTable, depth int) {
	maxIdx, count, isArray := 0, 0, true
	t.ForEach(func(k, _ lua.LValue) {
		count++
		n, ok := k.(lua.LNumber)
		if !ok || float64(n) != math.Trunc(float64(n)) || n < 1 {
			isArray = false
			return
		}
		maxIdx = max(maxIdx, int(n))
	})
	if !v.b.charge(int64(count) + 1) {
		v.refuseLua(v.b.refusal)
	}
	if isArray && count > 0 {
		if maxIdx > 10 && maxIdx > 2*count {
			L.RaiseError("Cannot serialise table: excessively sparse array")
		}
		b.WriteByte('[')
		for i := 1; i <= maxIdx; i++ {
			if i > 1 {
				b.WriteByte(',')
			}
			v.jsonEncode(L, b, t.RawGetInt(i), depth+1)
		}
		b.WriteByte(']')
		return
	}
	type kv struct {
		k string
		v lua.LValue
	}
	var kvs []kv
	t.ForEach(func(k, val lua.LValue) {
		s, ok := toStr(k)
		if !ok {
			L.RaiseError("Cannot serialise table: table key must be a number or string")
		}
		kvs = append(kvs, kv{s, val})
	})
	sort.Slice(kvs, func(i, j int) bool { return kvs[i].k < kvs[j].k })
	b.WriteByte('{')
	for i, e := range kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		jsonQuote(b, e.k)
		b.WriteByte(':')
		v.jsonEncode(L, b, e.v, depth+1)
	}
	b.WriteByte('}')
}

// jsonQuote escapes as Lua CJSON does, '/' included.
func jsonQuote(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '/':
			b.WriteString(`\/`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

// jsonDecoder is a recursive-descent JSON parser producing Lua values, with
// CJSON's nesting limit and its error texts.
type jsonDecoder struct {
	v *vm
	s string
	i int
}

func (d *jsonDecoder) charge() {
	if !d.v.b.charge(tableCost) {
		d.v.refuseLua(d.v.b.refusal)
	}
}

func (d *jsonDecoder) fail(what string) {
	d.v.L.RaiseError("Expected %s but found invalid token at character %d", what, d.i+1)
}

func (d *jsonDecoder) space() {
	for d.i < len(d.s) && strings.IndexByte(" \t\r\n", d.s[d.i]) >= 0 {
		d.i++
	}
}

func (d *jsonDecoder) value(depth int) lua.LValue {
	if depth > maxJSONDepth {
		d.v.L.RaiseError("Found too many nested data structures (%d) at character %d", depth, d.i+1)
	}
	d.space()
	if d.i >= len(d.s) {
		d.fail("value")
	}
	switch c := d.s[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		return lua.LString(d.str())
	case strings.HasPrefix(d.s[d.i:], "true"):
		d.i += 4
		return lua.LTrue
	case strings.HasPrefix(d.s[d.i:], "false"):
		d.i += 5
		return lua.LFalse
	case strings.HasPrefix(d.s[d.i:], "null"):
		d.i += 4
		return d.v.null
	default:
		j := d.i
		for j < len(d.s) && strings.IndexByte("+-0123456789.eE", d.s[j]) >= 0 {
			j++
		}
		f, err := strconv.ParseFloat(d.s[d.i:j], 64)
		if err != nil || j == d.i {
			d.fail("value")
		}
		d.i = j
		return lua.LNumber(f)
	}
}

// tableCost is what building one table charges: decoding "[[],[],…]"
// would otherwise make a table per three bytes.
const tableCost = 8

func (d *jsonDecoder) object(depth int) lua.LValue {
	d.charge()
	t := d.v.L.NewTable()
	d.i++
	d.space()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return t
	}
	for {
		d.space()
		if d.i >= len(d.s) || d.s[d.i] != '"' {
			d.fail("object key string")
		}
		k := d.str()
		d.space()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			d.fail("colon")
		}
		d.i++
		t.RawSetString(k, d.value(depth+1))
		d.space()
		if d.i < len(d.s) && d.s[d.i] == ',' {
			d.i++
			continue
		}
		if d.i < len(d.s) && d.s[d.i] == '}' {
			d.i++
			return t
		}
		d.fail("comma or object end")
	}
}

func (d *jsonDecoder) array(depth int) lua.LValue {
	d.charge()
	t := d.v.L.NewTable()
	d.i++
	d.space()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return t
	}
	for {
		t.Append(d.value(depth + 1))
		d.space()
		if d.i < len(d.s) && d.s[d.i] == ',' {
			d.i++
			continue
		}
		if d.i < len(d.s) && d.s[d.i] == ']' {
			d.i++
			return t
		}
		d.fail("comma or array end")
	}
}

// str reads a JSON string at d.i, which is a '"'.
func (d *jsonDecoder) str() string {
	var b strings.Builder
	for d.i++; d.i < len(d.s); d.i++ {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			return b.String()
		case c != '\\':
			b.WriteByte(c)
		case d.i+1 >= len(d.s):
			d.fail("string")
		default:
			d.i++
			if r, ok := map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}[d.s[d.i]]; ok {
				b.WriteByte(r)
				continue
			}
			if d.s[d.i] != 'u' || d.i+4 >= len(d.s) {
				d.fail("string escape")
			}
			n, err := strconv.ParseUint(d.s[d.i+1:d.i+5], 16, 16)
			if err != nil {
				d.fail("string escape")
			}
			b.WriteString(string(utf8.AppendRune(nil, rune(n))))
			d.i += 4
		}
	}
	d.fail("string end")
	return ""
}
