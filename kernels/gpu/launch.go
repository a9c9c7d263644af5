package gpu

import (
	"encoding/binary"
	"fmt"
	"math"

	"amspc/ir"
	"amspc/kernels"
)

// An op's launch plan: the ops.cu kernels one instruction of the language
// runs, in order, with their arguments and geometry, and the scratch
// memory and host work around them. A GPU backend executes a plan on
// device memory; package hostc executes the same plan on the host, and
// its tests check every op's plan against package kernels, so argument
// order, scratch sizes and geometry are tested without a GPU.

// ArgKind says where a kernel argument comes from.
type ArgKind byte

const (
	Operand  ArgKind = iota // the instruction's operand N (a pointer)
	Result                  // the instruction's result N (a pointer)
	Scratch                 // the plan's scratch buffer N (a pointer)
	Flag                    // result N's non-finite flag (a pointer to a uint64 holding NoneNonFinite before)
	IDFlag                  // the plan's id check (Plan.IDs): a uint64 holding NoneNonFinite before, lowered by an id out of range (BadID)
	LossSlot                // where the plan's loss goes (Plan.Loss): a float64 the host reads after the step
	Null                    // a null pointer
	Int                     // I, a long long
	Float32                 // F, a float
	Float64                 // F, a double
)

// Arg is one argument of a launch. A pointer's I is a byte offset into
// its buffer (a chunk of rows).
type Arg struct {
	Kind ArgKind
	N    int
	I    int64
	F    float64
}

// at is pointer a offset by bytes.
func at(a Arg, bytes int64) Arg { a.I += bytes; return a }

func opnd(i int) Arg    { return Arg{Kind: Operand, N: i} }
func res(i int) Arg     { return Arg{Kind: Result, N: i} }
func scr(i int) Arg     { return Arg{Kind: Scratch, N: i} }
func flag(i int) Arg    { return Arg{Kind: Flag, N: i} }
func i64(v int64) Arg   { return Arg{Kind: Int, I: v} }
func f32(v float64) Arg { return Arg{Kind: Float32, F: float64(float32(v))} }
func f64(v float64) Arg { return Arg{Kind: Float64, F: v} }
func boolArg(b bool) Arg {
	if b {
		return i64(1)
	}
	return i64(0)
}
func (a Arg) param() Param     { return map[ArgKind]Param{Int: I64, Float32: F32, Float64: F64}[a.Kind] }
func (a Arg) pointer() bool    { return a.Kind <= Null }
func (l *Launch) add(a ...Arg) { l.Args = append(l.Args, a...) }

// Launch is one kernel launch: Grid blocks of Block threads (Grid[1] and
// Grid[2] 1 unless the kernel is an attention kernel), Smem bytes of
// dynamic shared memory. With Gemm it is a matmul instead, in order
// with the kernels around it: Args are its a, b and output pointers.
type Launch struct {
	Kernel string
	Grid   [3]int
	Block  int
	Smem   int
	Args   []Arg
	Gemm   *Gemm
}

// gemmLaunch is a matmul among a plan's launches: out = a·b as g says.
func gemmLaunch(g Gemm, a, b, out Arg) Launch {
	return Launch{Kernel: "gemm", Gemm: &g, Args: []Arg{a, b, out}}
}

// ScratchBuf is device memory a plan needs for its launches: Bytes bytes,
// holding Init (host-computed data, uploaded before the launches) or, when
// Init is nil, Fill repeated as a little-endian uint64 (zero: zeroed).
type ScratchBuf struct {
	Bytes int64
	Init  []byte
	Fill  uint64
	// Keep says the buffer outlives the launch: a backend keeps one per
	// instruction and uploads Init again only when it has changed
	// (AdamW's decayed ranges never do, its step's factors once a step),
	// so a step after the first moves only what the step changes.
	Keep bool
	// PerStep says the content depends on OpCall.Step (AdamW's bias
	// corrections): a backend that replays a captured step uploads it
	// again for each step. No other scratch content depends on the step.
	PerStep bool
}

// GemmKind is a cuBLASLt product.
type GemmKind int

const (
	GemmAB  GemmKind = iota // out[m,n] = a[m,k] @ b[k,n]
	GemmABt                 // da[m,k] = dy[m,n] @ b[k,n]^T
	GemmAtB                 // db[k,n] = a[m,k]^T @ dy[m,n]
)

// Gemm is a matmul: operands 0 and 1 into result 0 (fp32), the operands
// fp32 or, when BF16, both bf16 (cuBLASLt's bf16 inputs, fp32
// accumulation: tensor cores). Among a plan's launches (Launch.Gemm) it
// may also write bf16 (OutBF16, rounded to nearest even from the fp32
// sums; with BF16 inputs only) or add to its output (Accumulate, fp32
// output only: each element goes on from its value, as
// kernels.MatMulGradBAcc).
type Gemm struct {
	Kind       GemmKind
	M, K, N    int
	BF16       bool
	OutBF16    bool
	Accumulate bool
}

// Check says what is wrong with g's combination of types, if anything.
func (g *Gemm) Check() error {
	switch {
	case g.OutBF16 && !g.BF16:
		return fmt.Errorf("gemm: bf16 output of fp32 inputs")
	case g.OutBF16 && g.Accumulate:
		return fmt.Errorf("gemm: accumulating into bf16")
	}
	return nil
}

