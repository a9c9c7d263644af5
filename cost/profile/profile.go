// Package profile is the format of a measured machine profile, what
// `amspc profile` writes and the cost model reads: collective bandwidths
// by kind, group shape and size, and kernel times by op and operand
// shapes (docs/profile.md). In: a CSV file. Out: a Profile that answers
// Bandwidth and KernelTime. It imports only ir; Check reads the profile a
// job's cluster names and reports errors where it was named (the
// frontend records the path without reading it).
package profile

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"amspc/ir"
)

// Profile is what `amspc profile` measured on one machine: the effective
// bandwidth of collectives (the AMSP paper's Communication-Profiler
// output) and the time of kernels. Its CSV form (docs/profile.md):
//
//	# amspc profile v3
//	# backend = local
//	collective,s0,s1,bytes,effective_gbps
//	all_gather,8,1,1048576,85.2
//	kernel,shapes,dtype,flops,seconds
//	matmul,128x64;64x64,f32,1048576,2.1e-05
//
// A header line starts a table; the rows under it are its measurements.
// Collective rows: the collective (all_gather, reduce_scatter,
// all_reduce, broadcast), the group shape (GPUs per node x nodes), the
// size in bytes (nccl-tests' size) and the effective bandwidth size /
// time in GB/s (10^9 bytes per second, the paper's w). Between measured
// sizes the bandwidth is interpolated linearly in log(size) and
// log(bandwidth); outside them it is held at the nearest measurement. A
// group shape the profile lacks falls back to the analytic model. An
// all_gather_shared row is the all-gather the CPU runtime's local ranks
// share (a parameter gathered into one buffer all members read, each
// member copying only its own part; engine's AllGatherShared), measured
// where ranks are goroutines of one process (SharedBandwidth).
//
// Kernel rows: the op (ir's name), its operands' shapes, the dtype of
// its first result, its FLOP count and the median seconds of one call
// while every rank ran it at once (KernelTime says how they are used).
//
// Pack rows (`pack,k,n,seconds`; the first field the product, matmul or
// matmul_grad_a): the seconds of packing a [k, n] weight as that
// product's B operand, with every rank packing at once. The CPU runtime
// packs a product's B before multiplying; a weight that stays the same
// over several products (a replicated or gathered parameter) is packed
// once for all of them (simulator.Packings says which products pack). A
// profile with this table measured its matmul and matmul_grad_a rows on
// B already packed, so a product that packs costs its row plus its pack;
// without it, the rows include the packing (as profiles before the
// table measured them) and every product costs its row.
//
// Overhead rows (`overhead,value`): how a step's kernels and
// collectives run beside each other in a step against the measurements
// above, fitted by amspc profile to steps it ran (Overhead).
//
// Comment lines of the form `# key = value` are metadata (what the
// profile was measured on); other comments are ignored. A file without
// the version line and kernel table (version 1) reads the same, and so
// does version 2 (no pack table).
type Profile struct {
	Name        string
	Meta        []MetaEntry
	Collectives []CollectiveRow
	Kernels     []KernelRow
	Overhead    Overhead
	Packs       []PackRow

	rows      map[profileKey][]profilePoint
	hasShared bool                    // a row is Shared
	exact     map[kernelKey][]float64 // seconds of each dtype measured
	byKind    map[ir.OpKind][]ratePoint
	indexed   bool
}

// MetaEntry is one `# key = value` line.
type MetaEntry struct{ Key, Value string }

// CollectiveRow is one measured collective.
type CollectiveRow struct {
	Coll  Coll
	Group ir.Factor // s0 x s1
	Bytes float64
	GBps  float64 // effective bandwidth, 10^9 bytes/s
	// Shared: an all-gather into one buffer the local ranks share
	// (all_gather_shared), not one into each member's own.
	Shared bool
}

// sharedGatherName is a shared all-gather's name in the CSV.
const sharedGatherName = "all_gather_shared"

// name is the row's collective as the CSV names it.
func (r CollectiveRow) name() string {
	if r.Shared {
		return sharedGatherName
	}
	return r.Coll.String()
}

// KernelRow is one measured kernel.
type KernelRow struct {
	Op      ir.OpKind
	Shapes  [][]int64 // the operands' shapes, in order
	DType   ir.DType  // the first result's dtype
	Flops   float64
	Seconds float64
}

