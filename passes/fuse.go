package passes

import (
	"fmt"
	"io"

	"amspc/ir"
)

// A fusion is one row of the fuse pass's pattern table: ops of kind Root
// whose operands Match accepts become one op of kind Fused, on the
// operands Match returns. A fused op is an op like any other: the op
// table gives its kernels, its cost and its backward rule, so fusing the
// forward graph fuses the backward autodiff makes from it.
type fusion struct {
	Name  string
	Root  ir.OpKind
	Fused ir.OpKind
	Why   string
	// Match returns the fused op's operands and the values the fusion
	// absorbs (which must have no other reader), or ok false.
	Match func(root *ir.Op) (args, absorbed []*ir.Value, ok bool)
}

// fusions is the pattern table, tried in order on every op.
var fusions = []fusion{
	{Name: "swiglu", Root: ir.Mul, Fused: ir.SwiGLU,
		Why:   "silu(a) * b of one shape: one pass over a and b, and backward computes silu(a) again instead of keeping it",
		Match: matchSwiGLU},
}

// matchSwiGLU accepts mul(silu(a), b) and mul(b, silu(a)), a and b of one
// shape and dtype (a broadcast operand stays unfused).
func matchSwiGLU(mul *ir.Op) (args, absorbed []*ir.Value, ok bool) {
	for i := range 2 {
		s, b := mul.Args[i], mul.Args[1-i]
		if s.Def == nil || s.Def.Kind != ir.SiLU {
			continue
		}
		a := s.Def.Args[0]
		if a.Shape.Equal(b.Shape) && a.DType == b.DType && s.DType == a.DType {
			return []*ir.Value{a, b}, []*ir.Value{s}, true
		}
	}
	return nil, nil, false
}

// fuse rewrites the forward graph by the pattern table: each op a row
// matches becomes the row's fused op, in place (its result keeps its
// name, position and layer), and the values the fusion absorbed leave
// the graph. A value something else reads (another op, or the loss) is
// never absorbed.
func fuse(s *State) error {
	g := s.Graph
	uses := g.Uses()
	gone := map[*ir.Value]bool{}
	for _, op := range g.Ops() {
		for _, f := range fusions {
			if op.Kind != f.Root {
				continue
			}
			args, absorbed, ok := f.Match(op)
			if !ok || !onlyReadBy(absorbed, op, uses) {
				continue
			}
			fused, err := ir.NewOp(f.Fused, args, nil, op.Pos)
			if err != nil {
				return &ir.InternalError{Pass: "fuse", Err: fmt.Errorf("%s at %s: %v", f.Name, op.Out().Name, err)}
			}
			if t := fused.Out(); !t.Shape.Equal(op.Out().Shape) || t.DType != op.Out().DType {
				return &ir.InternalError{Pass: "fuse", Err: fmt.Errorf("%s at %s: %s %s for %s %s", f.Name, op.Out().Name, t.DType, t.Shape, op.Out().DType, op.Out().Shape)}
			}
			op.Kind, op.Args, op.Attrs = f.Fused, fused.Args, fused.Attrs
			for _, v := range absorbed {
				gone[v] = true
			}
			break
		}
	}
	if len(gone) == 0 {
		return nil
	}
	kept := g.Values[:0]
	for _, v := range g.Values {
		if !gone[v] {
			kept = append(kept, v)
		}
	}
	clear(g.Values[len(kept):])
	g.Values = kept
	return nil
}

// onlyReadBy says whether op is the only reader of each value: a value
// another op reads, or the loss, must stay.
func onlyReadBy(vals []*ir.Value, op *ir.Op, uses map[*ir.Value][]*ir.Op) bool {
	for _, v := range vals {
		if v.Role != ir.Activation || len(v.Def.Results) != 1 {
			return false
		}
		for _, u := range uses[v] {
			if u != op {
				return false
			}
		}
	}
	return true
}

// dumpFusions prints the pattern table, then the fused graph.
func dumpFusions(w io.Writer, s *State) {
	for _, f := range fusions {
		fmt.Fprintf(w, "# fusion %s: %v(...) -> %v: %s\n", f.Name, f.Root, f.Fused, f.Why)
	}
	io.WriteString(w, ir.Print(s.Graph))
}