// Plan is an instruction's work on a GPU.
type Plan struct {
	// Copies are (result, operand) pairs copied before the launches when
	// they are not the same memory (AdamW updates in place; a cast to
	// fp32 is a copy).
	Copies   [][2]int
	Gemm     *Gemm
	Scratch  []ScratchBuf
	Launches []Launch
	// IDs, when not nil, says what the launches' IDFlag argument checks:
	// the host reads the flag with the step's other checks, after the
	// step, and names the first id out of range.
	IDs *IDCheck
	// Loss says the launches write the step's loss (result 0's value)
	// into their LossSlot argument, which the host reads after the step.
	Loss bool
	// Stored says the launches read and write the operands and results
	// in their own storage (bf16 as two bytes) and flag each result's
	// first NaN or infinity (a Flag argument), as bf16_finish and
	// first_nonfinite_f32 would after the fp32 kernels: a backend runs
	// them on its memory as it is, with no widening, rounding or check
	// around them (OpCall.Storage asks for such a plan).
	Stored bool
}

// BF16Widen is bf16 storage's widening of n elements: operand 0 (bf16)
// into scratch 0 (fp32).
func BF16Widen(n int64) Launch { return elementwise("bf16_widen", n, scr(0), opnd(0), i64(n)) }

// BF16Finish is bf16_finish over n floats (scratch 0) into bf16 result 0,
// the non-finite flag (scratch 1) as CheckFinite's: bf16_round,
// first_nonfinite_f32 and bf16_pack in one pass (the three stay in ops.cu
// as its definition, checked against it on the host).
func BF16Finish(n int64) Launch {
	return elementwise("bf16_finish", n, res(0), scr(0), i64(n), scr(1))
}

// CheckFinite is first_nonfinite_f32 over n floats (operand 0) into a
// uint64 flag (scratch 0) that holds NoneNonFinite before: NonFinite
// decodes it after.
func CheckFinite(n int64) Launch {
	return elementwise("first_nonfinite_f32", n, opnd(0), i64(n), scr(0))
}

// Spin is spin_ns: one thread that holds its stream for ns nanoseconds
// (a stand-in collective).
func Spin(ns int64) Launch {
	return Launch{Kernel: "spin_ns", Grid: [3]int{1, 1, 1}, Block: 1, Args: []Arg{i64(ns)}}
}

// IDCheck is what a plan's ids are: "embed: id" or "cross_entropy:
// target", each below Vocab.
type IDCheck struct {
	What  string
	Vocab int
}

// BadID decodes an id check's flag (ops.cu's bad_id): the first position
// of an id out of range and that id, or position -1 when there is none.
func BadID(flag uint64) (pos int, id int32) {
	if flag == NoneNonFinite {
		return -1, 0
	}
	return int(flag >> 32), int32(uint32(flag))
}

// NoneNonFinite is a check's flag before first_nonfinite_f32 runs.
const NoneNonFinite = ^uint64(0)

// NonFinite decodes first_nonfinite_f32's flag: the index of the first
// NaN or infinity and the value there, or -1 when there is none.
func NonFinite(flag uint64) (int, float32) {
	if flag == NoneNonFinite {
		return -1, 0
	}
	v := float32(math.NaN())
	switch flag & 3 {
	case 1:
		v = float32(math.Inf(1))
	case 2:
		v = float32(math.Inf(-1))
	}
	return int(flag >> 2), v
}

// OpCall is what PlanOp needs of an instruction: its op, its operands'
// and results' dtypes and shapes, its attributes, the optimizer step and
// AdamW's decayed ranges. Never the operands' values: a plan reads
// nothing back from the device (no host waits inside a step).
type OpCall struct {
	Op                   ir.OpKind
	ArgTypes, OutTypes   []ir.DType
	ArgShapes, OutShapes [][]int64
	// ArgElems and OutElems are their element counts (a flat shard's
	// shape is empty).
	ArgElems, OutElems []int64
	Attr               func(name string) ir.AttrVal
	Step               int
	// LRAt, when set, is an AdamW op's learning rate of a step (the
	// train section's schedule); nil: its lr attribute every step.
	LRAt    func(step int) float64
	Decayed [][2]int
	// TensorCores lets bf16 attention run on tensor cores (mma.cu).
	TensorCores bool
	// Storage asks for a Stored plan where the op has one
	// (HasStoredPlan): its kernels take bf16 and fp32 operands and
	// results as they are stored, and check the results themselves.
	Storage bool
	// StoredOut, for a plan on fp32 results (not Storage), is the dtype
	// each result is stored in afterwards (bf16: the backend rounds it
	// after the plan): a fused op's plan that reads a result of its own
	// back rounds it as its storage will first, as the unfused ops would
	// read it. Nil: OutTypes.
	StoredOut []ir.DType
}

// RawBF16 says whether an instruction's launch plan takes its bf16
// operands as they are (else a backend widens them to fp32 first): a
// matmul of two bf16 operands (cuBLASLt's bf16 inputs), a linear
// cross-entropy of bf16 h and w (its products' inputs), and, with
// tensorCores, attention and its gradient on bf16 operands with a head
// dim mma.cu's kernels take (a multiple of 16 up to 128).
func RawBF16(op ir.OpKind, argTypes []ir.DType, argShapes [][]int64, heads int64, tensorCores bool) bool {
	all := len(argTypes) > 0
	for _, dt := range argTypes {
		all = all && dt == ir.BF16
	}
	switch op {
	case ir.MatMul, ir.MatMulGradA, ir.MatMulGradB:
		return len(argTypes) == 2 && all
	case ir.LinearCrossEntropy, ir.LinearCrossEntropyGrad: // h and w; the targets are ids
		return len(argTypes) == 3 && argTypes[0] == ir.BF16 && argTypes[1] == ir.BF16
	case ir.Attention, ir.AttentionGrad:
		if !tensorCores || !all || heads <= 0 || len(argShapes[0]) != 3 {
			return false
		}
		hd := argShapes[0][2] / heads
		return hd%16 == 0 && hd <= 128
	}
	return false
}

