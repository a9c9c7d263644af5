package ir

import (
	"math"
	"strings"
	"testing"
)

// TestScheduleLR pins each schedule's rate at warmup, mid-decay and the
// end, against the formulas written out here.
func TestScheduleLR(t *testing.T) {
	const lr, total = 1e-3, 110
	for _, c := range []struct {
		s    LRSchedule
		step int64
		want float64
	}{
		{LRSchedule{}, 1, lr},
		{LRSchedule{Warmup: 10}, 5, lr * 5 / 10},
		{LRSchedule{Warmup: 10}, 50, lr},
		{LRSchedule{Kind: CosineLR, Warmup: 10, MinLR: 1e-4}, 10, lr},
		{LRSchedule{Kind: CosineLR, Warmup: 10, MinLR: 1e-4}, 60, 1e-4 + (lr-1e-4)*0.5},
		{LRSchedule{Kind: CosineLR, Warmup: 10, MinLR: 1e-4}, 110, 1e-4},
		{LRSchedule{Kind: CosineLR, Warmup: 10, MinLR: 1e-4}, 500, 1e-4},
		{LRSchedule{Kind: CosineLR, Warmup: 10}, 35, lr * 0.5 * (1 + math.Cos(math.Pi/4))},
		{LRSchedule{Kind: LinearLR, Warmup: 10}, 85, lr * 0.25},
		{LRSchedule{Kind: WSDLR, Warmup: 10, Decay: 20}, 90, lr},
		{LRSchedule{Kind: WSDLR, Warmup: 10, Decay: 20, MinLR: 2e-4}, 100, lr + (2e-4-lr)*0.5},
		{LRSchedule{Kind: WSDLR, Warmup: 10, Decay: 20, MinLR: 2e-4}, 110, 2e-4},
	} {
		if got := c.s.LR(lr, c.step, total); math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%v step %d of %d: lr %.17g, want %.17g", c.s, c.step, total, got, c.want)
		}
	}
}

// TestTrainOnlyOps: the ops an evaluation step leaves out are the
// gradients' (named *_grad*, and sum_rows, a bias's gradient), the
// optimizer's (decaying a shard) and clipping's, and no other: a new
// backward op that is not marked fails here.
func TestTrainOnlyOps(t *testing.T) {
	for _, k := range OpKinds() {
		info := k.Info()
		want := strings.Contains(info.Name, "grad") || info.Decays || k == SumRows
		if info.TrainOnly != want {
			t.Errorf("%s: TrainOnly %v, want %v", info.Name, info.TrainOnly, want)
		}
	}
}
