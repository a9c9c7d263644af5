package main

import (
	"math"
	"testing"
)

// A time is taken against the reference's step at its moment: the line
// between the two steps around it, the nearest step outside them.
func TestSpeedRefStepAt(t *testing.T) {
	s := &speedRef{at: []float64{1, 2, 4}, secs: []float64{0.10, 0.20, 0.05}}
	for _, c := range []struct{ t, want float64 }{
		{0, 0.10}, {1, 0.10}, {1.5, 0.15}, {2, 0.20}, {3, 0.125}, {4, 0.05}, {9, 0.05},
	} {
		if got := s.stepAt(c.t); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("stepAt(%g) = %g, want %g", c.t, got, c.want)
		}
	}
	// Shown at the typical (median) step, 0.10: a time taken while the
	// reference stepped in 0.20 s counts half.
	if got := s.scale(2); math.Abs(got-0.5) > 1e-12 {
		t.Errorf("scale(2) = %g, want 0.5", got)
	}
	sum := s.summary()
	if sum.Steps != 3 || sum.Median != 0.10 || sum.P10 != 0.05 || sum.P90 != 0.20 {
		t.Errorf("summary %+v", sum)
	}
}

// Scaling the traced samples scales every time in them, so a profile
// built from them (kernels, instruction and wake-up costs, hand-offs)
// is at the scaled speed.
func TestInStepSamplesScale(t *testing.T) {
	in := newInStepSamples()
	in.kernels["k"] = []float64{1, 2}
	in.gap = [2]float64{3, 4}
	in.gapInstrs = [2]int{1, 2}
	in.wakes, in.waits = 5, 1
	in.colls = []inStepColl{{secs: 6}}
	in.scale(0.5)
	if in.kernels["k"][0] != 0.5 || in.kernels["k"][1] != 1 || in.gap != [2]float64{1.5, 2} || in.wakes != 2.5 || in.colls[0].secs != 3 {
		t.Errorf("scaled by 0.5: %+v", in)
	}
	if in.gapInstrs != [2]int{1, 2} || in.waits != 1 {
		t.Errorf("counts scaled: %+v", in)
	}
}
