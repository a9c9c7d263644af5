package ir

// The op table's facts for backends and the cost model: what a kernel
// of an op reads and writes, the matrix product it is, and how it may
// fuse with its neighbours. They are functions of argument shapes (a
// flat buffer is one dimension), so the planner costs a graph op and the
// simulator its instruction with the same numbers.

// GEMM is a matrix product as a kernel runs it: an M x K matrix times a
// K x N matrix, K the reduced dimension.
type GEMM struct{ M, K, N int64 }

// Fusion says how an op's kernel may fuse with the kernels around it
// (the fusion pass's classes; the GPU work fuses by them).
type Fusion uint8

const (
	// FuseNone: a kernel of its own (the optimizer step, a cast between
	// storage types, a transpose).
	FuseNone Fusion = iota
	// FuseElementwise: each result element from the same element of
	// each operand (a broadcast operand repeats): chains of them fuse
	// into one pass over memory.
	FuseElementwise
	// FuseRow: works row by row along the last dimension (norms, RoPE,
	// cross-entropy's softmax): fuses with elementwise producers and
	// consumers of whole rows.
	FuseRow
	// FuseGEMM: a matrix product; fuses an elementwise epilogue.
	FuseGEMM
	// FuseAttention: a flash-attention kernel, fused already.
	FuseAttention
	// FuseGather: reads or scatter-adds rows by id.
	FuseGather
)

var fusionNames = [...]string{"none", "elementwise", "row", "gemm", "attention", "gather"}

func (f Fusion) String() string {
	if int(f) < len(fusionNames) {
		return fusionNames[f]
	}
	return "fusion(?)"
}

// TrafficElems is the elements one kernel of the op reads and writes,
// given its argument shapes: Traffic where the row has one, else every
// argument once and one result as large as the largest argument
// (elementwise ops, norms, RoPE, attention's output, casts, the backward
// of elementwise ops).
func (info *OpInfo) TrafficElems(args [][]int64) int64 {
	if info.Traffic != nil {
		return info.Traffic(args)
	}
	in, largest := sumElems(args)
	return in + largest
}

func sumElems(args [][]int64) (total, largest int64) {
	for _, s := range args {
		n := elemsOf(s)
		total += n
		largest = max(largest, n)
	}
	return total, largest
}

func elemsOf(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// rowsOf is the product of all but the last dimension.
func rowsOf(s []int64) int64 {
	if len(s) == 0 {
		return 1
	}
	return elemsOf(s[:len(s)-1])
}

func lastOf(s []int64) int64 {
	if len(s) == 0 {
		return 1
	}
	return s[len(s)-1]
}

func argElems(args [][]int64, i int) int64 {
	if i < len(args) {
		return elemsOf(args[i])
	}
	return 0
}

// gemmTraffic reads both operands and writes the M x N product.
func gemmTraffic(kind OpKind) func(args [][]int64) int64 {
	return func(args [][]int64) int64 {
		in, _ := sumElems(args)
		g, _ := kind.Info().GEMMOf(args)
		return in + g.M*g.N
	}
}

// plusResults is the traffic of an op that reads its arguments and
// writes results as large as the arguments listed (the fused backward
// ops, the optimizer step).
func plusResults(like ...int) func(args [][]int64) int64 {
	return func(args [][]int64) int64 {
		in, _ := sumElems(args)
		for _, i := range like {
			in += argElems(args, i)
		}
		return in
	}
}

// GEMMOf is the op's matrix product on arguments of the given shapes;
// false for an op that is not one, or shapes it cannot read.
func (info *OpInfo) GEMMOf(args [][]int64) (GEMM, bool) {
	if info.GEMM == nil || len(args) < 2 || len(args[1]) == 0 {
		return GEMM{}, false
	}
	return info.GEMM(args[0], args[1]), true
}

// The three products, from their argument shapes: matmul(a [.., m, k],
// b [k, n]); matmul_grad_a(dy [.., m, n], w [k, n]) = dy·wᵀ, an m x n
// times n x k product; matmul_grad_b(a [.., m, k], dy [.., m, n]) = aᵀ·dy,
// k x m times m x n.
func gemmMatMul(a, b []int64) GEMM       { return GEMM{M: rowsOf(a), K: lastOf(a), N: lastOf(b)} }
func gemmMatMulGradA(dy, w []int64) GEMM { return GEMM{M: rowsOf(dy), K: lastOf(dy), N: w[0]} }
func gemmMatMulGradB(a, dy []int64) GEMM { return GEMM{M: lastOf(a), K: rowsOf(a), N: lastOf(dy)} }

// argsOnly reads the arguments and writes a scalar (cross-entropy's
// loss).
func argsOnly(args [][]int64) int64 {
	in, _ := sumElems(args)
	return in
}

// embedTraffic reads the ids and only the rows of the table they name,
// and writes those rows.
func embedTraffic(args [][]int64) int64 {
	if len(args) != 2 {
		in, largest := sumElems(args)
		return in + largest
	}
	out := argElems(args, 0) * lastOf(args[1])
	return argElems(args, 0) + 2*out
}

// embedGradTraffic scatter-adds dy into the rows the ids name.
func embedGradTraffic(args [][]int64) int64 { return argElems(args, 0) + 2*argElems(args, 1) }

// sumRowsTraffic reads the rows and writes one row.
func sumRowsTraffic(args [][]int64) int64 {
	in, largest := sumElems(args)
	if len(args) == 0 {
		return in + largest
	}
	return in + lastOf(args[0])
}

// LinearCEChunk is the rows of logits linear_cross_entropy's kernels
// form at once, for h [rows, d] and w [d, vocab]: as many as make the
// chunk no larger than h (Liger-Kernel's rule), in whole groups of 64
// rows (the loss's partial sums, so its mean has the unfused op's bits),
// but at least 512 (smaller chunks make the products small: at 2048 x
// 256 x 8192 on the CPU, chunks of 64 rows took 1.95x the unfused ops,
// of 256 1.37x, of 512 1.18x; 512 rows of a 128k vocabulary are 128 MB
// in bf16), and at most rows.
func LinearCEChunk(rows, d, vocab int64) int64 {
	c := rows * d / max(vocab, 1) / 64 * 64
	return min(max(c, 512), rows)
}

// linearCEWorkspace is linear_cross_entropy's chunk of logits: elements
// of h's dtype.
func linearCEWorkspace(args [][]int64) int64 {
	if len(args) < 2 || len(args[1]) != 2 {
		return 0
	}
	rows, d, vocab := rowsOf(args[0]), args[1][0], args[1][1]
	return LinearCEChunk(rows, d, vocab) * vocab
}
