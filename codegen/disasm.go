package codegen

// Disassembly: a rank's program as text, one instruction a line, for
// people and golden tests. A template is rank-relative; the disassembly
// is not: it resolves groups to member ranks and views to part indices for
// the rank shown, since that is what a person debugging rank 5 asks.

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"amspc/ir"
)

// Disasm prints rank's program.
func Disasm(w io.Writer, b *Bundle, rank int) error {
	return DisasmAll(w, b, []int{rank})
}

// DisasmAll prints the programs of ranks, in the order given, separated
// by blank lines; nil ranks means every rank.
func DisasmAll(w io.Writer, b *Bundle, ranks []int) error {
	if err := Validate(b); err != nil {
		return err
	}
	if ranks == nil {
		ranks = make([]int, b.Topo.Ranks())
		for r := range ranks {
			ranks[r] = r
		}
	}
	var buf bytes.Buffer
	for i, r := range ranks {
		if r < 0 || r >= b.Topo.Ranks() {
			return fmt.Errorf("rank %d out of range (%d ranks)", r, b.Topo.Ranks())
		}
		if i > 0 {
			buf.WriteByte('\n')
		}
		disasm(&buf, b, r)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func disasm(w *bytes.Buffer, b *Bundle, rank int) {
	t := b.Topo
	p := b.Template(rank)
	fmt.Fprintf(w, "model     %s\n", b.Model)
	fmt.Fprintf(w, "plan      %s\n", b.Plan)
	fmt.Fprintf(w, "topology  %s x %s = %s\n", plural(t.Nodes, "node"), plural(t.GPUsPerNode, "GPU"), plural(t.Ranks(), "rank"))
	m := &b.Machine
	fmt.Fprintf(w, "machine   %s peak x %s, intra %s, inter %s, latency %s / %s, memory %s\n",
		formatSI(m.PeakFLOPS, "FLOP/s"), ir.FormatFloat(m.Efficiency), formatSI(m.IntraBW, "B/s"), formatSI(m.InterBW, "B/s"),
		formatSI(m.IntraLatency, "s"), formatSI(m.InterLatency, "s"), formatBytes(m.MemoryBytes))
	cores := "own engines for communication"
	if m.SharedCores {
		cores = "streams share the cores"
	}
	fmt.Fprintf(w, "kernels   memory %s, matmul half %s, %s\n", formatSI(m.MemBW, "B/s"), ir.FormatFloat(m.MatMulHalf), cores)
	fmt.Fprintf(w, "micro     %s\n", plural(b.Micro, "micro-batch"))
	fmt.Fprintf(w, "rank      %d (node %d, gpu %d)\n", rank, rank/t.GPUsPerNode, rank%t.GPUsPerNode)
	fmt.Fprintf(w, "template  %d of %d\n", templateIndex(b, rank), len(b.Templates))
	fmt.Fprintf(w, "events    %d\n", p.Events)
	w.WriteString("inputs   ")
	for i, in := range p.Inputs {
		if i > 0 {
			w.WriteByte(',')
		}
		fmt.Fprintf(w, " b%d shift %d", in.Buf, in.Shift)
	}
	if len(p.Inputs) == 0 {
		w.WriteString(" none")
	}
	w.WriteByte('\n')

	fmt.Fprintf(w, "buffers   %d\n", len(p.Buffers))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, buf := range p.Buffers {
		shape := "-"
		if len(buf.Shape) > 0 {
			shape = ir.Shape(buf.Shape).String()
		}
		fmt.Fprintf(tw, "  b%d\t%s\t%v\t%d\t%s\t%s", i, quoteName(buf.Name), buf.DType, buf.Elems, shape, formatBytes(buf.Bytes()))
		if buf.IsView() {
			fmt.Fprintf(tw, "\tview of %s", quoteName(p.Buffers[buf.Parent].Name))
			if buf.Offset != 0 {
				fmt.Fprintf(tw, " at %d", buf.Offset)
			}
			fmt.Fprintf(tw, " part %v -> index %d", buf.Part, buf.Part.Index(t, rank))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()

	for _, l := range p.Layouts {
		fmt.Fprintf(w, "layout    %s, %d elements padded, %s", quoteName(l.Stage), l.Padded, plural(len(l.Params), "param"))
		for _, sh := range [...]struct {
			name string
			g    ir.Group
		}{{"P", l.PShard}, {"OS", l.OSShard}} {
			if sh.g != (ir.Group{}) {
				fmt.Fprintf(w, ", %s shard %v -> index %d", sh.name, sh.g, sh.g.Index(t, rank))
			}
		}
		for _, f := range [...]struct {
			name string
			id   int32
		}{{"p", l.P}, {"master", l.Master}, {"m", l.M}, {"v", l.V}} {
			if f.id >= 0 {
				fmt.Fprintf(w, ", %s b%d", f.name, f.id)
			}
		}
		w.WriteByte('\n')
		for _, sl := range l.Params {
			decay := "no decay"
			if sl.Decay {
				decay = "decay"
			}
			fmt.Fprintf(tw, "  %s\t@%d\t%d\t%s\t%s\n", quoteName(sl.Name), sl.Offset, sl.Elems, decay, oneLine(sl.Init.String()))
		}
		tw.Flush()
	}

	pr := printer{t: t, rank: rank}
	for s := range p.Streams {
		fmt.Fprintf(w, "stream    %s, %d instructions\n", ir.StreamName(s), len(p.Streams[s]))
		for i := range p.Streams[s] {
			fmt.Fprintf(w, "%-11s %4d  %s\n", ir.StreamName(s), i, pr.instr(&p.Streams[s][i]))
		}
	}
}

func templateIndex(b *Bundle, rank int) int {
	if len(b.RankTemplate) == 0 {
		return 0
	}
	return int(b.RankTemplate[rank])
}

// printer prints instructions as rank sees them. It remembers each
// group's member list: a program names few groups many times, and a group
// can hold thousands of ranks.
type printer struct {
	t      ir.Topology
	rank   int
	groups map[ir.Group]string
}

// instrText is one instruction as rank sees it, for Match's errors.
func instrText(t ir.Topology, rank int, in *ir.Instr) string {
	pr := printer{t: t, rank: rank}
	return pr.instr(in)
}

func (pr *printer) instr(in *ir.Instr) string {
	return ir.FormatInstr(in, pr.group)
}

// group is a group's shape and, for the rank, its members.
func (pr *printer) group(g ir.Group) string {
	if s, ok := pr.groups[g]; ok {
		return s
	}
	s := fmt.Sprintf("%v (ranks %s)", g, formatRanks(g.Ranks(pr.t, pr.rank)))
	if pr.groups == nil {
		pr.groups = map[ir.Group]string{}
	}
	pr.groups[g] = s
	return s
}

// formatRanks lists ranks, eliding the middle of long lists so that a
// 16384-rank group stays one readable line.
func formatRanks(ranks []int) string {
	const head = 8
	var b strings.Builder
	for i, r := range ranks {
		if len(ranks) > 2*head && i == head {
			fmt.Fprintf(&b, ",...,%d (%d ranks)", ranks[len(ranks)-1], len(ranks))
			break
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r))
	}
	return b.String()
}

// formatSI is v with an SI prefix and four significant digits.
func formatSI(v float64, unit string) string {
	if v == 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return ir.FormatFloat(v) + " " + unit
	}
	prefixes := [...]string{"n", "u", "m", "", "k", "M", "G", "T", "P", "E"}
	i := 3
	for a := math.Abs(v); a >= 1000 && i < len(prefixes)-1; a /= 1000 {
		v /= 1000
		i++
	}
	for a := math.Abs(v); a < 1 && i > 0; a *= 1000 {
		v *= 1000
		i--
	}
	return strconv.FormatFloat(v, 'g', 4, 64) + " " + prefixes[i] + unit
}

func formatBytes(n int64) string { return ir.FormatBytes(n) }

func quoteName(s string) string { return ir.QuoteName(s) }

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "h") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

func oneLine(s string) string { return ir.OneLine(s) }
