package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"amspc/cost"
	"amspc/ir"
	"amspc/planner"
)

// A sweep plans one job again at several cluster sizes (`amspc plan
// --sweep nodes=1,2,4`): only the node count changes; GPUs per node,
// the GPU and the links stay the file's.
type sweep struct {
	kind   string // "nodes" or "gpus", as the user wrote it
	nodes  []int
	perGPU bool // the global batch grows with the cluster
}

// Sweep batch modes (--sweep-batch).
const (
	sweepPerGPU = "per-gpu"
	sweepFixed  = "fixed"
)

// parseSweep reads "nodes=1,2,4" or "gpus=8,16,32" against the job's
// cluster, refusing sizes the cluster cannot form.
func parseSweep(spec, batch string, c *ir.Cluster) (*sweep, error) {
	kind, list, ok := strings.Cut(spec, "=")
	if !ok || (kind != "nodes" && kind != "gpus") || list == "" {
		return nil, fmt.Errorf("--sweep %s: want nodes=N,N or gpus=N,N (a list of sizes)", spec)
	}
	s := &sweep{kind: kind}
	switch batch {
	case sweepPerGPU:
		s.perGPU = true
	case sweepFixed:
	default:
		return nil, fmt.Errorf("--sweep-batch must be %s or %s, not %q", sweepPerGPU, sweepFixed, batch)
	}
	seen := map[int]bool{}
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		switch {
		case err != nil:
			return nil, fmt.Errorf("--sweep %s: %q is not a whole number", spec, f)
		case n < 1:
			return nil, fmt.Errorf("--sweep %s: %d %s is not a cluster", spec, n, kind)
		case kind == "gpus" && n%c.GPUsPerNode != 0:
			return nil, fmt.Errorf("--sweep %s: %d GPUs is not a whole number of %d-GPU nodes", spec, n, c.GPUsPerNode)
		}
		if kind == "gpus" {
			n /= c.GPUsPerNode
		}
		if n > maxSweepNodes {
			return nil, fmt.Errorf("--sweep %s: %d nodes is more than the limit of %d", spec, n, maxSweepNodes)
		}
		if seen[n] {
			return nil, fmt.Errorf("--sweep %s: %d %s is listed twice", spec, n, kind)
		}
		seen[n] = true
		s.nodes = append(s.nodes, n)
	}
	return s, nil
}

// maxSweepNodes is the cluster section's own limit on nodes.
const maxSweepNodes = 1 << 20

// A sweepPoint is one cluster size and what planning found there.
type sweepPoint struct {
	job *ir.Job
	err string // the size cannot train this batch; nothing was planned
	res *planner.Result
}

// resize is the job on a cluster of n nodes. Under perGPU the global
// batch keeps the file's sequences per GPU (the file's batch divides its
// GPUs, so the new one does too); otherwise it stays as written, which a
// size may not split. A fixed shard section is dropped: its factors are
// the file's cluster's, and the sweep compares the planner's choice with
// the baselines.
func resize(job *ir.Job, n int, perGPU bool) (*ir.Job, error) {
	cl := *job.Cluster
	cl.Nodes = n
	tr := *job.Train
	if perGPU {
		tr.GlobalBatch = job.Train.GlobalBatch / int64(job.Cluster.GPUs()) * int64(cl.GPUs())
	}
	if _, err := tr.MicroBatches(cl.GPUs()); err != nil {
		return nil, err
	}
	cp := *job
	cp.Cluster, cp.Train, cp.Shard = &cl, &tr, &ir.ShardSpec{Mode: ir.ShardAuto}
	// A plan at another micro-batch size lowers the sources again, which
	// brings back the file's cluster and batch: put the sweep's back.
	if rebatch := job.Rebatch; rebatch != nil {
		cp.Rebatch = func(mb int64) (*ir.Job, error) {
			j, err := rebatch(mb)
			if err != nil {
				return nil, err
			}
			t := *j.Train
			t.GlobalBatch = tr.GlobalBatch
			j.Cluster, j.Train, j.Shard = &cl, &t, cp.Shard
			return j, nil
		}
	}
	return &cp, nil
}

// runSweep plans the job at every size of the sweep, in order, and
// prints one report.
func runSweep(stdout, stderr io.Writer, file string, job *ir.Job, s *sweep, opts planner.Options, asJSON bool) int {
	points, err := planSweep(job, s, opts)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", file, err)
		return exitUser
	}
	if asJSON {
		b, _ := json.MarshalIndent(sweepJSON(s, opts.Objective, points), "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
		return exitOK
	}
	printSweep(stdout, file, job, s, opts.Objective, points)
	return exitOK
}

