package ir

// The printed form is one item per line, in the graph's own order:
//
//	model tiny file "tiny.amsp" @5:1
//	layers 2
//	dim batch = 2
//	input tokens : i32[2,64] @13:3
//	param tok_emb : f32[256,64] init normal(0.02) @16:3
//	act x : f32[2,64,64] = embed(tokens, tok_emb) @17:7
//	act layers.0.h : f32[2,64,64] = rmsnorm(x, layers.0.attn_norm, eps=1e-05) layer 0 @25:9
//	act d.x : f32[2,64,64], grad grad.w : f32[64] = rmsnorm_grad(x, w, d.h, eps=1e-05) @25:9
//	param w.new : bf16[64] updates w = cast(os.master.w.new, dtype=2) @7:3
//
// A line is one value, or all the results of one op in order (a head
// "ROLE NAME : TYPE [updates STATE]" each, comma-separated), followed by
// what they share: the op, the layer and the position.
// It is the IR's test and debugging language: goldens hold it, -dump-after
// prints it, and Parse reads it back, so every choice here (single spaces,
// shortest floats, positions relative to the model's file) exists to make
// Print(Parse(text)) == text hold byte for byte.

import (
	"io"
	"strconv"
	"strings"
)

// Print returns the printed form of g. It never panics, even on a graph
// Verify would reject, because dumping a broken graph is how one debugs it.
func Print(g *Graph) string {
	var b strings.Builder
	printGraph(&b, g)
	return b.String()
}

// Fprint writes the printed form of g to w.
func Fprint(w io.Writer, g *Graph) error {
	_, err := io.WriteString(w, Print(g))
	return err
}

func printGraph(b *strings.Builder, g *Graph) {
	if g == nil {
		return
	}
	b.WriteString("model ")
	b.WriteString(g.Name)
	if g.Pos.File != "" {
		b.WriteString(" file ")
		b.WriteString(strconv.Quote(g.Pos.File))
	}
	if g.Pos.IsValid() {
		// The header's position is in its own file by definition.
		writeLineCol(b, g.Pos)
	}
	b.WriteByte('\n')
	b.WriteString("layers ")
	b.WriteString(strconv.Itoa(g.Layers))
	b.WriteByte('\n')
	for _, d := range g.Dims {
		b.WriteString("dim ")
		b.WriteString(d.Name)
		b.WriteString(" = ")
		b.WriteString(strconv.FormatInt(d.Value, 10))
		writePos(b, d.Pos, g.Pos.File)
		b.WriteByte('\n')
	}
	for _, v := range g.Values {
		if v != nil && v.Def != nil && len(v.Def.Results) > 1 && !v.Def.definedAt(v) && v.Def.hasResult(v) {
			continue // printed on its op's line
		}
		printValue(b, v, g.Pos.File)
		b.WriteByte('\n')
	}
}

func printValue(b *strings.Builder, v *Value, file string) {
	if v == nil {
		// Unparseable on purpose: a nil slot is a bug a dump should show.
		b.WriteString("<nil value>")
		return
	}
	op := v.Def
	heads := []*Value{v}
	if op != nil && len(op.Results) > 1 && op.definedAt(v) {
		heads = op.Results
	}
	for i, r := range heads {
		if i > 0 {
			b.WriteString(", ")
		}
		printHead(b, r)
	}
	if op != nil {
		b.WriteString(" = ")
		b.WriteString(op.Kind.String())
		b.WriteByte('(')
		for i, a := range op.Args {
			if i > 0 {
				b.WriteString(", ")
			}
			if a == nil {
				b.WriteString("<nil>")
			} else {
				b.WriteString(a.Name)
			}
		}
		for i, a := range op.Attrs {
			if i > 0 || len(op.Args) > 0 {
				b.WriteString(", ")
			}
			b.WriteString(a.Name)
			b.WriteByte('=')
			b.WriteString(a.Val.String())
		}
		b.WriteByte(')')
	}
	if v.Layer >= 0 {
		b.WriteString(" layer ")
		b.WriteString(strconv.Itoa(v.Layer))
	}
	// The op's position is the value's (the frontend gives both the
	// expression's), so it is printed once.
	writePos(b, v.Pos, file)
}

// printHead writes what is a value's own: role, name, type, and its init
// or the state it updates.
func printHead(b *strings.Builder, v *Value) {
	if v == nil {
		b.WriteString("<nil value>")
		return
	}
	b.WriteString(v.Role.String())
	b.WriteByte(' ')
	b.WriteString(v.Name)
	b.WriteString(" : ")
	b.WriteString(v.DType.String())
	b.WriteString(v.Shape.String())
	if (v.Role == Param || v.Role == OptState) && v.Def == nil {
		b.WriteString(" init ")
		b.WriteString(v.Init.String())
	}
	if v.Updates != nil {
		b.WriteString(" updates ")
		b.WriteString(v.Updates.Name)
	}
}

// writePos writes " @L:C", or " @"FILE":L:C" for a position outside the
// model's file (a value inlined from another source), or nothing.
func writePos(b *strings.Builder, p Pos, file string) {
	if !p.IsValid() {
		return
	}
	if p.File != file {
		b.WriteString(" @")
		b.WriteString(strconv.Quote(p.File))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Line))
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(p.Col))
		return
	}
	writeLineCol(b, p)
}

func writeLineCol(b *strings.Builder, p Pos) {
	b.WriteString(" @")
	b.WriteString(strconv.Itoa(p.Line))
	b.WriteByte(':')
	b.WriteString(strconv.Itoa(p.Col))
}
