package engine

import (
	"errors"
	"fmt"
	"slices"

	"amspc/ir"
	"amspc/kernels/gpu"
)

// Steps as graphs (issue 28, item 5). The engine enqueues a step's work
// instruction by instruction: per launch, a plan, scratch memory, check
// slots, and on a GPU a driver call, which costs the host more than many
// small kernels cost the GPU. A device backend on a GraphDevice instead
// captures the run's second step (the first has made every allocation
// and kept buffer the step needs) and replays it for each step after.
// What a replay changes is what changes between steps: the step's
// token windows (LoadInput) and the scratch whose content depends on the
// step number (gpu.ScratchBuf.PerStep: AdamW's bias corrections), each
// captured upload refilled from the same code that made it. Everything
// else is the same work on the same addresses, so a replayed step has the
// bits the eager step would have: TestGraphSteps checks it on every
// plan, and that a replay that left an input stale would differ.
//
// The memory a captured step used stays the graph's: the free lists at
// the end of the capture are set aside, and later allocations come from
// new memory. The checks a step makes (non-finite flags, ids, losses)
// are the captured step's, read after each replay from the same slots.

// stepGrapher is a backend that captures a step and replays it.
type stepGrapher interface {
	// graphs says whether the backend captures and replays steps.
	graphs() bool
	// beginCapture starts capturing the step the engine is about to
	// enqueue; endCapture ends it and launches the captured graph (the
	// step runs). abortCapture ends a capture that failed.
	beginCapture() error
	endCapture() error
	abortCapture()
	// replaying says whether a step was captured; replay launches it
	// again for step (the engine then Syncs as after any step).
	replaying() bool
	replay(step int) error
}

// A stepCapture counts the uploads of a step being captured, per
// stream, and holds those a replay refills.
type stepCapture struct {
	uploads map[int]int
	inputs  []stepInput
}

// A stepInput is the k-th upload captured on stream s, whose bytes for
// a step refill gives.
type stepInput struct {
	s, k   int
	tokens bool // a token window, else scratch
	refill func(step int) ([]byte, error)
}

// stepGraph is a captured step: its graph, the uploads each replay
// refills, the checks each replay makes (in the captured slots) and the
// memory its work uses.
type stepGraph struct {
	g      Graph
	inputs []stepInput
	checks []pendingCheck
	held   map[int]map[int64][]uint64
}

func (b *deviceBackend) graphs() bool {
	gd, ok := b.dev.(GraphDevice)
	return ok && !b.opts.Eager && gd.Captures()
}

func (b *deviceBackend) replaying() bool { return b.graph != nil }

// uploadOn is dev.UploadOn, counted while capturing: an upload with a
// refill (content that changes with the step) is one a replay makes
// again.
func (b *deviceBackend) uploadOn(s int, addr uint64, src []byte, tokens bool, refill func(step int) ([]byte, error)) error {
	if len(src) == 0 {
		return nil
	}
	if c := b.capturing.Load(); c != nil {
		b.mu.Lock()
		k := c.uploads[s]
		c.uploads[s]++
		if refill != nil {
			c.inputs = append(c.inputs, stepInput{s: s, k: k, tokens: tokens, refill: refill})
		}
		b.mu.Unlock()
	}
	return b.dev.UploadOn(s, addr, src)
}

// scratchRefill is the content of kept scratch buffer k of oc's plan at
// a step. oc belongs to a KernelCall the engine reuses, so what it needs
// is copied now.
func scratchRefill(oc *gpu.OpCall, k keptKey) func(step int) ([]byte, error) {
	c := *oc
	in := k.in
	c.Attr = func(name string) ir.AttrVal { return attr(in, name) }
	c.ArgShapes, c.OutShapes = slices.Clone(oc.ArgShapes), slices.Clone(oc.OutShapes)
	return func(step int) ([]byte, error) {
		at := c
		at.Step = step
		p, err := gpu.PlanOp(&at)
		if err != nil {
			return nil, err
		}
		if k.i >= len(p.Scratch) || !p.Scratch[k.i].Keep {
			return nil, fmt.Errorf("%v: no kept scratch %d at step %d", in.Kern, k.i, step)
		}
		return p.Scratch[k.i].Content(), nil
	}
}

func (b *deviceBackend) beginCapture() error {
	gd, ok := b.dev.(GraphDevice)
	if !ok {
		return fmt.Errorf("%s does not capture graphs", b.dev.Name())
	}
	if b.graph != nil {
		return errors.New("a step is captured already")
	}
	if err := b.Sync(); err != nil { // no check of an eager step in flight
		return err
	}
	b.capturing.Store(&stepCapture{uploads: map[int]int{}})
	if err := gd.BeginCapture(); err != nil {
		b.capturing.Store(nil)
		return err
	}
	return nil
}

func (b *deviceBackend) endCapture() error {
	c := b.capturing.Swap(nil)
	if c == nil {
		return errors.New("no capture to end")
	}
	g, err := b.dev.(GraphDevice).EndCapture()
	if err != nil {
		return fmt.Errorf("capturing the step as a graph: %w (amspc run --graphs=false runs every step eagerly)", err)
	}
	b.mu.Lock()
	held := b.free
	b.free = map[int]map[int64][]uint64{}
	b.mu.Unlock()
	b.checks.Lock()
	checks := slices.Clone(b.checks.pending)
	b.checks.Unlock()
	b.graph = &stepGraph{g: g, inputs: c.inputs, checks: checks, held: held}
	return g.Launch()
}

func (b *deviceBackend) abortCapture() {
	if b.capturing.Swap(nil) == nil {
		return
	}
	if g, err := b.dev.(GraphDevice).EndCapture(); err == nil {
		g.Close()
	}
	b.checks.Lock()
	b.checks.pending = b.checks.pending[:0] // their kernels never ran
	b.checks.Unlock()
}

func (b *deviceBackend) replay(step int) error {
	sg := b.graph
	if sg == nil {
		return errors.New("no step captured")
	}
	for _, in := range sg.inputs {
		if b.staleInputs != nil && b.staleInputs(in.tokens) {
			continue // a test's mutation
		}
		raw, err := in.refill(step)
		if err != nil {
			return err
		}
		if err := sg.g.SetUpload(in.s, in.k, raw); err != nil {
			return err
		}
	}
	b.checks.Lock()
	if len(b.checks.pending) > 0 {
		b.checks.Unlock()
		return errors.New("checks in flight before a replay")
	}
	b.checks.pending = append(b.checks.pending, sg.checks...)
	b.checks.Unlock()
	b.replays.Add(1)
	return sg.g.Launch()
}