// PackRow is one measured packing of a product's B operand.
type PackRow struct {
	Op      ir.OpKind // ir.MatMul or ir.MatMulGradA
	K, N    int64     // the weight's shape
	Seconds float64
}

// Overhead is how a step's instructions run against their measured
// times: KernelScale multiplies every kernel's time (0: 1; kernels are
// measured with every rank computing at once, and in a step some ranks
// wait in collectives, leaving the others more of shared cores),
// Collective is the seconds each collective costs beyond its bytes (the
// ranks meeting: on CPU ranks sharing cores, waiting for the last of
// them to be scheduled), Instruction the seconds every instruction
// costs its stream before its work (the runtime's dispatch, allocations
// from the pool, the hand-off from one instruction to the next), and
// Wake the seconds a compute stream that waited for an event takes to go
// on after it is recorded (waking the stream, and on CPU ranks sharing
// cores, its turn for one). Cores, when above 0 (a profile's `cores`
// row: traced steps that ran more ranks than cores set it), is the
// cores the ranks share, being more than them, as goroutines of one
// process (the runtime's gate lets that many compute at once): the
// simulator then has the ranks queue for them (simulator.Gated) instead
// of charging Wake and Collective.
type Overhead struct {
	KernelScale, Collective, Instruction, Wake float64
	// InstructionTP, when above 0, is Instruction for a program whose
	// ranks meet on their compute stream (tensor parallelism's
	// collectives: simulator.MeetsInCompute); Instruction is then the
	// others'. Traced steps find their instructions cost more there: on
	// 2 CPU ranks tiny's FSDP+TP2+SP paid 3.5-4 µs an instruction, its
	// ZeRO-3 and DDP 0.6-1.8 µs; the median gap between two kernels was
	// the same, its tail not (a rank that frees a gathered weight both
	// share, or waits for the core its partner left).
	InstructionTP float64
	Cores         int
}

// InstructionOf is the seconds an instruction costs its stream in a
// program whose ranks meet on their compute stream (meets) or not.
func (o Overhead) InstructionOf(meets bool) float64 {
	if meets && o.InstructionTP > 0 {
		return o.InstructionTP
	}
	return o.Instruction
}

// Header lines of the tables and the version line.
const (
	Version          = "# amspc profile v3"
	collectiveHeader = "collective,s0,s1,bytes,effective_gbps"
	kernelHeader     = "kernel,shapes,dtype,flops,seconds"
	overheadHeader   = "overhead,value"
	packHeader       = "pack,k,n,seconds"
)

type profileKey struct {
	c      Coll
	s0, s1 int
	shared bool
}

type profilePoint struct{ logBytes, logBW float64 }

type kernelKey struct {
	op     ir.OpKind
	shapes string
}

// ratePoint is one kernel measurement on the rate curve of its op:
// work per second at log(work) (work: KernelWork).
type ratePoint struct{ logWork, rate float64 }

// Coll is a collective kind.
type Coll = ir.Coll

// Read reads a profile CSV. Errors name the file and line.
func Read(name string) (*Profile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Parse(name, f)
}

