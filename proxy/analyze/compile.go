package analyze

import (
	"bytes"
	"fmt"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// concatName names the function that replaces the `..` operator. It cannot
// be written in Lua source, so no script can reach, shadow or reassign it.
const concatName = "\x00concat"

// forNames name the functions a numeric for's initial value, limit and
// step go through (forValue): Redis's Lua 5.1 turns a string there into a
// number (for i = 1, ARGV[1]), gopher-lua's VM raises an error instead.
// Like concatName, they cannot be written in Lua source.
var forNames = [3]string{"\x00forinit", "\x00forlimit", "\x00forstep"}

// hiddenName reports whether s names one of the functions compile's
// rewriting calls: a string constant of the compiled script, not the
// script's own.
func hiddenName(s string) bool {
	return s == concatName || s == forNames[0] || s == forNames[1] || s == forNames[2]
}

// maxNesting bounds the nesting of blocks and expressions, as Lua 5.1's
// parser does ("chunk has too many syntax levels"): it keeps the compiler's
// recursion, and this file's, small.
const maxNesting = 200

// compile parses body and compiles it with every `a .. b` turned into a call
// of concatName, which counts the bytes it builds: the VM's own concatenation
// allocates with no hook, and `s = s .. s` doubles a string per instruction.
func compile(body []byte, maxBytes int) (*lua.FunctionProto, error) {
	if len(body) > maxBytes {
		return nil, &Refusal{Class: ClassCompile, Reason: fmt.Sprintf("the body is %d bytes, more than the %d the analyzer accepts", len(body), maxBytes)}
	}
	chunk, err := parse.Parse(bytes.NewReader(body), "user_script")
	if err != nil {
		return nil, &Refusal{Class: ClassCompile, Reason: "the body is not valid Lua: " + err.Error()}
	}
	w := rewriter{}
	w.stmts(chunk, 0)
	if w.err != nil {
		return nil, w.err
	}
	// local concatName, forNames... = concatName, forNames...: read once
	// from the globals before any of the script runs.
	prelude := &ast.LocalAssignStmt{}
	for _, name := range append([]string{concatName}, forNames[:]...) {
		prelude.Names = append(prelude.Names, name)
		prelude.Exprs = append(prelude.Exprs, &ast.IdentExpr{Value: name})
	}
	proto, err := lua.Compile(append([]ast.Stmt{prelude}, chunk...), "user_script")
	if err != nil {
		return nil, &Refusal{Class: ClassCompile, Reason: "the body does not compile: " + err.Error()}
	}
	return proto, nil
}

type rewriter struct{ err *Refusal }

func (w *rewriter) deep(depth int) bool {
	if depth > maxNesting && w.err == nil {
		w.err = &Refusal{Class: ClassCompile, Reason: fmt.Sprintf("the body nests blocks or expressions more than %d levels deep", maxNesting)}
	}
	return w.err != nil
}

func (w *rewriter) stmts(ss []ast.Stmt, depth int) {
	for _, s := range ss {
		w.stmt(s, depth+1)
	}
}

func (w *rewriter) stmt(s ast.Stmt, depth int) {
	if w.deep(depth) {
		return
	}
	switch s := s.(type) {
	case *ast.AssignStmt:
		w.exprs(s.Lhs, depth)
		w.exprs(s.Rhs, depth)
	case *ast.LocalAssignStmt:
		w.exprs(s.Exprs, depth)
	case *ast.FuncCallStmt:
		s.Expr = w.expr(s.Expr, depth)
	case *ast.DoBlockStmt:
		w.stmts(s.Stmts, depth)
	case *ast.WhileStmt:
		s.Condition = w.expr(s.Condition, depth)
		w.stmts(s.Stmts, depth)
	case *ast.RepeatStmt:
		s.Condition = w.expr(s.Condition, depth)
		w.stmts(s.Stmts, depth)
	case *ast.IfStmt:
		s.Condition = w.expr(s.Condition, depth)
		w.stmts(s.Then, depth)
		w.stmts(s.Else, depth)
	case *ast.NumberForStmt:
		s.Init = forValue(0, w.expr(s.Init, depth))
		s.Limit = forValue(1, w.expr(s.Limit, depth))
		if s.Step != nil {
			s.Step = forValue(2, w.expr(s.Step, depth))
		}
		w.stmts(s.Stmts, depth)
	case *ast.GenericForStmt:
		w.exprs(s.Exprs, depth)
		w.stmts(s.Stmts, depth)
	case *ast.FuncDefStmt:
		w.expr(s.Func, depth)
	case *ast.ReturnStmt:
		w.exprs(s.Exprs, depth)
	case *ast.BreakStmt:
	case *ast.LabelStmt, *ast.GotoStmt:
		// gopher-lua accepts Lua 5.2's goto; Redis's Lua 5.1 does not.
		w.err = &Refusal{Class: ClassCompile, Reason: "the body uses goto or a label, which Lua 5.1 (Redis) does not have"}
	default:
		w.err = &Refusal{Class: ClassCompile, Reason: fmt.Sprintf("the body has a statement the analyzer does not know (%T)", s)}
	}
}

// forValue wraps e, a numeric for's initial value (i 0), limit (1) or step
// (2), in a call of forNames[i].
func forValue(i int, e ast.Expr) ast.Expr {
	call := &ast.FuncCallExpr{Func: &ast.IdentExpr{Value: forNames[i]}, Args: []ast.Expr{e}}
	call.SetLine(e.Line())
	call.SetLastLine(e.LastLine())
	call.Func.SetLine(e.Line())
	return call
}

func (w *rewriter) exprs(es []ast.Expr, depth int) {
	for i, e := range es {
		es[i] = w.expr(e, depth)
	}
}

// expr returns e with its concatenations rewritten.
func (w *rewriter) expr(e ast.Expr, depth int) ast.Expr {
	depth++
	if w.deep(depth) {
		return e
	}
	switch x := e.(type) {
	case *ast.StringConcatOpExpr:
		call := &ast.FuncCallExpr{
			Func: &ast.IdentExpr{Value: concatName},
			Args: []ast.Expr{w.expr(x.Lhs, depth), w.expr(x.Rhs, depth)},
		}
		call.SetLine(x.Line())
		call.SetLastLine(x.LastLine())
		call.Func.SetLine(x.Line())
		return call
	case *ast.AttrGetExpr:
		x.Object = w.expr(x.Object, depth)
		x.Key = w.expr(x.Key, depth)
	case *ast.TableExpr:
		for _, f := range x.Fields {
			if f.Key != nil {
				f.Key = w.expr(f.Key, depth)
			}
			f.Value = w.expr(f.Value, depth)
		}
	case *ast.FuncCallExpr:
		if x.Func != nil {
			x.Func = w.expr(x.Func, depth)
		}
		if x.Receiver != nil {
			x.Receiver = w.expr(x.Receiver, depth)
		}
		w.exprs(x.Args, depth)
	case *ast.LogicalOpExpr:
		x.Lhs = w.expr(x.Lhs, depth)
		x.Rhs = w.expr(x.Rhs, depth)
	case *ast.RelationalOpExpr:
		x.Lhs = w.expr(x.Lhs, depth)
		x.Rhs = w.expr(x.Rhs, depth)
	case *ast.ArithmeticOpExpr:
		x.Lhs = w.expr(x.Lhs, depth)
		x.Rhs = w.expr(x.Rhs, depth)
	case *ast.UnaryMinusOpExpr:
		x.Expr = w.expr(x.Expr, depth)
	case *ast.UnaryNotOpExpr:
		x.Expr = w.expr(x.Expr, depth)
	case *ast.UnaryLenOpExpr:
		x.Expr = w.expr(x.Expr, depth)
	case *ast.FunctionExpr:
		w.stmts(x.Stmts, depth)
	case *ast.TrueExpr, *ast.FalseExpr, *ast.NilExpr, *ast.NumberExpr, *ast.StringExpr,
		*ast.Comma3Expr, *ast.IdentExpr:
	default:
		w.err = &Refusal{Class: ClassCompile, Reason: fmt.Sprintf("the body has an expression the analyzer does not know (%T)", e)}
	}
	return e
}