// ErrUnsupported wraps what the GPU kernels cannot do yet.
type ErrUnsupported struct{ What string }

func (e *ErrUnsupported) Error() string { return e.What + " is not supported on the GPU yet" }

// DefaultBlock is an elementwise launch's block; MaxGrid caps its grid
// (the threads then stride).
const (
	DefaultBlock = 256
	MaxGrid      = 65535
)

func elems(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// elementwise is a launch of kernel over n elements.
func elementwise(kernel string, n int64, args ...Arg) Launch {
	return Launch{Kernel: kernel, Grid: [3]int{Grid1D(n, DefaultBlock, MaxGrid), 1, 1}, Block: DefaultBlock, Args: args}
}

// row is a launch of kernel with a block per row of d elements.
func row(kernel string, rows, d int64, args ...Arg) Launch {
	return Launch{Kernel: kernel, Grid: [3]int{int(max(rows, 1)), 1, 1}, Block: RowBlock(d), Args: args}
}

// columns is a launch of a column kernel over d columns: one thread a
// column, each summing its rows in order; warp-sized blocks, so the
// columns spread over the GPU's multiprocessors.
func columns(kernel string, d int64, args ...Arg) Launch {
	return Launch{Kernel: kernel, Grid: [3]int{Grid1D(d, 32, MaxGrid), 1, 1}, Block: 32, Args: args}
}

func f32Scratch(n int64) ScratchBuf { return ScratchBuf{Bytes: 4 * n} }

// PlanOp is the launch plan of one instruction on fp32 operands and
// results (and i32 ids), but for a matmul of two bf16 operands: a backend
// with bf16 storage widens other bf16 operands and rounds bf16 results
// around it (BF16Widen, BF16Finish).
func PlanOp(c *OpCall) (*Plan, error) {
	var heads int64
	if c.Op == ir.Attention || c.Op == ir.AttentionGrad {
		heads = c.Attr("heads").Int
	}
	if plan := storedPlans[c.Op]; c.Storage && plan != nil {
		return planStored(c, plan)
	}
	raw := RawBF16(c.Op, c.ArgTypes, c.ArgShapes, heads, c.TensorCores)
	if raw && (c.Op == ir.Attention || c.Op == ir.AttentionGrad) {
		return planAttentionMMA(c)
	}
	for i, dt := range append(append([]ir.DType(nil), c.ArgTypes...), c.OutTypes...) {
		if raw && i < len(c.ArgTypes) {
			continue
		}
		if dt != ir.F32 && dt != ir.I32 {
			what := "operand"
			if i >= len(c.ArgTypes) {
				what = "result"
			}
			return nil, &ErrUnsupported{fmt.Sprintf("%v with a %v %s", c.Op, dt, what)}
		}
	}
	plan := opPlans[c.Op]
	if plan == nil {
		what := fmt.Sprintf("op %v", c.Op)
		if why, ok := Unsupported[c.Op]; ok {
			what += " (" + why + ")"
		}
		return nil, &ErrUnsupported{what}
	}
	p := &Plan{}
	if err := plan(c, p, raw); err != nil {
		return nil, err
	}
	return p, nil
}

// An opPlan fills p with the launches of one op; raw says its bf16
// operands are taken as they are (RawBF16).
type opPlan func(c *OpCall, p *Plan, raw bool) error

// Unsupported lists the ops that have no launch plan, each with the
// reason (TestEveryOpHasAKernel in package engine reads it with
// HasPlan): an op must be in one of opPlans and Unsupported.
var Unsupported = func() map[ir.OpKind]string {
	m := ir.CollectiveOps()
	const clip = "gradient clipping has CPU kernels only so far (its device kernels are not written yet): a plan with clip_grad_norm runs on CPU ranks"
	m[ir.GradSumSq], m[ir.ClipGrad] = clip, clip
	return m
}()

// planParts is the plan of to_parts (whole, the tensor x, is operand 0)
// or from_parts (whole is result 0): kernel over the whole tensor's
// outer x mid x inner elements, mid the dimension of the parts.
func planParts(kernel string, whole int) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		shape := c.ArgShapes[0]
		if whole == 1 {
			shape = c.OutShapes[0]
		}
		d, parts := int(c.Attr("dim").Int), c.Attr("parts").Int
		outer, inner := int64(1), int64(1)
		for _, k := range shape[:d] {
			outer *= k
		}
		for _, k := range shape[d+1:] {
			inner *= k
		}
		n := outer * shape[d] * inner
		p.Launches = []Launch{elementwise(kernel, n, res(0), opnd(0), i64(outer), i64(shape[d]), i64(inner), i64(parts))}
		return nil
	}
}

// HasPlan says whether op has a launch plan on the GPU.
func HasPlan(op ir.OpKind) bool { return opPlans[op] != nil }

// n is the element count of operand i; fa is float attribute name.
func (c *OpCall) n(i int) int64          { return c.ArgElems[i] }
func (c *OpCall) fa(name string) float64 { return c.Attr(name).Float }

func lastDim(s []int64) int64 { return s[len(s)-1] }

// gemm is a matmul's plan: the op table's GEMM (ir.OpInfo.GEMM) as
// cuBLASLt's product of kind. The GPU's Gemm names the forward matmul's
// m, k and n whatever the kind, so a gradient's product is mapped back.
func gemm(kind GemmKind) opPlan {
	return func(c *OpCall, p *Plan, raw bool) error {
		g, ok := c.Op.Info().GEMMOf(c.ArgShapes)
		if !ok {
			return fmt.Errorf("%v of shapes %v is not a matrix product", c.Op, c.ArgShapes)
		}
		switch kind {
		case GemmAB: // m x k times k x n
			p.Gemm = &Gemm{Kind: kind, M: int(g.M), K: int(g.K), N: int(g.N), BF16: raw}
		case GemmABt: // dy [m, n] times w [k, n]^T: the product's K is n
			p.Gemm = &Gemm{Kind: kind, M: int(g.M), K: int(g.N), N: int(g.K), BF16: raw}
		case GemmAtB: // a [m, k]^T times dy [m, n]: the product's M is k
			p.Gemm = &Gemm{Kind: kind, M: int(g.K), K: int(g.M), N: int(g.N), BF16: raw}
		}
		return nil
	}
}

