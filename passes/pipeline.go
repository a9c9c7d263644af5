// Package passes is the compiler's pipeline: the passes that turn a
// checked model (the forward graph of one micro-batch) into a training
// step, then, for a plan, into the step program every rank runs,
// scheduled, simulated, fitted to the GPU's memory and matched, in the
// order listed below, each with one line on why it sits there.
//
// In: an ir.Job from the frontend and, for the distribution passes, a
// Distribution (the plan) and the cost model's machine. Out: a State
// holding the training graph and, for a plan, the program, its simulated
// timeline and the bundle's template, verified after every pass when
// Options.Check is set (and always at the end).
package passes

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"amspc/codegen"
	"amspc/cost"
	"amspc/ir"
	"amspc/simulator"
)

// A Pass transforms the state; Why says why it sits where it does. A
// distribution pass (Dist) works on the step program and runs only when
// the options give a Distribution. An Optional pass only makes the
// program faster: the program is correct without it, so -d=NAME/off may
// switch it off. Dump prints what the pass produced (-dump-after=NAME);
// nil prints the graph, or a distribution pass's program.
type Pass struct {
	Name     string
	Why      string
	Run      func(*State) error
	Dist     bool
	Optional bool
	Dump     func(io.Writer, *State)
}

// Pipeline is every pass, in order: name, why, run, dist, optional, dump.
var Pipeline = []Pass{
	{"fuse", "needs only the forward graph; before autodiff, so each fused op's backward rule fuses the backward too", fuse, false, true, dumpFusions},
	{"autodiff", "needs the whole forward graph; everything after works on forward + backward", autodiff, false, false, nil},
	{"optimizer", "needs every param's gradient from autodiff; adds AdamW and the optimizer states", optimizer, false, false, nil},
	{"recompute", "needs the backward graph, which it makes read copies; before partition, which places the copies in their blocks' backward", recompute, false, false, nil},
	{"tensor", "needs the whole step (forward, backward, optimizer, recompute's copies), whose every op it gives specs and its collectives by the op table's rules; before partition, which places the collectives in their blocks", tensor, false, false, dumpTensor},
	{"partition", "needs the backward graph and each backward value's origin; splits the step into stages by the rule the cost model uses on the forward graph", partition, false, false, dumpPartition},
	{"lower", "needs the stages; micro-batching and sharding: flat per-stage P, G and OS buffers with shard views, the sequence of M micro-batches and the optimizer", lower, true, false, nil},
	{"collectives", "needs the sharded buffers; inserts every component's communication in its naive form", collectives, true, false, nil},
	{"reduce-scatter", "needs the naive all-reduces and their readers; an all-reduce read only through this rank's part becomes a reduce-scatter", reduceScatter, true, true, nil},
	{"redundant-gathers", "needs the gathers and frees; drops gathers of what the rank still holds", redundantGathers, true, true, nil},
	{"bucket", "needs the final gradient all-reduces; fuses consecutive ones on one group, before lowering so a bucket is lowered whole", bucket, true, true, nil},
	{"hierarchical", "needs every collective's final size; splits those spanning nodes into intra- and inter-node phases where faster", hierarchical, true, true, nil},
	{"schedule", "needs the final instructions; defers gradient use, places allocs and frees, splits into streams with events and the prefetch bound", schedule, true, false, nil},
	{"simulate", "needs the streams and events; replays them on the cost model's machine for the step time and the peak memory", simulate, true, false, dumpTimeline},
	{"fit", "needs the simulated peak; while it does not fit the GPU, schedules again with one stage less prefetched and simulates again", fit, true, false, dumpFit},
	{"match", "needs the final program; proves that every rank of a group issues the same collectives in the same order, and makes the bundle's template", match, true, false, dumpMatch},
}

