// Package cost counts what a training job costs: parameters, FLOPs, bytes
// of model states. It reads the IR and nothing else, so any model the
// language can express is costed by the same rules (nothing here assumes
// LLaMA).
//
// In: an ir.Graph (and its Job). Out: numbers, with the formula that made
// each one, for reports and, later, the planner.
package cost

import (
	"amspc/ir"
)

// ParamGroup classifies where a parameter sits, for the report's split.
type ParamGroup uint8

const (
	GroupEmbedding ParamGroup = iota // table of an embed op
	GroupBlock                       // inside a repeated block
	GroupHead                        // a matmul weight outside the blocks
	GroupNorm                        // a 1-D weight outside the blocks
	GroupOther
)

// Classify assigns every param of g to a group.
func Classify(g *ir.Graph) map[*ir.Value]ParamGroup {
	uses := g.Uses()
	out := make(map[*ir.Value]ParamGroup)
	for _, p := range g.Params() {
		grp := GroupOther
		switch {
		case p.Layer >= 0:
			grp = GroupBlock
		case usedAs(uses[p], p, ir.Embed, 1):
			grp = GroupEmbedding
		case usedAs(uses[p], p, ir.MatMul, 1):
			grp = GroupHead
		case len(p.Shape) == 1:
			grp = GroupNorm
		}
		out[p] = grp
	}
	return out
}

func usedAs(ops []*ir.Op, v *ir.Value, kind ir.OpKind, arg int) bool {
	for _, op := range ops {
		if op.Kind == kind && arg < len(op.Args) && op.Args[arg] == v {
			return true
		}
	}
	return false
}

// ModelStats are the facts `amspc check` reports about a model.
type ModelStats struct {
	Params         int64
	ByGroup        [GroupOther + 1]int64
	ParamsPerLayer int64 // of the first block; 0 without blocks
	Layers         int
	// Tokens per micro-batch on one replica (batch x seq).
	Tokens int64
	// Forward FLOPs of one micro-batch, by kind.
	MatMulFlops, AttentionFlops, OtherFlops float64
	// MatMulWeights is N_mm: the elements of the params matmuls read as
	// weights, directly or transposed (a tied head), once per matmul
	// that reads them (a shared weight read twice does twice the work).
	MatMulWeights int64
}

// Stats counts a graph's parameters and FLOPs.
func Stats(g *ir.Graph) ModelStats {
	var s ModelStats
	s.Layers = g.Layers
	groups := Classify(g)
	for _, p := range g.Params() {
		n := p.Shape.NumElements()
		s.Params += n
		s.ByGroup[groups[p]] += n
		if p.Layer == 0 {
			s.ParamsPerLayer += n
		}
	}
	for _, op := range g.Ops() {
		f := op.Kind.Info().Flops(op)
		switch op.Kind {
		case ir.MatMul:
			s.MatMulFlops += f
			w := op.Args[1]
			for w.Def != nil && w.Def.Kind == ir.Transpose {
				w = w.Def.Args[0]
			}
			if w.Role == ir.Param {
				s.MatMulWeights += w.Shape.NumElements()
			}
		case ir.Attention:
			s.AttentionFlops += f
		default:
			s.OtherFlops += f
		}
	}
	b, _ := g.Dim("batch")
	sq, _ := g.Dim("seq")
	s.Tokens = b * sq
	return s
}

// TrainFlopsPerToken is the model FLOPs of training on one token: forward
// plus backward (twice the forward) of every matmul and attention, i.e.
// 6·N_mm + 12·L·d·s for a transformer (PaLM, appendix B). Recompute is not
// counted: these are model FLOPs, the numerator of MFU.
func (s ModelStats) TrainFlopsPerToken() float64 {
	if s.Tokens == 0 {
		return 0
	}
	return 3 * (s.MatMulFlops + s.AttentionFlops) / float64(s.Tokens)
}

// AttentionFlopsPerToken is the 12·L·d·s term alone.
func (s ModelStats) AttentionFlopsPerToken() float64 {
	if s.Tokens == 0 {
		return 0
	}
	return 3 * s.AttentionFlops / float64(s.Tokens)
}

// StateBytesPerParam is P + G + OS bytes of one param under a precision:
// 2 + 2 + 12 = 16 for bf16/fp16 mixed precision, 4 + 4 + 8 = 16 for fp32.
func StateBytesPerParam(p ir.Precision) int64 {
	return 2*p.DType().Size() + p.OptimBytesPerParam()
}