// Parse reads a profile CSV from r; errors are `name:line: msg`.
func Parse(name string, r io.Reader) (*Profile, error) {
	p := &Profile{Name: name}
	sc := bufio.NewScanner(r)
	line := 0
	table := ""
	seen := map[string]int{}
	errf := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", name, line, fmt.Sprintf(format, args...))
	}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		if strings.HasPrefix(text, "#") {
			c := strings.TrimSpace(text[1:])
			if v, ok := strings.CutPrefix(c, "amspc profile "); ok && v != "v2" && v != "v3" {
				return nil, errf("profile version %s; this amspc reads v1, v2 and v3", v)
			}
			if k, v, ok := strings.Cut(c, "="); ok {
				if k = strings.TrimSpace(k); k != "" && !strings.ContainsAny(k, " \t") {
					p.Meta = append(p.Meta, MetaEntry{k, strings.TrimSpace(v)})
				}
			}
			continue
		}
		switch {
		case text == collectiveHeader || text == kernelHeader || text == overheadHeader || text == packHeader:
			table = text
			continue
		case strings.HasPrefix(text, "overhead,"):
			return nil, errf("header must be %s", overheadHeader)
		case strings.HasPrefix(text, "pack,"):
			return nil, errf("header must be %s", packHeader)
		case table == overheadHeader && !strings.HasPrefix(text, "overhead,"):
			// Its rows are named kernel and collective.
		case strings.HasPrefix(text, "collective,"):
			return nil, errf("header must be %s", collectiveHeader)
		case strings.HasPrefix(text, "kernel,"):
			return nil, errf("header must be %s", kernelHeader)
		case table == "":
			return nil, errf("want a header (%s or %s) before the first row", collectiveHeader, kernelHeader)
		}
		f := strings.Split(text, ",")
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		var key string
		if table == overheadHeader {
			if err := p.parseOverhead(f); err != nil {
				return nil, errf("%v", err)
			}
			key = "overhead " + f[0]
		} else if table == packHeader {
			row, err := parsePackRow(f)
			if err != nil {
				return nil, errf("%v", err)
			}
			key = fmt.Sprintf("pack %v %dx%d", row.Op, row.K, row.N)
			p.Packs = append(p.Packs, row)
		} else if table == collectiveHeader {
			row, err := parseCollectiveRow(f)
			if err != nil {
				return nil, errf("%v", err)
			}
			key = fmt.Sprintf("%s %v %g", row.name(), row.Group, row.Bytes)
			p.Collectives = append(p.Collectives, row)
		} else {
			row, err := parseKernelRow(f)
			if err != nil {
				return nil, errf("%v", err)
			}
			key = fmt.Sprintf("%v(%s) %v", row.Op, FormatShapes(row.Shapes), row.DType)
			p.Kernels = append(p.Kernels, row)
		}
		if prev, dup := seen[key]; dup {
			return nil, errf("%s measured twice (first on line %d)", key, prev)
		}
		seen[key] = line
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(p.Collectives)+len(p.Kernels)+len(p.Packs) == 0 {
		return nil, fmt.Errorf("%s: no measurements", name)
	}
	p.index()
	return p, nil
}

func (p *Profile) parseOverhead(f []string) error {
	if len(f) != 2 {
		return fmt.Errorf("want 2 fields (%s), got %d", overheadHeader, len(f))
	}
	s, err := strconv.ParseFloat(f[1], 64)
	if err != nil || !(s >= 0) || math.IsInf(s, 0) {
		return fmt.Errorf("value %q must be a number >= 0", f[1])
	}
	switch f[0] {
	case "kernel_scale":
		p.Overhead.KernelScale = s
	case "collective":
		p.Overhead.Collective = s
	case "instruction":
		p.Overhead.Instruction = s
	case "instruction_tp":
		p.Overhead.InstructionTP = s
	case "wake":
		p.Overhead.Wake = s
	case "cores":
		if s != math.Trunc(s) || s > 1<<20 {
			return fmt.Errorf("cores %q must be a whole number", f[1])
		}
		p.Overhead.Cores = int(s)
	default:
		return fmt.Errorf("unknown overhead %q (kernel_scale, collective, instruction, instruction_tp, wake, cores)", f[0])
	}
	return nil
}

func parseCollectiveRow(f []string) (CollectiveRow, error) {
	if len(f) != 5 {
		return CollectiveRow{}, fmt.Errorf("want 5 fields (%s), got %d", collectiveHeader, len(f))
	}
	c, ok := ir.ParseColl(f[0])
	shared := f[0] == sharedGatherName
	if shared {
		c, ok = ir.AllGather, true
	}
	if !ok {
		return CollectiveRow{}, fmt.Errorf("unknown collective %q (all_gather, reduce_scatter, all_reduce, broadcast, %s)", f[0], sharedGatherName)
	}
	s0, e0 := strconv.Atoi(f[1])
	s1, e1 := strconv.Atoi(f[2])
	bytes, e2 := strconv.ParseFloat(f[3], 64)
	bw, e3 := strconv.ParseFloat(f[4], 64)
	switch {
	case e0 != nil || e1 != nil || s0 < 1 || s1 < 1:
		return CollectiveRow{}, fmt.Errorf("group shape %s x %s must be positive integers", f[1], f[2])
	case e2 != nil || !positive(bytes):
		return CollectiveRow{}, fmt.Errorf("bytes %q must be a positive number", f[3])
	case e3 != nil || !positive(bw):
		return CollectiveRow{}, fmt.Errorf("bandwidth %q must be a positive number of GB/s", f[4])
	}
	return CollectiveRow{Coll: c, Group: ir.Factor{S0: s0, S1: s1}, Bytes: bytes, GBps: bw, Shared: shared}, nil
}