// planSweep plans the job at every size of the sweep, in order. A size
// that cannot train the batch is a point with its reason, not an error.
func planSweep(job *ir.Job, s *sweep, opts planner.Options) ([]sweepPoint, error) {
	var points []sweepPoint
	for _, n := range s.nodes {
		j, err := resize(job, n, s.perGPU)
		if err != nil {
			cl := *job.Cluster
			cl.Nodes = n
			cp := *job
			cp.Cluster = &cl
			points = append(points, sweepPoint{job: &cp, err: err.Error()})
			continue
		}
		res, err := planner.Plan(j, opts)
		if err != nil {
			return nil, fmt.Errorf("%d nodes: %v", n, err)
		}
		nameBaselines(res)
		points = append(points, sweepPoint{job: j, res: res})
	}
	return points, nil
}

// baselineNames are the baselines' names in the planner's order: those
// of the size with the most (one node has no MiCS), then any others.
func baselineNames(points []sweepPoint) []string {
	var out []string
	for _, p := range points {
		if p.res != nil && len(p.res.Baselines) > len(out) {
			out = out[:0]
			for _, e := range p.res.Baselines {
				out = append(out, e.Plan.Name)
			}
		}
	}
	for _, p := range points {
		for _, e := range p.baselines(nil) {
			if !slices.Contains(out, e.Plan.Name) {
				out = append(out, e.Plan.Name)
			}
		}
	}
	return out
}

// baseline is the point's estimate of the named baseline, nil if none.
func (p sweepPoint) baseline(name string) *cost.Estimate {
	if p.res == nil {
		return nil
	}
	for _, e := range p.res.Baselines {
		if e.Plan.Name == name {
			return e
		}
	}
	return nil
}

func printSweep(w io.Writer, file string, job *ir.Job, s *sweep, obj planner.Objective, points []sweepPoint) {
	c, t := job.Cluster, job.Train
	wrap(w, "", fmt.Sprintf("%s: %s on N x %d %s (%s per GPU), objective %s",
		file, job.Graph.Name, c.GPUsPerNode, c.GPU.Name, cost.GiB(float64(c.GPU.MemoryBytes)), obj))
	batch := fmt.Sprintf("batch: %s tokens per step at every size, as the train section says (--sweep-batch %s)",
		commas(t.TokensPerStep()), sweepFixed)
	if s.perGPU {
		batch = fmt.Sprintf("batch: %s tokens per GPU per step at every size; the global batch grows with the cluster (--sweep-batch %s)",
			commas(t.TokensPerStep()/int64(c.GPUs())), sweepPerGPU)
	}
	wrap(w, "", batch)
	var mems []float64
	for _, p := range points {
		if p.res == nil {
			continue
		}
		for _, e := range append(append([]*cost.Estimate{}, p.res.Baselines...), p.res.Chosen) {
			if e != nil {
				mems = append(mems, e.Mem.Total)
			}
		}
	}
	mu := pickUnit(binaryUnits, mems...)
	objHead := "step"
	if obj == planner.Paper {
		objHead = "T_comm"
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "chosen plan per size:")
	t1 := &table{cols: []tableCol{{"GPUs", false}, {"nodes", false}, {"batch", false}, {"M", false},
		{"chosen plan", true}, {"MFU", false}, {"mem " + mu.name, false}, {objHead, false}, {"sim", true}}}
	for _, p := range points {
		gpus, nodes := fmt.Sprint(p.job.Cluster.GPUs()), fmt.Sprint(p.job.Cluster.Nodes)
		batch := fmt.Sprint(p.job.Train.GlobalBatch)
		switch ch := p.chosen(); {
		case p.err != "":
			t1.add("not planned: "+p.err, gpus, nodes, batch, "-", "-")
		case ch == nil:
			t1.add(p.res.Explain()[0], gpus, nodes, batch, "-", "no plan fits")
		default:
			t1.add("", gpus, nodes, batch, fmt.Sprint(ch.M), truncate(ch.Plan.Name, maxPlanName), percent(ch.MFU),
				mu.in(ch.Mem.Total, 1), dur(obj.Score(ch)), yesNo(ch.Simulated))
		}
	}
	t1.write(w)

	names := baselineNames(points)
	cols := []tableCol{{"GPUs", false}, {"chosen", false}}
	for _, n := range names {
		cols = append(cols, tableCol{n, false})
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "MFU per plan (OOM: needs more than %s; *: simulated):\n", cost.GiB(float64(c.GPU.MemoryBytes)))
	t2 := &table{cols: cols}
	t3 := &table{cols: cols}
	for _, p := range points {
		r2, r3 := []string{fmt.Sprint(p.job.Cluster.GPUs())}, []string{fmt.Sprint(p.job.Cluster.GPUs())}
		for _, e := range append([]*cost.Estimate{p.chosen()}, p.baselines(names)...) {
			r2 = append(r2, sweepMFU(e))
			r3 = append(r3, sweepMem(e, mu))
		}
		t2.add("", r2...)
		t3.add("", r3...)
	}
	t2.write(w)
	fmt.Fprintln(w)
	fmt.Fprintf(w, "peak memory per GPU, %s (OOM: does not fit):\n", mu.name)
	t3.write(w)
}