// embedChunk is embed_count's chunk of n positions, counted by one
// thread: at least 256, and n in at most 16 chunks, so the counts per
// chunk and id stay within 16 x vocab (8 MiB at vocab 128,256).
func embedChunk(n int64) int64 { return max(256, (n+15)/16) }

// planEmbedGrad lists each id's positions on the device (embed_count to
// embed_place, ops.cu: the lists gpu.Positions makes), then sums dy's
// rows by them, so no host waits for the ids. Scratch: 0 start (vocab+1),
// 1 pos (n), 2 rank (n), 3 the counts per chunk and id, then their
// offsets (chunks*vocab, zeroed); int32 each.
func planEmbedGrad(c *OpCall, p *Plan, _ bool) error {
	vocab, d, n := c.OutShapes[0][0], c.OutShapes[0][1], c.n(0)
	chunk := embedChunk(n)
	chunks := (n + chunk - 1) / chunk
	p.Scratch = []ScratchBuf{{Bytes: 4 * (vocab + 1)}, {Bytes: 4 * max(n, 1)}, {Bytes: 4 * max(n, 1)}, {Bytes: 4 * max(chunks*vocab, 1)}}
	p.Launches = []Launch{
		elementwise("embed_count", chunks, scr(3), scr(2), opnd(0), i64(n), i64(vocab), i64(chunk)),
		elementwise("embed_offsets", vocab, scr(3), scr(0), i64(chunks), i64(vocab)),
		row("embed_scan", 1, vocab, scr(0), i64(vocab)),
		elementwise("embed_place", n, scr(1), scr(0), scr(3), scr(2), opnd(0), i64(n), i64(vocab), i64(chunk)),
		elementwise("embed_grad_f32", vocab*d, res(0), scr(0), scr(1), opnd(1), i64(vocab), i64(d)),
	}
	return nil
}

// opPlans is the GPU's launch plan of every op it runs, by op kind.
var opPlans = map[ir.OpKind]opPlan{
	ir.Embed: func(c *OpCall, p *Plan, _ bool) error {
		as := c.ArgShapes
		vocab, d, ids := as[1][0], as[1][1], c.n(0)
		p.IDs = &IDCheck{What: "embed: id", Vocab: int(vocab)}
		p.Launches = []Launch{elementwise("embed_f32", ids*d, res(0), opnd(0), opnd(1), i64(ids), i64(vocab), i64(d), Arg{Kind: IDFlag})}
		return nil
	},
	ir.EmbedGrad:   planEmbedGrad,
	ir.MatMul:      gemm(GemmAB),
	ir.MatMulGradA: gemm(GemmABt),
	ir.MatMulGradB: gemm(GemmAtB),
	ir.SumRows: func(c *OpCall, p *Plan, _ bool) error {
		d := c.OutElems[0]
		p.Launches = []Launch{columns("col_sum_f32", d, res(0), opnd(0), Arg{Kind: Null}, i64(c.n(0)/d), i64(d))}
		return nil
	},
	ir.Attention:     planAttention,
	ir.AttentionGrad: planAttention,
	ir.Transpose: func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{elementwise("transpose_f32", c.n(0), res(0), opnd(0), i64(c.ArgShapes[0][0]), i64(c.ArgShapes[0][1]))}
		return nil
	},
	ir.ToParts:   planParts("to_parts_f32", 0),
	ir.FromParts: planParts("from_parts_f32", 1),
	ir.Cast: func(c *OpCall, p *Plan, _ bool) error {
		// A copy: a bf16 result's storage rounds it (the device backend
		// computes on fp32 and rounds bf16 results).
		if dt := ir.DType(c.Attr("dtype").Int); dt != ir.F32 && dt != ir.BF16 {
			return &ErrUnsupported{fmt.Sprintf("cast to %v", dt)}
		}
		p.Copies = [][2]int{{0, 0}}
		return nil
	},
	ir.AdamWStep: planAdamW,
	// adamw then a copy of the new master into result 3, which the
	// backend rounds to bf16 as a cast's result.
	ir.AdamWCopy: func(c *OpCall, p *Plan, raw bool) error {
		if err := planAdamW(c, p, raw); err != nil {
			return err
		}
		nn := c.OutElems[0]
		p.Launches = append(p.Launches, elementwise("scale_f32", nn, res(3), res(0), i64(nn), f32(1)))
		return nil
	},
}

// planAdamW is adamw_f32's plan: in place on results 0-2, copied from
// operands 0-2 when they are not the same memory.
func planAdamW(c *OpCall, p *Plan, _ bool) error {
	p.Copies = [][2]int{{0, 0}, {1, 1}, {2, 2}}
	p.Scratch = []ScratchBuf{adamwDecay(c), adamwFactors(c)}
	nn := c.OutElems[0]
	p.Launches = []Launch{elementwise("adamw_f32", nn, res(0), res(1), res(2), opnd(3), i64(nn), scr(0), i64(int64(len(c.Decayed))), scr(1))}
	return nil
}