func parseKernelRow(f []string) (KernelRow, error) {
	if len(f) != 5 {
		return KernelRow{}, fmt.Errorf("want 5 fields (%s), got %d", kernelHeader, len(f))
	}
	op, ok := ir.LookupOp(f[0])
	if !ok {
		return KernelRow{}, fmt.Errorf("unknown kernel %q", f[0])
	}
	shapes, err := ParseShapes(f[1])
	if err != nil {
		return KernelRow{}, err
	}
	if want := op.Info().Arity; len(shapes) != want {
		return KernelRow{}, fmt.Errorf("%s takes %d operands, the row gives %d shapes", f[0], want, len(shapes))
	}
	dt, ok := ir.ParseDType(f[2])
	if !ok {
		return KernelRow{}, fmt.Errorf("unknown dtype %q", f[2])
	}
	flops, e1 := strconv.ParseFloat(f[3], 64)
	secs, e2 := strconv.ParseFloat(f[4], 64)
	switch {
	case e1 != nil || !(flops >= 0) || math.IsInf(flops, 0):
		return KernelRow{}, fmt.Errorf("flops %q must be a number >= 0", f[3])
	case e2 != nil || !positive(secs):
		return KernelRow{}, fmt.Errorf("seconds %q must be a positive number", f[4])
	}
	return KernelRow{Op: op, Shapes: shapes, DType: dt, Flops: flops, Seconds: secs}, nil
}

func parsePackRow(f []string) (PackRow, error) {
	if len(f) != 4 {
		return PackRow{}, fmt.Errorf("want 4 fields (%s), got %d", packHeader, len(f))
	}
	op, ok := ir.LookupOp(f[0])
	if !ok || op != ir.MatMul && op != ir.MatMulGradA {
		return PackRow{}, fmt.Errorf("pack of %q: want matmul or matmul_grad_a", f[0])
	}
	k, e1 := strconv.ParseInt(f[1], 10, 64)
	n, e2 := strconv.ParseInt(f[2], 10, 64)
	secs, e3 := strconv.ParseFloat(f[3], 64)
	switch {
	case e1 != nil || e2 != nil || k < 1 || n < 1:
		return PackRow{}, fmt.Errorf("k %q and n %q must be positive integers", f[1], f[2])
	case e3 != nil || !positive(secs):
		return PackRow{}, fmt.Errorf("seconds %q must be a positive number", f[3])
	}
	return PackRow{Op: op, K: k, N: n, Seconds: secs}, nil
}

func positive(x float64) bool { return x > 0 && !math.IsInf(x, 0) }

// FormatShapes writes operand shapes as the profile does: dims joined by
// x, operands by ; and a scalar as ().
func FormatShapes(shapes [][]int64) string {
	var b strings.Builder
	for i, s := range shapes {
		if i > 0 {
			b.WriteByte(';')
		}
		if len(s) == 0 {
			b.WriteString("()")
		}
		for j, d := range s {
			if j > 0 {
				b.WriteByte('x')
			}
			b.WriteString(strconv.FormatInt(d, 10))
		}
	}
	return b.String()
}

// ParseShapes reads FormatShapes's form.
func ParseShapes(s string) ([][]int64, error) {
	if s == "" {
		return nil, fmt.Errorf("empty shapes")
	}
	var out [][]int64
	for _, op := range strings.Split(s, ";") {
		shape := []int64{}
		if op != "()" {
			for _, d := range strings.Split(op, "x") {
				n, err := strconv.ParseInt(d, 10, 64)
				if err != nil || n < 1 {
					return nil, fmt.Errorf("shape %q: dims must be positive integers joined by x (64x172)", op)
				}
				shape = append(shape, n)
			}
		}
		out = append(out, shape)
	}
	return out, nil
}

// AddCollective adds a measurement (used by `amspc profile`).
func (p *Profile) AddCollective(r CollectiveRow) {
	p.Collectives = append(p.Collectives, r)
	p.indexed = false
	p.index()
}