// passOrder lists the constraints on the pipeline's order, as the Go
// compiler's ssa/compile.go does: each pass named first must run before
// the second (TestPassOrder checks Pipeline against them).
var passOrder = [...][2]string{
	{"fuse", "autodiff"},              // a fused op's backward rule makes a fused backward
	{"autodiff", "optimizer"},         // AdamW reads every param's gradient
	{"autodiff", "recompute"},         // recompute copies what backward reads
	{"recompute", "partition"},        // the copies are placed in their blocks' backward
	{"recompute", "tensor"},           // the copies are sharded too
	{"optimizer", "tensor"},           // the states are held as their weights
	{"tensor", "partition"},           // its collectives are placed in their blocks
	{"partition", "lower"},            // flat buffers are per stage
	{"optimizer", "lower"},            // lower reads the adamw ops' attributes
	{"lower", "collectives"},          // collectives fill the sharded buffers
	{"collectives", "reduce-scatter"}, // rewrites the naive all-reduces
	{"collectives", "redundant-gathers"},
	{"reduce-scatter", "bucket"},       // only the all-reduces left are bucketed
	{"bucket", "hierarchical"},         // a bucket is lowered whole
	{"reduce-scatter", "hierarchical"}, // final collective sizes
	{"hierarchical", "schedule"},       // the final instructions
	{"bucket", "schedule"},
	{"redundant-gathers", "schedule"},
	{"schedule", "simulate"}, // the simulator replays streams and events
	{"simulate", "fit"},      // fitting reads the simulated peak
	{"fit", "match"},         // the program fitting chose is the one matched
}

// State is what passes share.
type State struct {
	Job   *ir.Job
	Graph *ir.Graph
	// LossScale weighs one micro-batch's loss in the step: 1/(M x s_dp).
	LossScale float64
	// Grads lists each param's gradient, in param order (autodiff).
	Grads []GradOf
	// States lists each param's optimizer states (optimizer).
	States []ParamStates
	// Origin maps each value a pass made to the forward value or param
	// it was made for.
	Origin map[*ir.Value]*ir.Value
	// Specs holds how the tensor-parallel group holds each value
	// (tensor); nil without tensor parallelism.
	Specs map[*ir.Value]ir.Spec
	// Partition splits the step into stages (partition).
	Partition *ir.Partition
	// Fused says the fuse pass ran: the lower pass then fuses what it
	// lowers too (ir.LoweredFusions).
	Fused bool
	// Recompute is what the recompute pass did: full recompute copies
	// each block's forward into its backward.
	Recompute ir.Recompute
	// Dist is the plan the distribution passes lower for (nil: they do
	// not run); Prog is the step program they build, scheduled at the
	// end, and Unscheduled its sequence before the schedule pass.
	Dist        *Distribution
	Prog        *ir.Program
	Unscheduled []ir.SeqOp
	// Timeline is Prog's simulated step on rank 0 (simulate, fit); nil
	// without Options.Machine.
	Timeline *simulator.Timeline
	// Bundle holds Prog as the template every rank runs, matched
	// (match); the caller fills in what the plan and the job say.
	Bundle *codegen.Bundle
	dist   *dist
	// machine and fits are Options.Machine and Options.Fits.
	machine *cost.Machine
	fits    func(*simulator.Timeline) bool
}

// Options steer a run of the pipeline.
type Options struct {
	// DP is the data-parallel size the loss is averaged over.
	DP int
	// Recompute is the plan's activation recompute (the recompute
	// pass).
	Recompute ir.Recompute
	// Dist, when set, runs the distribution passes for this plan.
	Dist *Distribution
	// Check verifies the graph and the program after every pass
	// (-d=check).
	Check bool
	// Unverified skips the verifiers that otherwise check the graph
	// after the graph passes and the program after the distribution
	// passes: the planner's candidates, of which only the chosen plan
	// is compiled, verified, and run.
	Unverified bool
	// Off names optional passes not to run (-d=NAME/off).
	Off []string
	// Machine times the program's instructions for the simulate pass
	// (the cost model's machine); nil: the program is not simulated, and
	// the fit pass keeps its depth.
	Machine *cost.Machine
	// Fits says whether a simulated step's peak memory fits the GPU (the
	// cost model's rule); nil fixes the prefetch depth at
	// Distribution.Depth, which the fit pass otherwise lowers until the
	// peak fits.
	Fits func(*simulator.Timeline) bool
	// DumpAfter prints what the named pass produced, or every pass's
	// for "all" (-dump-after=PASS).
	DumpAfter string
	Dump      io.Writer
}