// planAdamWStored is adamw_st's plan, for adamw and adamw_copy: one pass
// from operands 0-3 into the results, the factors in scratch 1.
func planAdamWStored(c *OpCall, p *Plan, _ bool) error {
	for i := range 3 {
		if c.ArgTypes[i] != ir.F32 || c.OutTypes[i] != ir.F32 {
			return &ErrUnsupported{fmt.Sprintf("%v with a %v optimizer state", c.Op, c.ArgTypes[i])}
		}
	}
	p.Scratch = []ScratchBuf{adamwDecay(c), adamwFactors(c)}
	pc := Arg{Kind: Null}
	if c.Op == ir.AdamWCopy {
		pc = res(3)
	}
	nn := c.OutElems[0]
	l := stored(c, "adamw_st", nn, res(0), res(1), res(2), pc, opnd(0), opnd(1), opnd(2), opnd(3),
		i64(nn), scr(0), i64(int64(len(c.Decayed))), scr(1))
	if c.Op != ir.AdamWCopy {
		l.add(Arg{Kind: Null}) // first_pc
	}
	p.Launches = []Launch{l}
	return nil
}

// adamwFactors is the kept scratch of the step's eight factors
// (AdamWArgs), which the kernels read from device memory.
func adamwFactors(c *OpCall) ScratchBuf {
	fa := c.fa
	lr := fa("lr")
	if c.LRAt != nil {
		lr = c.LRAt(c.Step)
	}
	k := AdamWArgs(c.Step, lr, fa("beta1"), fa("beta2"), fa("eps"), fa("weight_decay"))
	return ScratchBuf{Bytes: 8 * int64(len(k)), Init: float64Bytes(k[:]), Keep: true, PerStep: true}
}

// adamwDecay is the scratch holding the decayed ranges, flat.
func adamwDecay(c *OpCall) ScratchBuf {
	flat := make([]int64, 0, 2*len(c.Decayed))
	for _, r := range c.Decayed {
		flat = append(flat, int64(r[0]), int64(r[1]))
	}
	return ScratchBuf{Bytes: 8 * int64(max(len(flat), 1)), Init: int64Bytes(flat), Keep: true}
}

// HasStoredPlan says whether op has a Stored plan (OpCall.Storage).
func HasStoredPlan(op ir.OpKind) bool { return storedPlans[op] != nil }

// storedPlans are the ops whose kernels read and write their storage
// types and flag their results (ops.cu's _st kernels): one pass over
// memory where the fp32 kernels of a bf16 instruction take five or six.
// Cross-entropy reads bf16 logits as they are (the fuse pass drops the
// cast to fp32 before it): the fp32 copy of the logits, the largest
// activation of a step, is never made.
var storedPlans = family(storage)

func init() {
	for op, plan := range family(plain) {
		opPlans[op] = plan
	}
	storedPlans[ir.AdamWStep] = planAdamWStored
	storedPlans[ir.AdamWCopy] = planAdamWStored
}

// family is the plans written once for both kernel families: the
// elementwise ops, the norms, RoPE and cross-entropy.
func family(k kset) map[ir.OpKind]opPlan {
	return map[ir.OpKind]opPlan{
		ir.Add:              broadcast(k, "add"),
		ir.Mul:              broadcast(k, "mul"),
		ir.SiLU:             unary(k, "silu"),
		ir.SiLUGrad:         unaryGrad(k, "silu_grad"),
		ir.GELU:             unary(k, "gelu"),
		ir.GELUGrad:         unaryGrad(k, "gelu_grad"),
		ir.GELUTanh:         unary(k, "gelu_tanh"),
		ir.GELUTanhGrad:     unaryGrad(k, "gelu_tanh_grad"),
		ir.SwiGLU:           gated(k, "swiglu"),
		ir.SwiGLUGrad:       gatedGrad(k, "swiglu_grad"),
		ir.GeGLUTanh:        gated(k, "geglu_tanh"),
		ir.GeGLUTanhGrad:    gatedGrad(k, "geglu_tanh_grad"),
		ir.Scale:            scale(k),
		ir.RMSNorm:          rmsnorm(k),
		ir.RMSNormGrad:      rmsnormGrad(k),
		ir.AddRMSNorm:       addRMSNorm(k),
		ir.AddRMSNormGrad:   addRMSNormGrad(k),
		ir.LayerNorm:        layernorm(k),
		ir.LayerNormGrad:    layernormGrad(k),
		ir.RoPE:             rope(k, 1),
		ir.RoPEGrad:         rope(k, -1),
		ir.RoPEQK:           ropeQK(k, 1),
		ir.RoPEQKGrad:       ropeQK(k, -1),
		ir.CrossEntropy:     crossEntropy(k),
		ir.CrossEntropyGrad: crossEntropyGrad(k),
	}
}

// kset is a family of kernels: ops.cu's fp32 kernels (plain, NAME_f32)
// or its storage kernels (storage, NAME_st), which take bf16 and fp32 as
// stored, with the mask of their bf16 pointers and a flag per result
// after their fp32 twin's parameters. A plan written against a kset
// serves both.
type kset bool

const (
	plain   kset = false
	storage kset = true
)

func (k kset) name(op string) string {
	if k == storage {
		return op + "_st"
	}
	return op + "_f32"
}

// ew, row and cols are k's elementwise, row and column launches of op.
func (k kset) ew(c *OpCall, op string, n int64, args ...Arg) Launch {
	if k == storage {
		return stored(c, k.name(op), n, args...)
	}
	return elementwise(k.name(op), n, args...)
}

func (k kset) row(c *OpCall, op string, rows, d int64, args ...Arg) Launch {
	l := k.ew(c, op, 0, args...)
	r := row(l.Kernel, rows, d)
	l.Grid, l.Block = r.Grid, r.Block
	return l
}

func (k kset) cols(c *OpCall, op string, d int64, args ...Arg) Launch {
	l := k.ew(c, op, 0, args...)
	col := columns(l.Kernel, d)
	l.Grid, l.Block = col.Grid, col.Block
	return l
}

