package cost

import "amspc/ir"

// The analytic step-time model (the `step` objective until the scheduler
// simulates real instruction streams). Per micro-batch and stage:
//
//   - forward: the stage's all-gathers (and, in the step's first
//     micro-batch, the spread of last step's updated parameters) are
//     prefetched while the previous stage computes; what the previous
//     stage's forward does not cover is exposed;
//   - backward: the stage's all-gather hides behind the backward of the
//     stage after it (computed first), its reduce-scatter and bucketed
//     all-reduce behind the backward of the stage before it.
//
// Every term depends on one stage's collectives and on compute times,
// which do not depend on sharding, so the model is a sum over layer groups:
// the MILP that picks factors per group optimises exactly this objective.

// Windows are the compute times that can hide one stage's communication.
type windows struct {
	fwdPrev, bwdNext, bwdPrev float64
}

// computeTimes returns forward and backward time per stage for one
// micro-batch, and the windows of each stage.
func (m *Model) computeTimes(rc ir.Recompute, scale float64) (fwd, bwd []float64, win []windows) {
	n := len(m.Stages)
	fwd, bwd, win = make([]float64, n), make([]float64, n), make([]windows, n)
	for i, st := range m.Stages {
		fwd[i] = st.FwdFlops * scale / m.flopRate
		bwd[i] = 2 * fwd[i]
		bwd[i] += st.Recomputed(rc) * scale / m.flopRate
	}
	for i := range m.Stages {
		if i > 0 {
			win[i].fwdPrev = fwd[i-1]
			win[i].bwdPrev = bwd[i-1]
		}
		if i+1 < n {
			win[i].bwdNext = bwd[i+1]
		}
	}
	return fwd, bwd, win
}

// exposed is one stage's exposed communication over a whole step.
func exposed(c stageComm, w windows, M float64) float64 {
	hide := func(comm, window float64) float64 { return max(0, comm-window) }
	first := hide(c.agFwd+c.bc, w.fwdPrev)
	rest := hide(c.agFwd, w.fwdPrev)
	fwd := first + (M-1)*rest
	bwdAG := M * hide(c.agBwd, w.bwdNext)
	bwdMid := (M - 1) * hide(c.rs+c.arG, w.bwdPrev)
	bwdLast := hide(c.rs+c.arDP, w.bwdPrev)
	return fwd + bwdAG + bwdMid + bwdLast
}

// timeline fills the estimate's times.
func (m *Model) timeline(e *Estimate, comms []stageComm, scale float64) {
	M := float64(e.M)
	fwd, bwd, win := m.computeTimes(e.Plan.Recompute, scale)
	for i, c := range comms {
		e.Compute += M * (fwd[i] + bwd[i])
		e.CommTime += M*(c.agFwd+c.agBwd+c.rs) + (M-1)*c.arG + c.arDP + c.bc
		e.Exposed += exposed(c, win[i], M)
	}
	e.Step = e.Compute + e.Exposed
	e.AnalyticStep = e.Step
}