// AddPack adds a measured packing (used by `amspc profile`).
func (p *Profile) AddPack(r PackRow) { p.Packs = append(p.Packs, r) }

// HasPacks reports whether the profile measured packings: its matmul and
// matmul_grad_a rows are then the products on B already packed.
func (p *Profile) HasPacks() bool { return len(p.Packs) > 0 }

// PackTime is the seconds of packing a [k, n] weight as kind's B operand
// (kind matmul or matmul_grad_a), and whether the profile measured
// packings of that kind: the measurement of that shape, else the one
// nearest in elements scaled by the elements (packing copies them).
func (p *Profile) PackTime(kind ir.OpKind, k, n int64) (float64, bool) {
	best, bestD := -1, math.Inf(1)
	for i, r := range p.Packs {
		if r.Op != kind {
			continue
		}
		if r.K == k && r.N == n {
			return r.Seconds, true
		}
		if d := math.Abs(math.Log(float64(r.K*r.N) / float64(k*n))); d < bestD {
			best, bestD = i, d
		}
	}
	if best < 0 {
		return 0, false
	}
	r := p.Packs[best]
	return r.Seconds * float64(k*n) / float64(r.K*r.N), true
}

// AddKernel adds a measurement (used by `amspc profile`).
func (p *Profile) AddKernel(r KernelRow) {
	p.Kernels = append(p.Kernels, r)
	p.indexed = false
	p.index()
}

// index builds the lookup tables from the rows. Parsing and adding
// index at once, so lookups only read and a profile can be shared.
func (p *Profile) index() {
	if p.indexed {
		return
	}
	p.rows = map[profileKey][]profilePoint{}
	p.hasShared = false
	for _, r := range p.Collectives {
		p.hasShared = p.hasShared || r.Shared
		k := profileKey{r.Coll, r.Group.S0, r.Group.S1, r.Shared}
		p.rows[k] = append(p.rows[k], profilePoint{math.Log(r.Bytes), math.Log(r.GBps * 1e9)})
	}
	for _, pts := range p.rows {
		sort.Slice(pts, func(i, j int) bool { return pts[i].logBytes < pts[j].logBytes })
	}
	p.exact = map[kernelKey][]float64{}
	work := map[ir.OpKind]map[float64][]float64{} // op -> work -> rates
	for _, r := range p.Kernels {
		k := kernelKey{r.Op, FormatShapes(r.Shapes)}
		p.exact[k] = append(p.exact[k], r.Seconds)
		w := KernelWork(r.Op, r.Flops, r.Shapes)
		if w <= 0 {
			continue
		}
		if work[r.Op] == nil {
			work[r.Op] = map[float64][]float64{}
		}
		work[r.Op][w] = append(work[r.Op][w], w/r.Seconds)
	}
	p.byKind = map[ir.OpKind][]ratePoint{}
	for op, byWork := range work {
		var pts []ratePoint
		for w, rates := range byWork {
			pts = append(pts, ratePoint{math.Log(w), mean(rates)})
		}
		sort.Slice(pts, func(i, j int) bool { return pts[i].logWork < pts[j].logWork })
		p.byKind[op] = pts
	}
	p.indexed = true
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// Bandwidth is the effective bandwidth (bytes/s) of c over g at size
// bytes, and whether the profile covers that collective and group.
func (p *Profile) Bandwidth(c Coll, g ir.Factor, bytes float64) (float64, bool) {
	return p.bandwidth(profileKey{c, g.S0, g.S1, false}, bytes)
}

// SharedBandwidth is Bandwidth of the shared all-gather (all_gather_shared
// rows) over g at size bytes (the whole gathered buffer), and whether the
// profile measured it: only where the ranks run in one process.
func (p *Profile) SharedBandwidth(g ir.Factor, bytes float64) (float64, bool) {
	return p.bandwidth(profileKey{ir.AllGather, g.S0, g.S1, true}, bytes)
}

// PeakBandwidth is the highest effective bandwidth (bytes/s) the
// profile measured for c over g (shared: its all_gather_shared rows), at
// any size, and whether it measured any: the rate its copies reach once
// a call's fixed costs (meeting the members, waking them) are small
// against its bytes.
func (p *Profile) PeakBandwidth(c Coll, g ir.Factor, shared bool) (float64, bool) {
	pts := p.rows[profileKey{c, g.S0, g.S1, shared}]
	if len(pts) == 0 {
		return 0, false
	}
	best := pts[0].logBW
	for _, q := range pts[1:] {
		best = max(best, q.logBW)
	}
	return math.Exp(best), true
}

// HasShared says whether the profile measured shared all-gathers.
func (p *Profile) HasShared() bool { return p.hasShared }

func (p *Profile) bandwidth(k profileKey, bytes float64) (float64, bool) {
	pts := p.rows[k]
	if len(pts) == 0 {
		return 0, false
	}
	x := math.Log(bytes)
	switch {
	case x <= pts[0].logBytes:
		return math.Exp(pts[0].logBW), true
	case x >= pts[len(pts)-1].logBytes:
		return math.Exp(pts[len(pts)-1].logBW), true
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].logBytes >= x })
	a, b := pts[i-1], pts[i]
	t := (x - a.logBytes) / (b.logBytes - a.logBytes)
	return math.Exp(a.logBW + t*(b.logBW-a.logBW)), true
}