// unary is an elementwise op's plan: op(out, x, n); unaryGrad its
// gradient's, op(dx, x, dy, n).
func unary(k kset, op string) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, op, c.n(0), res(0), opnd(0), i64(c.n(0)))}
		return nil
	}
}

func unaryGrad(k kset, op string) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, op, c.n(0), res(0), opnd(0), opnd(1), i64(c.n(0)))}
		return nil
	}
}

// broadcast is a broadcasting binary op: op(out, a, b, n, bn).
func broadcast(k kset, op string) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, op, c.n(0), res(0), opnd(0), opnd(1), i64(c.n(0)), i64(c.n(1)))}
		return nil
	}
}

// gated is a gated activation's plan: op(out, a, b, n); gatedGrad its
// gradient's, op(da, db, a, b, dy, n).
func gated(k kset, op string) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, op, c.n(0), res(0), opnd(0), opnd(1), i64(c.n(0)))}
		return nil
	}
}

func gatedGrad(k kset, op string) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, op, c.n(0), res(0), res(1), opnd(0), opnd(1), opnd(2), i64(c.n(0)))}
		return nil
	}
}

func scale(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		p.Launches = []Launch{k.ew(c, "scale", c.n(0), res(0), opnd(0), i64(c.n(0)), f32(c.fa("by")))}
		return nil
	}
}

// The norms: a block per row, and their weight gradients a thread per
// column summing the rows in order.
func rmsnorm(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		d := c.n(1)
		rows := c.n(0) / d
		p.Launches = []Launch{k.row(c, "rmsnorm", rows, d, res(0), opnd(0), opnd(1), i64(rows), i64(d), f32(c.fa("eps")))}
		return nil
	}
}

func rmsnormGrad(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		d := c.n(1)
		rows := c.n(0) / d
		p.Scratch = []ScratchBuf{f32Scratch(rows)}
		p.Launches = []Launch{
			k.row(c, "rmsnorm_grad", rows, d, res(0), scr(0), opnd(0), opnd(1), opnd(2), i64(rows), i64(d), f32(c.fa("eps"))),
			rmsnormGradW(k, c, rows, d),
		}
		return nil
	}
}

// rmsnormGradW is rmsnorm_grad's dw (result 1) from x (operand 0), dy
// (operand 2) and the row kernel's rstd (scratch 0): add_rmsnorm_grad's
// y, w and dh are rmsnorm_grad's x, w and dy.
func rmsnormGradW(k kset, c *OpCall, rows, d int64) Launch {
	return k.cols(c, "rmsnorm_grad_w", d, res(1), opnd(0), opnd(2), scr(0), i64(rows), i64(d))
}

// addRMSNorm is y = x + r (result 0) and h = rmsnorm(y, w) (result 1)
// with the bits of add then rmsnorm: in one pass (add_rmsnorm_st), or
// add_f32 then rmsnorm_f32 reading y back, rounded first when y is
// stored as bf16 (the backend rounds it again after the plan, to the
// same bits).
func addRMSNorm(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		n, d := c.n(0), c.n(2)
		rows := n / d
		eps := f32(c.fa("eps"))
		if k == storage {
			p.Launches = []Launch{k.row(c, "add_rmsnorm", rows, d, res(0), res(1), opnd(0), opnd(1), opnd(2), i64(rows), i64(d), eps)}
			return nil
		}
		p.Launches = append([]Launch{k.ew(c, "add", n, res(0), opnd(0), opnd(1), i64(n), i64(n))}, c.roundStored(0, res(0), n)...)
		p.Launches = append(p.Launches, k.row(c, "rmsnorm", rows, d, res(1), res(0), opnd(2), i64(rows), i64(d), eps))
		return nil
	}
}

// addRMSNormGrad is dx = dy + rmsnorm_grad's dx (result 0, from y, w
// and dh: operands 0-2; dy operand 3) and rmsnorm_grad's dw (result 1),
// with the bits of rmsnorm_grad then add: rmsnorm_grad's dx is rounded
// as dx is stored before the sum, as the unfused add reads it. In one
// pass (add_rmsnorm_grad_st), or rmsnorm_grad_f32 into scratch 1, rounded
// there, then add_f32.
func addRMSNormGrad(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		n, d := c.n(0), c.n(1)
		rows := n / d
		eps := f32(c.fa("eps"))
		p.Scratch = []ScratchBuf{f32Scratch(rows)}
		if k == storage {
			p.Launches = []Launch{
				k.row(c, "add_rmsnorm_grad", rows, d, res(0), scr(0), opnd(0), opnd(1), opnd(2), opnd(3), i64(rows), i64(d), eps),
				rmsnormGradW(k, c, rows, d),
			}
			return nil
		}
		p.Scratch = append(p.Scratch, f32Scratch(n))
		p.Launches = []Launch{
			k.row(c, "rmsnorm_grad", rows, d, scr(1), scr(0), opnd(0), opnd(1), opnd(2), i64(rows), i64(d), eps),
			rmsnormGradW(k, c, rows, d),
		}
		p.Launches = append(p.Launches, c.roundStored(0, scr(1), n)...)
		p.Launches = append(p.Launches, k.ew(c, "add", n, res(0), opnd(3), scr(1), i64(n), i64(n)))
		return nil
	}
}

// roundStored is bf16_round in place on the n floats at x when result i
// is stored as bf16 (OpCall.StoredOut): a plain plan reading back a
// value it computes as result i's storage will hold it.
func (c *OpCall) roundStored(i int, x Arg, n int64) []Launch {
	dt := c.OutTypes[i]
	if c.StoredOut != nil {
		dt = c.StoredOut[i]
	}
	if dt != ir.BF16 {
		return nil
	}
	return []Launch{elementwise("bf16_round", n, x, i64(n))}
}

