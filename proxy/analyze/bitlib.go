package analyze

import (
	"math"
	"math/bits"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// bitLib is LuaBitOp, which Redis ships as `bit`: 32-bit operations on
// numbers, results as signed 32-bit integers.
func (v *vm) bitLib() *lua.LTable {
	L := v.L
	t := L.NewTable()
	fold := func(op func(a, b uint32) uint32) lua.LGFunction {
		return func(L *lua.LState) int {
			acc := tobit(L, 1)
			for i := 2; i <= L.GetTop(); i++ {
				acc = op(acc, tobit(L, i))
			}
			L.Push(lua.LNumber(int32(acc)))
			return 1
		}
	}
	shift := func(op func(a uint32, n uint) uint32) lua.LGFunction {
		return func(L *lua.LState) int {
			L.Push(lua.LNumber(int32(op(tobit(L, 1), uint(tobit(L, 2)&31)))))
			return 1
		}
	}
	fns := map[string]lua.LGFunction{
		"tobit": fold(func(a, _ uint32) uint32 { return a }),
		"bnot": func(L *lua.LState) int {
			L.Push(lua.LNumber(int32(^tobit(L, 1))))
			return 1
		},
		"band":    fold(func(a, b uint32) uint32 { return a & b }),
		"bor":     fold(func(a, b uint32) uint32 { return a | b }),
		"bxor":    fold(func(a, b uint32) uint32 { return a ^ b }),
		"lshift":  shift(func(a uint32, n uint) uint32 { return a << n }),
		"rshift":  shift(func(a uint32, n uint) uint32 { return a >> n }),
		"arshift": shift(func(a uint32, n uint) uint32 { return uint32(int32(a) >> n) }),
		"rol":     shift(func(a uint32, n uint) uint32 { return bits.RotateLeft32(a, int(n)) }),
		"ror":     shift(func(a uint32, n uint) uint32 { return bits.RotateLeft32(a, -int(n)) }),
		"bswap": func(L *lua.LState) int {
			L.Push(lua.LNumber(int32(bits.ReverseBytes32(tobit(L, 1)))))
			return 1
		},
		"tohex": func(L *lua.LState) int {
			x := tobit(L, 1)
			n := 8
			if L.GetTop() >= 2 {
				n = int(int32(tobit(L, 2)))
			}
			digits := "0123456789abcdef"
			if n < 0 {
				n, digits = -n, "0123456789ABCDEF"
			}
			n = min(n, 8)
			var b strings.Builder
			for i := n - 1; i >= 0; i-- {
				b.WriteByte(digits[(x>>(4*uint(i)))&15])
			}
			L.Push(lua.LString(b.String()))
			return 1
		},
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	return t
}

// tobit normalizes argument i as LuaBitOp does: rounded to an integer, its
// low 32 bits.
func tobit(L *lua.LState, i int) uint32 {
	f := float64(L.CheckNumber(i))
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	f = math.RoundToEven(math.Mod(f, 1<<32))
	return uint32(int64(f))
}
