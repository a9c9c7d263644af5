// Package passes is the compiler's middle: the passes that turn a checked
// model (the forward graph of one micro-batch) into a training step, in
// the order listed below, each with one line on why it sits there.
//
// In: an ir.Job from the frontend. Out: a State holding the training
// graph, verified after every pass when Options.Check is set (and always
// at the end).
package passes

import (
	"fmt"
	"io"
	"strings"

	"amspc/ir"
)

// A Pass transforms the state; Why says why it sits where it does. A
// distribution pass (Dist) works on the step program and runs only when
// the options give a Distribution.
type Pass struct {
	Name string
	Why  string
	Run  func(*State) error
	Dist bool
}

// Pipeline is every pass, in order.
var Pipeline = []Pass{
	{"autodiff", "needs the whole forward graph; everything after works on forward + backward", autodiff, false},
	{"optimizer", "needs every param's gradient from autodiff; adds AdamW and the optimizer states", optimizer, false},
	{"recompute", "needs the backward graph, which it makes read copies; before partition, which places the copies in their blocks' backward", recompute, false},
	{"partition", "needs the backward graph and each backward value's origin; splits the step into stages by the rule the cost model uses on the forward graph", partition, false},
	{"lower", "needs the stages; micro-batching and sharding: flat per-stage P, G and OS buffers with shard views, the sequence of M micro-batches and the optimizer", lower, true},
	{"collectives", "needs the sharded buffers; inserts every component's communication in its naive form", collectives, true},
	{"reduce-scatter", "needs the naive all-reduces and their readers; an all-reduce read only through this rank's part becomes a reduce-scatter", reduceScatter, true},
	{"redundant-gathers", "needs the gathers and frees; drops gathers of what the rank still holds", redundantGathers, true},
	{"bucket", "needs the final gradient all-reduces; fuses consecutive ones on one group, before lowering so a bucket is lowered whole", bucket, true},
	{"hierarchical", "needs every collective's final size; splits those spanning nodes into intra- and inter-node phases where faster", hierarchical, true},
	{"schedule", "needs the final instructions; defers gradient use, places allocs and frees, splits into streams with events and the prefetch bound", schedule, true},
}

// passOrder lists the constraints on the pipeline's order, as the Go
// compiler's ssa/compile.go does: each pass named first must run before
// the second (TestPassOrder checks Pipeline against them).
var passOrder = [...][2]string{
	{"autodiff", "optimizer"},         // AdamW reads every param's gradient
	{"autodiff", "recompute"},         // recompute copies what backward reads
	{"recompute", "partition"},        // the copies are placed in their blocks' backward
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
	// Partition splits the step into stages (partition).
	Partition *ir.Partition
	// Recompute is what the recompute pass did: full recompute copies
	// each block's forward into its backward.
	Recompute ir.Recompute
	// Dist is the plan the distribution passes lower for (nil: they do
	// not run); Prog is the step program they build, scheduled at the
	// end, and Unscheduled its sequence before the schedule pass.
	Dist        *Distribution
	Prog        *ir.Program
	Unscheduled []ir.SeqOp
	dist        *dist
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
	// Check verifies the graph after every pass (-d=check).
	Check bool
	// DumpAfter prints the graph after the named pass, or after every
	// pass for "all" (-dump-after=PASS).
	DumpAfter string
	Dump      io.Writer
}

// UserError is a mistake in the input that a pass finds (a construct the
// compiler does not support yet, for instance).
type UserError struct {
	Pos ir.Pos
	Msg string
}

func (e *UserError) Error() string { return e.Pos.String() + ": " + e.Msg }

// Names lists the passes' names.
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
	if opts.DumpAfter != "" && opts.DumpAfter != "all" && !known(opts.DumpAfter) {
		return nil, fmt.Errorf("-dump-after=%s: no such pass (passes: %s, or all)", opts.DumpAfter, strings.Join(Names(), ", "))
	}
	if job.Train == nil {
		return nil, fmt.Errorf("compiling a training step needs a train section")
	}
	dp := opts.DP
	if dp == 0 && job.Cluster != nil {
		dp = job.Cluster.GPUs()
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
	if err := ir.Verify(s.Graph); err != nil {
		return nil, &ir.InternalError{Pass: "verify", Err: err}
	}
	if opts.Dist != nil {
		if err := s.Distribute(opts.Dist, opts); err != nil {
			return nil, err
		}
	}
	return s, nil
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
	if err := s.run(true, opts); err != nil {
		return err
	}
	if err := ir.VerifyProgram(s.Prog, true); err != nil {
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
		if err := runPass(p, s); err != nil {
			return err
		}
		if opts.DumpAfter == p.Name || opts.DumpAfter == "all" {
			if p.Dist {
				fmt.Fprintf(opts.Dump, "# after %s\n", p.Name)
				ir.PrintProgram(opts.Dump, s.Prog)
			} else {
				fmt.Fprintf(opts.Dump, "# after %s\n%s", p.Name, ir.Print(s.Graph))
			}
			if p.Name == "partition" {
				DumpPartition(opts.Dump, s.Partition)
			}
		}
		if opts.Check {
			err := ir.Verify(s.Graph)
			if err == nil && p.Dist {
				err = ir.VerifyProgram(s.Prog, p.Name != "lower")
			}
			if err != nil {
				return &ir.InternalError{Pass: p.Name, Err: err}
			}
		}
	}
	return nil
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

func known(name string) bool {
	for _, p := range Pipeline {
		if p.Name == name {
			return true
		}
	}
	return false
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
