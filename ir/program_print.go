package ir

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// FormatInstr prints one instruction, with groups as group prints them
// (a template prints the group's shape, a rank's disassembly its members).
func FormatInstr(in *Instr, group func(Group) string) string {
	var b strings.Builder
	switch in.Op {
	case Alloc, Free, Load:
		fmt.Fprintf(&b, "%v b%d", in.Op, in.Buf)
	case Kernel:
		fmt.Fprintf(&b, "kernel %v", in.Kern)
		for i, a := range in.Args {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " b%d", a)
		}
		b.WriteString(" ->")
		for i, o := range in.Outs {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " b%d", o)
		}
		if len(in.Attrs) > 0 {
			b.WriteString(" {")
			for i, a := range in.Attrs {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(a.Name)
				b.WriteByte('=')
				b.WriteString(a.Val.String())
			}
			b.WriteByte('}')
		}
	case Collective:
		fmt.Fprintf(&b, "%v b%d -> b%d group %s %s %v",
			in.Coll, in.In, in.Out, group(in.Group), FormatBytes(in.Bytes), in.DType)
	case Record, Wait:
		fmt.Fprintf(&b, "%v e%d", in.Op, in.Event)
	default:
		b.WriteString(in.Op.String())
	}
	switch {
	case in.Stage >= 0 && in.Micro >= 0:
		fmt.Fprintf(&b, "  [stage %d mb%d]", in.Stage, in.Micro)
	case in.Stage >= 0:
		fmt.Fprintf(&b, "  [stage %d]", in.Stage)
	case in.Micro >= 0:
		fmt.Fprintf(&b, "  [mb%d]", in.Micro)
	}
	if in.Pos.IsValid() || in.Pos.File != "" {
		fmt.Fprintf(&b, " @%v", in.Pos)
	}
	if in.Comment != "" {
		b.WriteString("  ; ")
		b.WriteString(OneLine(in.Comment))
	}
	return b.String()
}

// FormatBytes is n in B, KiB, MiB, ... with at most two decimals, trailing
// zeros dropped.
func FormatBytes(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	units := [...]string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n) / 1024
	u := 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " " + units[u]
}

// QuoteName shows a buffer name as is when it is a plain word, quoted
// otherwise, so that an empty or spaced name cannot shift the columns.
func QuoteName(s string) string {
	if s == "" {
		return `""`
	}
	for _, c := range s {
		if c <= ' ' || c == '"' || c > '~' {
			return strconv.Quote(s)
		}
	}
	return s
}

// OneLine quotes s when it spans lines.
func OneLine(s string) string {
	if strings.ContainsAny(s, "\n\r") {
		return strconv.Quote(s)
	}
	return s
}

// PrintProgram prints a rank template: its buffers and layouts, then
// the sequence (before scheduling) or the streams. Groups print as
// shapes, views as parts: the text every rank shares.
func PrintProgram(w io.Writer, p *Program) {
	group := func(g Group) string { return g.String() }
	fmt.Fprintf(w, "buffers %d\n", len(p.Buffers))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, b := range p.Buffers {
		shape := "-"
		if len(b.Shape) > 0 {
			shape = Shape(b.Shape).String()
		}
		fmt.Fprintf(tw, "  b%d\t%s\t%v\t%d\t%s", i, QuoteName(b.Name), b.DType, b.Elems, shape)
		if b.IsView() {
			fmt.Fprintf(tw, "\tview of b%d", b.Parent)
			if b.Offset != 0 {
				fmt.Fprintf(tw, " at %d", b.Offset)
			}
			if b.Part.Size() > 1 {
				fmt.Fprintf(tw, " part %v", b.Part)
			}
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	for _, l := range p.Layouts {
		fmt.Fprintf(w, "layout %s: %d padded, P shard %v, OS shard %v, p b%d", QuoteName(l.Stage), l.Padded, l.PShard, l.OSShard, l.P)
		for _, f := range [...]struct {
			name string
			id   int32
		}{{"master", l.Master}, {"m", l.M}, {"v", l.V}} {
			if f.id >= 0 {
				fmt.Fprintf(w, ", %s b%d", f.name, f.id)
			}
		}
		fmt.Fprintln(w)
	}
	for _, in := range p.Inputs {
		fmt.Fprintf(w, "input b%d shift %d\n", in.Buf, in.Shift)
	}
	if len(p.Seq) > 0 {
		fmt.Fprintf(w, "sequence %d\n", len(p.Seq))
		for i := range p.Seq {
			op := &p.Seq[i]
			fmt.Fprintf(w, "%5d  %-6v %-11s %s\n", i, op.Phase, StreamName(op.Stream), FormatInstr(&op.Instr, group))
		}
		return
	}
	fmt.Fprintf(w, "events %d\n", p.Events)
	for s := range p.Streams {
		fmt.Fprintf(w, "stream %s, %d instructions\n", StreamName(s), len(p.Streams[s]))
		for i := range p.Streams[s] {
			fmt.Fprintf(w, "%5d  %s\n", i, FormatInstr(&p.Streams[s][i], group))
		}
	}
}