func layernorm(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		d := c.n(1)
		rows := c.n(0) / d
		p.Launches = []Launch{k.row(c, "layernorm", rows, d, res(0), opnd(0), opnd(1), opnd(2), i64(rows), i64(d), f32(c.fa("eps")))}
		return nil
	}
}

func layernormGrad(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		d := c.n(1)
		rows := c.n(0) / d
		p.Scratch = []ScratchBuf{f32Scratch(2 * rows)}
		p.Launches = []Launch{
			k.row(c, "layernorm_grad", rows, d, res(0), scr(0), opnd(0), opnd(1), opnd(2), i64(rows), i64(d), f32(c.fa("eps"))),
			k.cols(c, "layernorm_grad_wb", d, res(1), res(2), opnd(0), opnd(2), scr(0), i64(rows), i64(d)),
		}
		return nil
	}
}

// rope rotates (sign 1) or rotates back (-1, the gradient), the
// frequencies in kept scratch 0.
func rope(k kset, sign float64) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		x := c.ArgShapes[0]
		heads := c.Attr("heads").Int
		p.Scratch = []ScratchBuf{c.ropeFreqs(x[2] / heads)}
		p.Launches = []Launch{k.ew(c, "rope", c.n(0)/2, res(0), opnd(0), i64(x[0]), i64(x[1]), i64(heads), i64(x[2]/heads),
			scr(0), f32(sign))}
		return nil
	}
}

// ropeFreqs is the kept scratch of a rope's frequencies for head dim hd
// (kernels.RoPEFreq.Freqs: theta's powers, scaled as the attributes say),
// which the kernels read: the host computes them once, the CPU's way.
func (c *OpCall) ropeFreqs(hd int64) ScratchBuf {
	f := kernels.RoPEFreq(ir.RoPEScalingFrom(c.Attr)).Freqs(int(hd))
	return ScratchBuf{Bytes: 8 * int64(max(len(f), 1)), Init: float64Bytes(f), Keep: true}
}

// ropeQK is rope_qk's plan (sign 1) or rope_qk_grad's (-1): operand 0
// of heads into result 0 and operand 1 of kv_heads into result 1, as
// rope turns each. Storage: one rope_qk_st launch over the pairs of
// both; plain: rope_f32 on each.
func ropeQK(k kset, sign float64) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		q, kv := c.ArgShapes[0], c.ArgShapes[1]
		heads, kvHeads := c.Attr("heads").Int, c.Attr("kv_heads").Int
		p.Scratch = []ScratchBuf{c.ropeFreqs(q[2] / heads), c.ropeFreqs(kv[2] / kvHeads)}
		if k == storage {
			p.Launches = []Launch{k.ew(c, "rope_qk", (c.n(0)+c.n(1))/2, res(0), res(1), opnd(0), opnd(1), i64(q[0]), i64(q[1]),
				i64(heads), i64(q[2]/heads), i64(kvHeads), i64(kv[2]/kvHeads), scr(0), scr(1), f32(sign))}
			return nil
		}
		for i, h := range []int64{heads, kvHeads} {
			x := c.ArgShapes[i]
			p.Launches = append(p.Launches, k.ew(c, "rope", c.n(i)/2, res(i), opnd(i), i64(x[0]), i64(x[1]), i64(h), i64(x[2]/h),
				scr(i), f32(sign)))
		}
		return nil
	}
}

// crossEntropy is per-row losses in double (scratch 0), their mean
// (mean_loss: the loss, result 0's value, and the LossSlot) and the
// first row whose target is out of range (the IDFlag).
func crossEntropy(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		if c.OutTypes[0] != ir.F32 {
			return &ErrUnsupported{fmt.Sprintf("%v with a %v loss", c.Op, c.OutTypes[0])}
		}
		v := lastDim(c.ArgShapes[0])
		rows := c.n(0) / v
		p.Scratch = []ScratchBuf{{Bytes: 8 * max(rows, 1)}}
		p.IDs, p.Loss = &IDCheck{What: "cross_entropy: target", Vocab: int(v)}, true
		if rows > 0 {
			p.Launches = []Launch{k.row(c, "cross_entropy", rows, v, scr(0), opnd(0), opnd(1), i64(rows), i64(v), Arg{Kind: IDFlag})}
		}
		p.Launches = append(p.Launches, meanLoss(rows, 0))
		return nil
	}
}

// meanLoss is mean_loss over rows per-row losses in scratch buf into
// result 0 and the LossSlot.
func meanLoss(rows int64, buf int) Launch {
	return row("mean_loss", 1, max(rows/64, 1), res(0), Arg{Kind: LossSlot}, scr(buf), i64(rows))
}

func crossEntropyGrad(k kset) opPlan {
	return func(c *OpCall, p *Plan, _ bool) error {
		v := lastDim(c.ArgShapes[0])
		rows := c.n(0) / v
		f := float64(float32(c.fa("scale"))) / float64(rows)
		p.Launches = []Launch{k.row(c, "cross_entropy_grad", rows, v, res(0), opnd(0), opnd(1), i64(rows), i64(v), f64(f))}
		return nil
	}
}

// planStored is an op's Stored plan: its operands and results fp32 or
// bf16, nothing else (but token ids, i32).
func planStored(c *OpCall, plan opPlan) (*Plan, error) {
	for i, dt := range append(append([]ir.DType(nil), c.ArgTypes...), c.OutTypes...) {
		if ids := c.Op.Info().IDs; ids != nil && i == ids.Arg && dt == ir.I32 {
			continue
		}
		if dt != ir.F32 && dt != ir.BF16 {
			what := "operand"
			if i >= len(c.ArgTypes) {
				what = "result"
			}
			return nil, &ErrUnsupported{fmt.Sprintf("%v with a %v %s", c.Op, dt, what)}
		}
	}
	p := &Plan{Stored: true}
	if err := plan(c, p, false); err != nil {
		return nil, err
	}
	return p, nil
}

