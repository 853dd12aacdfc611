package analyze

import (
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// patternChars are the characters that make a Lua pattern more than a
// plain string.
const patternChars = "^$*+?.([%-"

// installString bounds the string functions whose output or work grows
// with their arguments, and refuses Lua patterns: their backtracking can
// take exponential time inside one call, where no instruction is counted.
func (v *vm) installString(s *lua.LTable) {
	L := v.L
	orig := func(name string) lua.LGFunction { return s.RawGetString(name).(*lua.LFunction).GFunction }
	sized := func(name string, f lua.LGFunction) {
		s.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			if !v.b.alloc(int64(len(L.CheckString(1)))) {
				v.refuseLua(v.b.refusal)
			}
			return f(L)
		}))
	}
	sized("lower", orig("lower"))
	sized("upper", orig("upper"))
	sized("reverse", orig("reverse"))
	byteFn := orig("byte")
	s.RawSetString("byte", L.NewFunction(func(L *lua.LState) int {
		n := len(L.CheckString(1))
		if n > maxResults && L.GetTop() > 2 {
			L.RaiseError("string slice too long")
		}
		if !v.b.charge(int64(n)/8 + 1) {
			v.refuseLua(v.b.refusal)
		}
		return byteFn(L)
	}))
	s.RawSetString("char", L.NewFunction(func(L *lua.LState) int {
		b := make([]byte, L.GetTop())
		for i := range b {
			c := L.CheckInt(i + 1)
			if c < 0 || c > 255 {
				L.ArgError(i+1, "invalid value")
			}
			b[i] = byte(c)
		}
		L.Push(lua.LString(b))
		return 1
	}))
	s.RawSetString("rep", L.NewFunction(func(L *lua.LState) int {
		str, n := L.CheckString(1), L.CheckInt(2)
		if n <= 0 || str == "" {
			L.Push(lua.LString(""))
			return 1
		}
		if int64(n) > v.b.opt.MaxRunBytes || !v.b.alloc(int64(len(str))*int64(n)) {
			v.b.alloc(v.b.opt.MaxRunBytes + 1) // records the refusal
			v.refuseLua(v.b.refusal)
		}
		L.Push(lua.LString(strings.Repeat(str, n)))
		return 1
	}))
	s.RawSetString("find", L.NewFunction(v.strFind))
	s.RawSetString("format", L.NewFunction(v.strFormat))
	for _, name := range []string{"match", "gmatch", "gfind", "gsub"} {
		fn := "string." + name
		s.RawSetString(name, L.NewFunction(func(L *lua.LState) int {
			v.refuseLua(&Refusal{Class: ClassLibrary, Command: fn,
				Reason: fn + ": Lua patterns are not run by the analyzer (their backtracking has no step bound)"})
			return 0
		}))
	}
	s.RawSetString("dump", lua.LNil)
}

// strFind is string.find for plain searches only: a pattern without magic
// characters, or the plain flag.
func (v *vm) strFind(L *lua.LState) int {
	str, pat := L.CheckString(1), L.CheckString(2)
	init := L.OptInt(3, 1)
	plain := lua.LVAsBool(L.Get(4))
	if !plain && strings.ContainsAny(pat, patternChars) {
		v.refuseLua(&Refusal{Class: ClassLibrary, Command: "string.find",
			Reason: "string.find with a Lua pattern: patterns are not run by the analyzer (their backtracking has no step bound)"})
	}
	switch {
	case init < 0:
		init = max(len(str)+init+1, 1)
	case init == 0:
		init = 1
	}
	if init > len(str)+1 {
		L.Push(lua.LNil)
		return 1
	}
	if !v.b.charge(int64(len(str)-init+1)/64 + 1) {
		v.refuseLua(v.b.refusal)
	}
	i := strings.Index(str[init-1:], pat)
	if i < 0 {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(lua.LNumber(init + i))
	L.Push(lua.LNumber(init + i + len(pat) - 1))
	return 2
}

// strFormat is string.format with C's conversions and Lua 5.1's limit of two
// digits of width and precision, so its output is bounded before it is built.
func (v *vm) strFormat(L *lua.LState) int {
	f := L.CheckString(1)
	var out strings.Builder
	arg := 1
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			out.WriteByte(f[i])
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			out.WriteByte('%')
			continue
		}
		start := i
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		digits := func() {
			n := 0
			for i < len(f) && f[i] >= '0' && f[i] <= '9' {
				i++
				n++
			}
			if n > 2 {
				L.RaiseError("invalid format (width or precision too long)")
			}
		}
		digits()
		if i < len(f) && f[i] == '.' {
			i++
			digits()
		}
		if i >= len(f) {
			L.RaiseError("invalid option '%%' to 'format'")
		}
		spec, conv := f[start:i], f[i]
		arg++
		s := v.formatOne(L, arg, spec, conv)
		if !v.b.alloc(int64(len(s))) {
			v.refuseLua(v.b.refusal)
		}
		out.WriteString(s)
	}
	L.Push(lua.LString(out.String()))
	return 1
}

func (v *vm) formatOne(L *lua.LState, arg int, spec string, conv byte) string {
	switch conv {
	case 'd', 'i':
		return fmt.Sprintf("%"+spec+"d", int64(L.CheckNumber(arg)))
	case 'o', 'x', 'X':
		return fmt.Sprintf("%"+spec+string(conv), uint64(int64(L.CheckNumber(arg))))
	case 'u':
		return fmt.Sprintf("%"+spec+"d", uint64(int64(L.CheckNumber(arg))))
	case 'c':
		return string([]byte{byte(L.CheckInt(arg))})
	case 'e', 'E', 'f', 'g', 'G':
		return fmt.Sprintf("%"+spec+string(conv), float64(L.CheckNumber(arg)))
	case 's':
		s, ok := toStr(L.Get(arg))
		if !ok {
			s = L.ToStringMeta(L.CheckAny(arg)).String()
		}
		if int64(len(s)) > v.b.opt.MaxRunBytes {
			v.b.alloc(int64(len(s)))
			v.refuseLua(v.b.refusal)
		}
		return fmt.Sprintf("%"+spec+"s", s)
	case 'q':
		return luaQuote(L.CheckString(arg))
	}
	L.RaiseError("invalid option '%%%c' to 'format'", conv)
	return ""
}

// luaQuote is Lua 5.1's %q: a backslash before '"', '\\' and a newline,
// \r and \0 escaped, everything else as it is.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '\r':
			b.WriteString(`\r`)
		case 0:
			b.WriteString(`\000`)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
