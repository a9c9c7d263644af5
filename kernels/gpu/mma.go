package gpu

import (
	"fmt"
	"math"

	"amspc/ir"
)

// MMAReference is what mma.cu's mma_probe computes, in float64: a b + c
// for a 16x16 a and a 16x8 b of bf16 values (row-major, each its top 16
// bits) and a 16x8 c.
func MMAReference(a, b []uint16, c []float32) []float64 {
	bf := func(h uint16) float64 { return float64(math.Float32frombits(uint32(h) << 16)) }
	out := make([]float64, 128)
	for i := range 16 {
		for j := range 8 {
			s := float64(c[i*8+j])
			for k := range 16 {
				s += bf(a[i*16+k]) * bf(b[k*8+j])
			}
			out[i*8+j] = s
		}
	}
	return out
}

// MMAThreads is the block of mma.cu's attention kernels; each covers 64
// rows (queries, or for attention_mma_dkv keys) a block.
const MMAThreads = 128

// MMALaunch is a launch of one of mma.cu's attention kernels over seq
// rows (queries, or keys), heads and batch: 64 rows a block.
func MMALaunch(kernel string, seq, heads, batch int64, smem int, args ...Arg) Launch {
	return Launch{Kernel: kernel, Grid: [3]int{int((seq + 63) / 64), int(heads), int(batch)}, Block: MMAThreads, Smem: smem, Args: args}
}

// MMASmem are the dynamic shared memory bytes of mma.cu's attention
// kernels for head dim hd: attention_mma_fwd's, attention_mma_dq's and
// attention_mma_dkv's.
func MMASmem(hd int) (fwd, dq, dkv int) {
	const pad = 8 // AMSP_MMA_PAD: halves a tile row is longer than its data
	tile := 64
	if hd > 64 {
		tile = 32
	}
	rows := func(n int) int { return n * (hd + pad) } // n rows of hd, two bytes each
	cols := func(n int) int { return hd * (n + pad) } // hd rows of n, transposed
	return 2 * (rows(64) + cols(64)), 2 * (2*rows(tile) + cols(tile)), 2*(2*rows(tile)+2*cols(tile)) + 8*tile
}

// planAttentionMMA is attention's plan (forward, or backward with the
// forward again for its log-sum-exp) on tensor cores: bf16 q, k, v, out
// and dout as they are (RawBF16), fp32 results.
func planAttentionMMA(c *OpCall) (*Plan, error) {
	for _, dt := range c.OutTypes {
		if dt != ir.F32 {
			return nil, &ErrUnsupported{fmt.Sprintf("%v with a %v result on tensor cores", c.Op, dt)}
		}
	}
	q := c.ArgShapes[0]
	heads := c.Attr("heads").Int
	kvh := c.Attr("kv_heads").Int
	if kvh == 0 {
		kvh = heads
	}
	b, s, hd := q[0], q[1], q[2]/heads
	causal := boolArg(c.Attr("causal").Bool)
	dims := []Arg{i64(b), i64(s), i64(heads), i64(kvh), i64(hd), causal}
	fwdSmem, dqSmem, dkvSmem := MMASmem(int(hd))
	launch := func(kernel string, smem int, args ...Arg) Launch {
		return MMALaunch(kernel, s, heads, b, smem, append(args, dims...)...)
	}
	rows := b * heads * s
	p := &Plan{}
	if c.Op == ir.Attention {
		p.Scratch = []ScratchBuf{f32Scratch(rows)}
		p.Launches = []Launch{launch("attention_mma_fwd", fwdSmem, res(0), scr(0), opnd(0), opnd(1), opnd(2))}
		return p, nil
	}
	// As attention_f32's plan: the forward again for lse (its out into
	// scratch), D = rowsum(out * dout) of the given out, dq, and dk, dv
	// a block per query head (grouped heads' parts added in order).
	p.Scratch = []ScratchBuf{f32Scratch(rows), f32Scratch(c.ArgElems[3]), f32Scratch(rows)}
	dk, dv := res(1), res(2)
	if kvh != heads {
		p.Scratch = append(p.Scratch, f32Scratch(c.ArgElems[3]), f32Scratch(c.ArgElems[3]))
		dk, dv = scr(3), scr(4)
	}
	p.Launches = []Launch{
		launch("attention_mma_fwd", fwdSmem, scr(1), scr(0), opnd(0), opnd(1), opnd(2)),
		elementwise("attention_dsum_bf16", rows, scr(2), opnd(3), opnd(4), i64(b), i64(s), i64(heads), i64(hd)),
		launch("attention_mma_dq", dqSmem, res(0), opnd(0), opnd(1), opnd(2), scr(0), opnd(4), scr(2)),
		launch("attention_mma_dkv", dkvSmem, dk, dv, opnd(0), opnd(1), opnd(2), scr(0), opnd(4), scr(2)),
	}
	if kvh != heads {
		p.Launches = append(p.Launches, elementwise("attention_dkv_sum_f32", c.OutElems[1], res(1), res(2), scr(3), scr(4),
			i64(b), i64(s), i64(heads), i64(kvh), i64(hd)))
	}
	return p, nil
}

// AttentionDsum is attention's D = rowsum(out * dout) per query head
// ([batch, heads, seq], in float64 rounded once), as attention_dsum_f32
// and attention_dsum_bf16 compute it; out and dout are [batch, seq,
// heads*hd].
func AttentionDsum(out, dout []float32, batch, seq, heads, hd int) []float32 {
	d := make([]float32, batch*heads*seq)
	for b := range batch {
		for i := range seq {
			for h := range heads {
				s := 0.0
				for e := range hd {
					at := (b*seq+i)*heads*hd + h*hd + e
					s += float64(out[at]) * float64(dout[at])
				}
				d[(b*heads+h)*seq+i] = float32(s)
			}
		}
	}
	return d
}

// SumGroupParts adds the per-query-head parts of dk or dv ([batch, seq,
// heads*hd], as attention_dkv_f32 and attention_mma_dkv write them) over
// each KV head's group, in head order: [batch, seq, kvHeads*hd].
func SumGroupParts(parts []float32, batch, seq, heads, kvHeads, hd int) []float32 {
	out := make([]float32, batch*seq*kvHeads*hd)
	group := heads / kvHeads
	for row := range batch * seq {
		for g := range kvHeads {
			for x := range group {
				for e := range hd {
					out[row*kvHeads*hd+g*hd+e] += parts[row*heads*hd+(g*group+x)*hd+e]
				}
			}
		}
	}
	return out
}