// stored is an elementwise launch of an _st kernel: args, then the mask
// of its bf16 pointer parameters (bit k: parameter k) and a Flag for
// each result among args, in order.
func stored(c *OpCall, kernel string, n int64, args ...Arg) Launch {
	var mask int64
	var flags []Arg
	for k, a := range args {
		switch {
		case a.Kind == Operand && c.ArgTypes[a.N] == ir.BF16, a.Kind == Result && c.OutTypes[a.N] == ir.BF16:
			mask |= 1 << k
		}
		if a.Kind == Result {
			flags = append(flags, flag(a.N))
		}
	}
	return elementwise(kernel, n, append(append(args, i64(mask)), flags...)...)
}

// planAttention is attention's plan on fp32 CUDA cores, forward or
// backward.
func planAttention(c *OpCall, p *Plan, _ bool) error {
	q := c.ArgShapes[0]
	heads := c.Attr("heads").Int
	kvh := c.Attr("kv_heads").Int
	if kvh == 0 {
		kvh = heads
	}
	b, s, hd := q[0], q[1], q[2]/heads
	if hd > MaxHeadDim {
		return &ErrUnsupported{fmt.Sprintf("attention with head dim %d (at most %d)", hd, MaxHeadDim)}
	}
	causal := boolArg(c.Attr("causal").Bool)
	dims := []Arg{i64(b), i64(s), i64(heads), i64(kvh), i64(hd), causal}
	rows := b * heads * s
	geo := AttentionGeometry(int(hd))
	if c.Op == ir.Attention {
		p.Scratch = []ScratchBuf{f32Scratch(rows)}
		p.Launches = []Launch{geo.Launch("attention_f32", s, heads, b, append([]Arg{res(0), scr(0), opnd(0), opnd(1), opnd(2)}, dims...)...)}
		return nil
	}
	// As on the CPU, forward runs again for its log-sum-exp (into a
	// scratch output); dsum is rowsum(out * dout) of the given out.
	// attention_dkv_f32 runs a block per query head: with grouped KV
	// heads into one part per head (scratch), which
	// attention_dkv_sum_f32 adds up.
	p.Scratch = []ScratchBuf{f32Scratch(rows), f32Scratch(c.n(3)), f32Scratch(rows)}
	dk, dv := res(1), res(2)
	if kvh != heads {
		p.Scratch = append(p.Scratch, f32Scratch(c.n(3)), f32Scratch(c.n(3)))
		dk, dv = scr(3), scr(4)
	}
	p.Launches = []Launch{
		geo.Launch("attention_f32", s, heads, b, append([]Arg{scr(1), scr(0), opnd(0), opnd(1), opnd(2)}, dims...)...),
		elementwise("attention_dsum_f32", rows, scr(2), opnd(3), opnd(4), i64(b), i64(s), i64(heads), i64(hd)),
		geo.Launch("attention_dq_f32", s, heads, b, append([]Arg{res(0), opnd(0), opnd(1), opnd(2), scr(0), opnd(4), scr(2)}, dims...)...),
		geo.Launch("attention_dkv_f32", s, heads, b, append([]Arg{dk, dv, opnd(0), opnd(1), opnd(2), scr(0), opnd(4), scr(2)}, dims...)...),
	}
	if kvh != heads {
		p.Launches = append(p.Launches, elementwise("attention_dkv_sum_f32", c.n(1), res(1), res(2), scr(3), scr(4),
			i64(b), i64(s), i64(heads), i64(kvh), i64(hd)))
	}
	return nil
}

// CheckArgs checks a launch's arguments against its kernel's parameter
// list in Kernels.
func (l *Launch) CheckArgs() error {
	if l.Gemm != nil {
		if len(l.Args) != 3 || !l.Args[0].pointer() || !l.Args[1].pointer() || !l.Args[2].pointer() {
			return fmt.Errorf("a gemm launch takes 3 pointers, not %v", l.Args)
		}
		return l.Gemm.Check()
	}
	for _, k := range allKernels {
		if k.Name != l.Kernel {
			continue
		}
		if len(k.Params) != len(l.Args) {
			return fmt.Errorf("%s takes %d arguments, the launch passes %d", l.Kernel, len(k.Params), len(l.Args))
		}
		for i, a := range l.Args {
			if want := k.Params[i]; (want == Ptr) != a.pointer() || (want != Ptr && want != a.param()) {
				return fmt.Errorf("%s argument %d is %c, the launch passes kind %d", l.Kernel, i, want, a.Kind)
			}
		}
		return nil
	}
	return fmt.Errorf("no kernel %s in ops.cu or mma.cu", l.Kernel)
}

// allKernels are ops.cu's and mma.cu's kernels.
var allKernels = append(append([]Kernel(nil), Kernels...), MMAKernels...)

// Content is a scratch buffer's initial bytes: Init, or Fill repeated.
func (s ScratchBuf) Content() []byte {
	if s.Init != nil {
		return s.Init
	}
	b := make([]byte, s.Bytes)
	if s.Fill != 0 {
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], s.Fill)
		}
	}
	return b
}

func int64Bytes(x []int64) []byte {
	b := make([]byte, 8*max(len(x), 1))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(v))
	}
	return b
}

// float64Bytes is x as little-endian float64 values.
func float64Bytes(x []float64) []byte {
	b := make([]byte, 8*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	}
	return b
}
