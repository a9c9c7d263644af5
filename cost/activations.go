package cost

import "amspc/ir"

// Block is the shape of one LLaMA-style transformer block as the
// activation formula needs it: the model width H, the width of the keys
// and of the values KV (kv_heads x head dim; H without grouped-query
// attention) and the feed-forward width F.
type Block struct {
	H, KV, F int64
}

// LayerActivations is the bytes one block keeps from forward to backward
// on one rank, for a micro-batch of b sequences of s tokens, each value
// elem bytes wide, under tensor parallelism over t ranks (sequence
// parallel sp) and recompute rc: Korthikanti et al. 2022's count (sec.
// 4), made for the block amspc compiles, in elements per token:
//
//   - the two norms' inputs (the residual stream, x and x + attention):
//     2H, split over t under sequence parallelism;
//   - the two norms' outputs, which the q/k/v and w1/w3 weight gradients
//     read: 2H, split over t under sequence parallelism too (backward
//     gathers them again, as Megatron-LM does);
//   - q, k, v and the attention output (its weight gradient's input and
//     the flash-style attention backward's): 2H + 2KV, split over t (the
//     heads);
//   - SwiGLU's two inputs and its output (w2's weight gradient's input):
//     3F, split over t (the columns).
//
// Selective recompute drops the attention output (H/t); full recompute
// keeps only the block's input x (H, or H/t under sequence parallelism).
// Korthikanti's GPT block keeps 34 + 5as/h bytes per token and width in
// 16-bit precision: 11 for attention with dropout masks, 19 for a GeLU
// MLP of 4h, 4 for the layer norms, and 5as/h for the s x s scores,
// softmax and dropout that a flash-style kernel never stores. This
// block in 16-bit precision keeps 2(8H + 3F) / t bytes per token without
// grouped-query attention: 32H/t for F = 8H/3.
func LayerActivations(blk Block, s, b int64, elem int64, t int, sp bool, rc ir.Recompute) int64 {
	tt := int64(max(t, 1))
	seq := int64(1) // how the residual stream and the norms' outputs are split
	if sp {
		seq = tt
	}
	var perToken int64
	switch rc {
	case ir.RecomputeFull:
		perToken = blk.H / seq
	default:
		perToken = 2*blk.H/seq + 2*blk.H/seq + (2*blk.H+2*blk.KV)/tt + 3*blk.F/tt
		if rc == ir.RecomputeSelective {
			perToken -= blk.H / tt
		}
	}
	return s * b * elem * perToken
}