// SetDebug reads -d's value: comma-separated flags, "check" (verify
// after every pass) or "NAME/off" (switch the optional pass NAME off).
func (o *Options) SetDebug(flags string) error {
	if flags == "" {
		return nil
	}
	for _, f := range strings.Split(flags, ",") {
		switch name, off := strings.CutSuffix(f, "/off"); {
		case f == "check":
			o.Check = true
		case off:
			if err := canSwitchOff(name); err != nil {
				return err
			}
			if !slices.Contains(o.Off, name) {
				o.Off = append(o.Off, name)
			}
		default:
			return fmt.Errorf("unknown debug flag -d=%s (known: check, and PASS/off for an optional pass: %s)", f, strings.Join(Optional(), ", "))
		}
	}
	return nil
}

// canSwitchOff says why -d=name/off is refused, nil when it is not.
func canSwitchOff(name string) error {
	switch p := lookup(name); {
	case p == nil:
		return fmt.Errorf("-d=%s/off: no such pass (passes: %s)", name, strings.Join(Names(), ", "))
	case !p.Optional:
		return fmt.Errorf("-d=%s/off: %s cannot be switched off; the optional passes are %s", name, name, strings.Join(Optional(), ", "))
	}
	return nil
}

// Optional lists the passes -d=NAME/off may switch off, in order.
func Optional() []string {
	var out []string
	for _, p := range Pipeline {
		if p.Optional {
			out = append(out, p.Name)
		}
	}
	return out
}

// UserError is a mistake in the input that a pass finds (a construct the
// compiler does not support yet, for instance).
type UserError struct {
	Pos ir.Pos
	Msg string
}