// KernelWork is the amount of work the kernel rate curves of kind are
// drawn over. Matrix products and attention are compute-bound: their
// work is the FLOP count. Every other kernel (elementwise ops, norms,
// rope, the loss, the optimizer step, casts, embedding gathers and
// transposes, several of which the op table or the passes give no FLOPs)
// is memory-bound on a CPU, and its work is the elements of its
// operands, whatever flops says, so one op's rows always share a unit.
func KernelWork(kind ir.OpKind, flops float64, shapes [][]int64) float64 {
	switch kind {
	case ir.MatMul, ir.MatMulGradA, ir.MatMulGradB, ir.Attention, ir.AttentionGrad:
		if flops > 0 {
			return flops
		}
	}
	var n float64
	for _, s := range shapes {
		e := 1.0
		for _, d := range s {
			e *= float64(d)
		}
		n += e
	}
	return n
}

// KernelTime is the predicted seconds of one call of a kernel of kind
// with operand shapes and FLOP count flops, and whether the profile
// measured that kind at all. A measurement of the same kind and shapes
// is taken as it is (the mean over the dtypes measured). Otherwise the
// kind's measured rate, work per second (KernelWork: FLOPs for matrix
// products and attention, operand elements for the memory-bound rest),
// is interpolated linearly in
// log(work) between the measurements around the call's work, held at the
// nearest one outside them, and the time is work / rate.
func (p *Profile) KernelTime(kind ir.OpKind, shapes [][]int64, flops float64) (seconds float64, ok bool) {
	if s, hit := p.exact[kernelKey{kind, FormatShapes(shapes)}]; hit {
		return mean(s), true
	}
	pts := p.byKind[kind]
	if len(pts) == 0 {
		return 0, false
	}
	w := KernelWork(kind, flops, shapes)
	if w <= 0 {
		return 0, true
	}
	x := math.Log(w)
	var rate float64
	switch {
	case x <= pts[0].logWork:
		rate = pts[0].rate
	case x >= pts[len(pts)-1].logWork:
		rate = pts[len(pts)-1].rate
	default:
		i := sort.Search(len(pts), func(i int) bool { return pts[i].logWork >= x })
		a, b := pts[i-1], pts[i]
		t := (x - a.logWork) / (b.logWork - a.logWork)
		rate = a.rate + t*(b.rate-a.rate)
	}
	return w / rate, true
}

// HasKernels reports whether the profile measured any kernel.
func (p *Profile) HasKernels() bool { return len(p.Kernels) > 0 }