// chosen is the point's chosen plan, nil when it has none.
func (p sweepPoint) chosen() *cost.Estimate {
	if p.res == nil {
		return nil
	}
	return p.res.Chosen
}

// baselines are the point's estimates of the named baselines (nil where
// it has none), or all of them when names is nil.
func (p sweepPoint) baselines(names []string) []*cost.Estimate {
	if names == nil {
		if p.res == nil {
			return nil
		}
		return p.res.Baselines
	}
	out := make([]*cost.Estimate, len(names))
	for i, n := range names {
		out[i] = p.baseline(n)
	}
	return out
}

// sweepMFU is one MFU cell: "52.5%*", "OOM", or "-" when not costed.
func sweepMFU(e *cost.Estimate) string {
	switch {
	case e == nil || e.M == 0:
		return "-"
	case !e.Feasible:
		return "OOM"
	case e.Simulated:
		return percent(e.MFU) + "*"
	}
	return percent(e.MFU)
}

// sweepMem is one memory cell: "47.8", or "123.0 OOM".
func sweepMem(e *cost.Estimate, u unit) string {
	switch {
	case e == nil || e.M == 0:
		return "-"
	case !e.Feasible:
		return u.in(e.Mem.Total, 1) + " OOM"
	}
	return u.in(e.Mem.Total, 1)
}

type sweepPointJSON struct {
	Nodes         int             `json:"nodes"`
	GPUs          int             `json:"gpus"`
	GlobalBatch   int64           `json:"global_batch"`
	TokensPerStep int64           `json:"tokens_per_step"`
	Error         string          `json:"error,omitempty"`
	Chosen        *estimateJSON   `json:"chosen"`
	Baselines     []*estimateJSON `json:"baselines"`
	Candidates    int             `json:"candidates"`
	SolveTime     float64         `json:"solve_time_s"`
	Explanation   []string        `json:"explanation"`
}

type sweepJSONOut struct {
	Objective string           `json:"objective"`
	Sweep     string           `json:"sweep"` // "nodes" or "gpus", as given
	Batch     string           `json:"batch"` // per-gpu or fixed
	Points    []sweepPointJSON `json:"points"`
}

func sweepJSON(s *sweep, obj planner.Objective, points []sweepPoint) *sweepJSONOut {
	out := &sweepJSONOut{Objective: obj.String(), Sweep: s.kind, Batch: sweepFixed, Points: []sweepPointJSON{}}
	if s.perGPU {
		out.Batch = sweepPerGPU
	}
	for _, p := range points {
		pj := sweepPointJSON{Nodes: p.job.Cluster.Nodes, GPUs: p.job.Cluster.GPUs(), GlobalBatch: p.job.Train.GlobalBatch,
			TokensPerStep: p.job.Train.TokensPerStep(), Error: p.err, Baselines: []*estimateJSON{}, Explanation: []string{}}
		if r := p.res; r != nil {
			pj.Chosen = toEstimateJSON(r.Chosen)
			for _, e := range r.Baselines {
				pj.Baselines = append(pj.Baselines, toEstimateJSON(e))
			}
			pj.Candidates, pj.SolveTime, pj.Explanation = r.Candidates, r.SolveTime.Seconds(), r.Explain()
		}
		out.Points = append(out.Points, pj)
	}
	return out
}