func (e *UserError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Names lists the passes' names, in order: what -dump-after and -d take.
func Names() []string {
	var out []string
	for _, p := range Pipeline {
		out = append(out, p.Name)
	}
	return out
}

// Run runs the pipeline on a job's forward graph (which it extends in
// place).
func Run(job *ir.Job, opts Options) (s *State, err error) {
	if opts.DumpAfter != "" && opts.DumpAfter != "all" && lookup(opts.DumpAfter) == nil {
		return nil, fmt.Errorf("-dump-after=%s: no such pass (passes: %s, or all)", opts.DumpAfter, strings.Join(Names(), ", "))
	}
	for _, name := range opts.Off {
		if err := canSwitchOff(name); err != nil {
			return nil, err
		}
	}
	if job.Train == nil {
		return nil, fmt.Errorf("compiling a training step needs a train section")
	}
	dp := opts.DP
	if dp == 0 && job.Cluster != nil {
		dp = job.DataParallel()
	}
	if dp == 0 {
		dp = 1
	}
	M, merr := job.Train.MicroBatches(dp)
	if merr != nil {
		return nil, merr
	}
	s = &State{Job: job, Graph: job.Graph, LossScale: 1 / float64(M*int64(dp)), Origin: map[*ir.Value]*ir.Value{}, Recompute: opts.Recompute}
	if err := s.run(false, opts); err != nil {
		return nil, err
	}
	if !opts.Unverified {
		if err := ir.Verify(s.Graph); err != nil {
			return nil, &ir.InternalError{Pass: "verify", Err: err}
		}
	}
	if opts.Dist != nil {
		if err := s.Distribute(opts.Dist, opts); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Fork is a state for another distribution of s's graph: the graph
// passes' results shared (the distribution passes only read them), the
// distribution's own fields empty. Distributions of one graph may run
// at once, each on its fork.
func (s *State) Fork() *State {
	return &State{Job: s.Job, Graph: s.Graph, LossScale: s.LossScale, Grads: s.Grads, States: s.States, Origin: s.Origin,
		Specs: s.Specs, Partition: s.Partition, Fused: s.Fused, Recompute: s.Recompute}
}

// Distribute runs the distribution passes on a state the graph passes
// made (Run without Options.Dist), for plan d: the step program is then
// in s.Prog.
func (s *State) Distribute(d *Distribution, opts Options) error {
	if s.Partition == nil {
		return fmt.Errorf("distributing needs the graph passes first")
	}
	dc := *d
	s.Dist = &dc
	s.machine, s.fits = opts.Machine, opts.Fits
	if err := s.run(true, opts); err != nil {
		return err
	}
	if opts.Unverified {
		return nil
	}
	if err := ir.VerifyProgram(s.Prog, s.Dist.Topo, ir.Consistent|ir.Runnable|ir.Written); err != nil {
		return &ir.InternalError{Pass: "verify", Err: err}
	}
	return nil
}

// run runs the graph passes or the distribution passes, dumping and
// checking after each as the options say.
func (s *State) run(dist bool, opts Options) error {
	for _, p := range Pipeline {
		if p.Dist != dist {
			continue
		}
		off := slices.Contains(opts.Off, p.Name)
		if !off {
			if err := runPass(p, s); err != nil {
				return err
			}
		}
		if opts.DumpAfter == p.Name || opts.DumpAfter == "all" {
			s.dump(opts.Dump, p, off)
		}
		if opts.Check && !off {
			if err := s.check(p); err != nil {
				return &ir.InternalError{Pass: p.Name, Err: err}
			}
		}
	}
	return nil
}

// dump prints what pass p produced.
func (s *State) dump(w io.Writer, p Pass, off bool) {
	if off {
		fmt.Fprintf(w, "# after %s (off)\n", p.Name)
	} else {
		fmt.Fprintf(w, "# after %s\n", p.Name)
	}
	switch {
	case p.Dump != nil:
		p.Dump(w, s)
	case p.Dist:
		ir.PrintProgram(w, s.Prog)
	default:
		io.WriteString(w, ir.Print(s.Graph))
	}
}

// check verifies the graph, and the program after a distribution pass:
// its form and sizes, and its events once scheduled; every transient
// buffer is written before it is read from the collectives pass on (the
// collectives fill what lower reads).
func (s *State) check(p Pass) error {
	if err := ir.Verify(s.Graph); err != nil || !p.Dist {
		return err
	}
	checks := ir.Consistent | ir.Runnable
	if p.Name != "lower" {
		checks |= ir.Written
	}
	return ir.VerifyProgram(s.Prog, s.Dist.Topo, checks)
}

// runPass runs one pass, turning a panic into an internal error that
// names the pass (a crash inside a pass is a compiler bug).
func runPass(p Pass, s *State) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &ir.InternalError{Pass: p.Name, Err: fmt.Errorf("%v", r)}
		}
	}()
	if err := p.Run(s); err != nil {
		if _, user := err.(*UserError); user {
			return err
		}
		return &ir.InternalError{Pass: p.Name, Err: err}
	}
	return nil
}

func lookup(name string) *Pass {
	for i := range Pipeline {
		if Pipeline[i].Name == name {
			return &Pipeline[i]
		}
	}
	return nil
}

// dumpPartition prints the graph and then its stages.
func dumpPartition(w io.Writer, s *State) {
	io.WriteString(w, ir.Print(s.Graph))
	DumpPartition(w, s.Partition)
}

// DumpPartition prints the stages as comment lines (after the graph in
// -dump-after=partition).
func DumpPartition(w io.Writer, p *ir.Partition) {
	fmt.Fprintf(w, "# stages\n")
	for i, st := range p.Stages {
		var params []string
		for _, v := range st.Params {
			params = append(params, v.Name)
		}
		fmt.Fprintf(w, "#   %d %s (%s): %d forward, %d backward values; params [%s]", i, st.Name, st.Group, len(st.Fwd), len(st.Bwd), strings.Join(params, " "))
		if st.LastUser != i {
			fmt.Fprintf(w, "; shared with stages up to %d", st.LastUser)
		}
		fmt.Fprintln(w)
	}
}
