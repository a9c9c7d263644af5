// Package planner chooses sharding factors: for a job (model, cluster,
// batch) it searches the AMSP space of (s_p, s_g, s_os), each s0 x s1, and
// costs every prior system (DDP, ZeRO-1/2/3, MiCS, HSDP, ZeRO++) in the
// same model, so the comparison is fair.
//
// In: an ir.Job and options. Out: a Result with the chosen plan, the
// baselines and the best candidates, each a cost.Estimate.
package planner

import (
	"fmt"

	"amspc/cost"
	"amspc/ir"
)

// meshFactors lists every factor of a data-parallel mesh dp that obeys
// the paper's rules on its own: s0 divides the GPUs of a node, s1 the
// nodes, and a factor spanning nodes fills the node (eq. 5-7). Ordered by
// size, then by s0.
func meshFactors(dp ir.Factor) []ir.Factor {
	var out []ir.Factor
	for s1 := 1; s1 <= dp.S1; s1++ {
		if dp.S1%s1 != 0 {
			continue
		}
		for s0 := 1; s0 <= dp.S0; s0++ {
			if dp.S0%s0 != 0 || (s1 > 1 && s0 != dp.S0) {
				continue
			}
			out = append(out, ir.Factor{S0: s0, S1: s1})
		}
	}
	return out
}

func divides(a, b ir.Factor) bool {
	return a.S0 <= b.S0 && a.S1 <= b.S1 && b.S0%a.S0 == 0 && b.S1%a.S1 == 0
}

// Space enumerates the paper's search space on mesh dp: every (s_p, s_g,
// s_os) with p nested in g nested in os (eq. 3-7) and s_g in {s_p, s_os},
// in a fixed order.
func Space(dp ir.Factor) []cost.Factors {
	fs := meshFactors(dp)
	var out []cost.Factors
	for _, p := range fs {
		for _, os := range fs {
			if !divides(p, os) {
				continue
			}
			out = append(out, cost.Factors{P: p, G: p, OS: os})
			if os != p {
				out = append(out, cost.Factors{P: p, G: os, OS: os})
			}
		}
	}
	return out
}

// Baseline is a prior system as a point of the space.
type Baseline struct {
	Name    string
	Factors cost.Factors
}

// TensorBaselines are the tensor-parallel systems the plan table
// compares with, on a mesh of dp (GPUs per node x nodes): Megatron-LM's
// tensor and sequence parallelism over a node's GPUs (up to 8) with its
// distributed optimizer (optimizer states sharded over the data-parallel
// ranks), and 2-D FSDP x TP (every component sharded over them), each
// with recompute rc and micro-batch mb; none where a node has fewer than
// 2 GPUs.
func TensorBaselines(dp ir.Factor, rc ir.Recompute, mb int64) []cost.Plan {
	t := 1
	for t*2 <= min(dp.S0, 8) && dp.S0%(t*2) == 0 {
		t *= 2
	}
	if t < 2 {
		return nil
	}
	one := ir.Factor{S0: 1, S1: 1}
	rest := dp.DataMesh(t)
	var out []cost.Plan
	for _, b := range []Baseline{
		{fmt.Sprintf("Megatron TP%d+SP", t), cost.Factors{P: one, G: one, OS: rest}},
		{fmt.Sprintf("FSDP+TP%d+SP", t), cost.Factors{P: rest, G: rest, OS: rest}},
	} {
		p := cost.Uniform(b.Name, b.Factors, rc, mb)
		p.Tensor, p.Sequence = t, true
		out = append(out, p)
	}
	return out
}

// Baselines lists DDP, ZeRO-1/2/3 (FSDP full shard), MiCS(k), HSDP(k) and
// ZeRO++ hpZ(k) on mesh dp, with k GPUs per group (k <= dp's GPUs; a
// k that does not fit the rules drops the baselines that need it).
func Baselines(dp ir.Factor, k int) []Baseline {
	one := ir.Factor{S0: 1, S1: 1}
	out := []Baseline{
		{"DDP", cost.Factors{P: one, G: one, OS: one}},
		{"ZeRO-1", cost.Factors{P: one, G: one, OS: dp}},
		{"ZeRO-2", cost.Factors{P: one, G: dp, OS: dp}},
		{"ZeRO-3/FSDP", cost.Factors{P: dp, G: dp, OS: dp}},
	}
	kf, err := ir.GPUsToFactor(k, dp.S0, dp.S1)
	if k <= 1 || kf == dp || err != nil || ir.ValidateFactors(dp, kf, kf, kf) != nil {
		return out
	}
	return append(out,
		Baseline{fmt.Sprintf("MiCS(%d)", k), cost.Factors{P: kf, G: kf, OS: kf}},
		Baseline{fmt.Sprintf("HSDP(%d)", k), cost.Factors{P: kf, G: kf, OS: kf}},
		Baseline{fmt.Sprintf("ZeRO++ hpZ(%d)", k), cost.Factors{P: dp, G: dp, OS: dp, Secondary: kf}},
	)
}