// Write writes the profile in its CSV form: the version line, the
// metadata, then each table's rows sorted (collectives by kind, group
// shape and size; kernels by op, shapes and dtype), numbers with four
// significant digits, so two profiles of one machine diff row by row.
func (p *Profile) Write(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, Version)
	for _, m := range p.Meta {
		fmt.Fprintf(bw, "# %s = %s\n", m.Key, strings.ReplaceAll(m.Value, "\n", " "))
	}
	g4 := func(x float64) string { return strconv.FormatFloat(x, 'g', 4, 64) }
	if len(p.Collectives) > 0 {
		rows := append([]CollectiveRow(nil), p.Collectives...)
		sort.SliceStable(rows, func(i, j int) bool {
			a, b := rows[i], rows[j]
			switch {
			case a.Coll != b.Coll:
				return a.Coll < b.Coll
			case a.Shared != b.Shared:
				return !a.Shared
			case a.Group.S1 != b.Group.S1:
				return a.Group.S1 < b.Group.S1
			case a.Group.S0 != b.Group.S0:
				return a.Group.S0 < b.Group.S0
			}
			return a.Bytes < b.Bytes
		})
		fmt.Fprintln(bw, collectiveHeader)
		for _, r := range rows {
			fmt.Fprintf(bw, "%s,%d,%d,%s,%s\n", r.name(), r.Group.S0, r.Group.S1,
				strconv.FormatFloat(r.Bytes, 'f', -1, 64), g4(r.GBps))
		}
	}
	if len(p.Kernels) > 0 {
		type line struct{ op, shapes, dt, text string }
		var rows []line
		for _, r := range p.Kernels {
			l := line{r.Op.String(), FormatShapes(r.Shapes), r.DType.String(), ""}
			l.text = fmt.Sprintf("%s,%s,%s,%s,%s", l.op, l.shapes, l.dt,
				strconv.FormatFloat(r.Flops, 'f', -1, 64), g4(r.Seconds))
			rows = append(rows, l)
		}
		sort.SliceStable(rows, func(i, j int) bool {
			a, b := rows[i], rows[j]
			if a.op != b.op {
				return a.op < b.op
			}
			if a.shapes != b.shapes {
				return a.shapes < b.shapes
			}
			return a.dt < b.dt
		})
		fmt.Fprintln(bw, kernelHeader)
		for _, r := range rows {
			fmt.Fprintln(bw, r.text)
		}
	}
	if len(p.Packs) > 0 {
		rows := append([]PackRow(nil), p.Packs...)
		sort.SliceStable(rows, func(i, j int) bool {
			a, b := rows[i], rows[j]
			if a.Op != b.Op {
				return a.Op.String() < b.Op.String()
			}
			if a.K != b.K {
				return a.K < b.K
			}
			return a.N < b.N
		})
		fmt.Fprintln(bw, packHeader)
		for _, r := range rows {
			fmt.Fprintf(bw, "%v,%d,%d,%s\n", r.Op, r.K, r.N, g4(r.Seconds))
		}
	}
	if o := p.Overhead; o != (Overhead{}) {
		fmt.Fprintln(bw, overheadHeader)
		fmt.Fprintf(bw, "kernel_scale,%s\ncollective,%s\n", g4(o.KernelScale), g4(o.Collective))
		if o.Instruction > 0 {
			fmt.Fprintf(bw, "instruction,%s\n", g4(o.Instruction))
		}
		if o.InstructionTP > 0 {
			fmt.Fprintf(bw, "instruction_tp,%s\n", g4(o.InstructionTP))
		}
		if o.Wake > 0 {
			fmt.Fprintf(bw, "wake,%s\n", g4(o.Wake))
		}
		if o.Cores > 0 {
			fmt.Fprintf(bw, "cores,%d\n", o.Cores)
		}
	}
	return bw.Flush()
}

// MetaValue is the value of metadata key, "" if absent.
func (p *Profile) MetaValue(key string) string {
	for _, m := range p.Meta {
		if m.Key == key {
			return m.Value
		}
	}
	return ""
}

// Processors is how many processors the profile's ranks ran on at once
// (its `# gomaxprocs` line, which amspc profile and validate write), 0
// when it does not say.
func (p *Profile) Processors() int {
	n, err := strconv.Atoi(p.MetaValue("gomaxprocs"))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// KernelShapes is the operand shapes of kernel instruction in of program
// p as a profile keys them: each buffer's tensor shape, or [elements] for
// a flat shard that has none (the optimizer's operands).
func KernelShapes(p *ir.Program, in *ir.Instr) [][]int64 {
	out := make([][]int64, len(in.Args))
	for i, id := range in.Args {
		b := p.Buffers[id]
		if len(b.Shape) > 0 {
			out[i] = append([]int64(nil), b.Shape...)
		} else {
			out[i] = []int64{b.Elems}
		}
	}
	return out
}
