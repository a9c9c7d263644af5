package engine

import (
	"errors"
	"fmt"

	"amspc/ir"
)

// Evaluation: the loss of held-out data under the plan being trained,
// without changing it. An evaluation step runs a training step's
// program with the instructions that make or use gradients left out:
// every backward and optimizer kernel (and clipping's), and, following
// the data, every kernel and collective that reads a buffer one of them
// wrote (accumulations, reductions, casts of gradients), except through
// the persistent state (params, master copy, moments), which nothing in
// the step then writes (a mixed-precision cast of the unchanged master
// and a spread of the unchanged shard write the values already there).
// What is left is each micro-batch's forward with its gathers and
// tensor-parallel collectives, and the loss: the same kernels on the
// same values as the training step's forward, so a plan evaluates as
// one rank does.

// evalSkips marks the instructions an evaluation step leaves out.
func evalSkips(p *ir.Program) [ir.NumStreams][]bool {
	var skip [ir.NumStreams][]bool
	for s := range skip {
		skip[s] = make([]bool, len(p.Streams[s]))
	}
	persistent := p.Persistent()
	grads := map[int32]bool{} // transient roots a left-out instruction writes
	reads := func(in *ir.Instr) bool {
		for _, id := range in.Reads() {
			if grads[p.Root(id)] {
				return true
			}
		}
		return false
	}
	for changed := true; changed; {
		changed = false
		for s := range p.Streams {
			for i := range p.Streams[s] {
				in := &p.Streams[s][i]
				if skip[s][i] || in.Op != ir.Kernel && in.Op != ir.Collective {
					continue
				}
				if !(in.Op == ir.Kernel && in.Kern.Info().TrainOnly) && !reads(in) {
					continue
				}
				skip[s][i], changed = true, true
				for _, id := range in.Writes() {
					if rt := p.Root(id); !persistent[rt] {
						grads[rt] = true
					}
				}
			}
		}
	}
	return skip
}

// Eval returns the loss of batches global batches of data (windows as
// training cuts them, batch b taking windows b*Global ... as step b+1
// would) under the plan, without training: the params, the optimizer's
// state and the step count are left as they were. CPU ranks only.
func (r *Run) Eval(data *Data, batches int) (float64, error) {
	if batches < 1 {
		return 0, fmt.Errorf("evaluation of %d batches", batches)
	}
	if data.Windows() < 1 {
		return 0, fmt.Errorf("the evaluation data has %d tokens, fewer than one window of %d", len(data.Tokens), data.SeqLen+1)
	}
	for _, k := range r.ranks {
		if !k.host || k.standIn != nil {
			return 0, errors.New("evaluation runs on CPU ranks only so far (--device cpu)")
		}
	}
	var sum float64
	for b := range batches {
		loss, err := r.evalBatch(data, b)
		if err != nil {
			return 0, err
		}
		sum += loss
	}
	return sum / float64(batches), nil
}

func (r *Run) evalBatch(data *Data, b int) (float64, error) {
	for _, k := range r.ranks {
		if k.evalSkip == nil {
			sk := evalSkips(k.p)
			k.evalSkip = &sk
		}
		k.losses = k.losses[:0]
	}
	err := r.onRanks(func(k *rank) error {
		train, step := k.data, k.step
		k.data, k.step, k.evaluating = data, b+1, true
		defer func() { k.data, k.step, k.evaluating = train, step, false }()
		if err := k.enqueueStep(r.World.Done()); err != nil {
			return err
		}
		if err := k.be.Sync(); err != nil {
			err = k.fail(ir.Compute, nil, err)
			k.abort(err)
			return err
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return r.meanLoss()
}
