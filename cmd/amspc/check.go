package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"amspc/cost"
	"amspc/cost/profile"
	"amspc/frontend"
	"amspc/ir"
	"amspc/passes"
)

// loadFlags are the flags every command that reads a job shares.
type loadFlags struct {
	cluster, train, shard, profile string
}

func (lf *loadFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&lf.cluster, "cluster", "", "take the cluster section from `FILE`")
	fs.StringVar(&lf.train, "train", "", "take the train section from `FILE`")
	fs.StringVar(&lf.profile, "profile", "", "cost with the measured profile `FILE` (amspc profile) instead of the cluster section's")
}

// registerShard adds --shard PLAN, which replaces the file's shard
// section; what says what the command does with the plan.
func (lf *loadFlags) registerShard(fs *flag.FlagSet, what string) {
	fs.StringVar(&lf.shard, "shard", "", what+" this `PLAN` instead of the file's shard section: a preset (zero3, mics(8), ...) or {params=2,grads=2,optim=8}")
}

// stdin is what a file named "-" reads (tests replace it).
var stdin io.Reader = os.Stdin

// stdinRead keeps what "-" read from stdin, so that a command loading
// several files (check a.amsp b.amsp --train -) gives each the same text
// rather than the second an empty one.
var stdinRead struct {
	from io.Reader
	text []byte
}

// readSource reads a .amsp file; "-" is standard input, named <stdin> in
// errors.
func readSource(name string) (frontend.Source, error) {
	if name == "-" {
		if stdinRead.from != stdin || stdinRead.text == nil {
			b, err := io.ReadAll(stdin)
			if err != nil {
				return frontend.Source{}, fmt.Errorf("standard input: %v", err)
			}
			stdinRead.from, stdinRead.text = stdin, b
		}
		return frontend.Source{Name: "<stdin>", Text: stdinRead.text}, nil
	}
	b, err := os.ReadFile(name)
	if err != nil {
		return frontend.Source{}, err
	}
	return frontend.Source{Name: name, Text: b}, nil
}

// load reads a job from its main file plus the files named by flags.
func (lf *loadFlags) load(name string) (*ir.Job, error) {
	src, err := readSource(name)
	if err != nil {
		return nil, err
	}
	var extra []frontend.Source
	stdinFor := ""
	if name == "-" {
		stdinFor = "as the main file"
	}
	for _, f := range []struct{ section, file string }{{"cluster", lf.cluster}, {"train", lf.train}} {
		if f.file == "" {
			continue
		}
		if f.file == "-" {
			// A second read would find it empty.
			if stdinFor != "" {
				return nil, fmt.Errorf("--%s -: standard input is already read %s", f.section, stdinFor)
			}
			stdinFor = "for --" + f.section
		}
		s, err := readSource(f.file)
		if err != nil {
			return nil, err
		}
		// A file without the section would change nothing, or,
		// holding another, replace that one unasked.
		s.Section = f.section
		extra = append(extra, s)
	}
	if lf.shard != "" {
		extra = append(extra, frontend.Source{Name: "--shard", Text: []byte("shard " + lf.shard), Section: "shard", Prefix: len("shard ")})
	}
	job, err := frontend.LoadWith(frontend.Options{Profile: lf.profile}, src, extra...)
	if err != nil {
		return nil, err
	}
	// The frontend records the profile's path; a file that cannot be
	// read is a user error where the setting or --profile named it.
	var se *profile.SettingError
	if err := profile.Check(job.Cluster); errors.As(err, &se) {
		return nil, frontend.ErrorList{{Pos: se.Pos, Msg: se.Msg}}
	} else if err != nil {
		return nil, err
	}
	return job, nil
}

func runCheck(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("check", "usage: amspc check [--json] [--cluster FILE] [--train FILE] [--dp N] FILE... (- reads standard input)", stderr)
	var lf loadFlags
	lf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per file")
	dp := fs.Int("dp", 0, "data-parallel size for the micro-batch count (default: every GPU of the cluster)")
	files, err := parseFlags(fs, args)
	if err != nil {
		return exitUser
	}
	if len(files) == 0 {
		fs.Usage()
		return exitUser
	}
	// 0 is the default (every GPU); given, it is a count of GPUs.
	if setFlags(fs)["dp"] && (*dp < 1 || *dp > maxDP) {
		fmt.Fprintf(stderr, "amspc check: --dp %d is out of range (1 to %d)\n", *dp, maxDP)
		return exitUser
	}
	status := exitOK
	for i, name := range files {
		job, err := lf.load(name)
		if name == "-" {
			name = "<stdin>"
		}
		if err != nil {
			if s := report(stderr, err); s > status {
				status = s
			}
			continue
		}
		if err := checkTensor(job); err != nil {
			status = max(status, passError(stderr, name, err))
			continue
		}
		sum, err := summarise(job, *dp)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			status = max(status, exitUser)
			continue
		}
		if *asJSON {
			b, _ := json.MarshalIndent(sum, "", "  ")
			fmt.Fprintf(stdout, "%s\n", b)
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		printSummary(stdout, name, job, sum)
	}
	return status
}

// checkTensor refuses a tensor-parallel degree the model's ops cannot
// be split by (heads, kv_heads, the FFN width, ...): the tensor pass's
// error, at the op or declaration, as compile would give it.
func checkTensor(job *ir.Job) error {
	if job.Shard == nil || job.Shard.Tensor <= 1 || job.Train == nil {
		return nil
	}
	cp := *job
	cp.Graph = job.Graph.Clone()
	_, err := passes.Run(&cp, passes.Options{Recompute: job.Train.Recompute})
	return err
}

// checkSummary is what `amspc check --json` prints; the text form shows
// the same numbers.
type checkSummary struct {
	File  string `json:"file"`
	Model struct {
		Name           string `json:"name"`
		Params         int64  `json:"params"`
		Layers         int    `json:"layers"`
		ParamsPerLayer int64  `json:"params_per_layer"`
		ParamsSplit    struct {
			Embedding int64 `json:"embedding"`
			Blocks    int64 `json:"blocks"`
			Head      int64 `json:"head"`
			Norms     int64 `json:"norms"`
			Other     int64 `json:"other"`
		} `json:"params_split"`
		Values int `json:"values"`
		Ops    int `json:"ops"`
	} `json:"model"`
	FlopsPerToken        float64         `json:"flops_per_token"`
	FlopsFormula         string          `json:"flops_formula"`
	MatMulWeights        int64           `json:"matmul_weights"`
	AttentionFlopsPerTok float64         `json:"attention_flops_per_token"`
	StateBytesPerParam   int64           `json:"model_state_bytes_per_param"`
	ModelStateBytes      int64           `json:"model_state_bytes"`
	Cluster              *clusterSummary `json:"cluster,omitempty"`
	Train                *trainSummary   `json:"train,omitempty"`
	Shard                struct {
		Mode      string  `json:"mode"`
		SP        *[2]int `json:"s_p,omitempty"`
		SG        *[2]int `json:"s_g,omitempty"`
		SOS       *[2]int `json:"s_os,omitempty"`
		Secondary *[2]int `json:"secondary_p,omitempty"`
	} `json:"shard"`
}

// clusterSummary is check's account of the cluster section.
type clusterSummary struct {
	Name           string  `json:"name"`
	Nodes          int     `json:"nodes"`
	GPUsPerNode    int     `json:"gpus_per_node"`
	GPUs           int     `json:"gpus"`
	GPU            string  `json:"gpu"`
	GPUMemoryBytes int64   `json:"gpu_memory_bytes"`
	PeakFlops      float64 `json:"peak_flops"`
	IntraNodeBW    float64 `json:"intra_node_bw"`
	InterNodeBW    float64 `json:"inter_node_bw"`
	Profile        string  `json:"profile,omitempty"`
}

// trainSummary is check's account of the train section.
type trainSummary struct {
	SeqLen        int64    `json:"seq_len"`
	MicroBatch    int64    `json:"micro_batch"`
	GlobalBatch   int64    `json:"global_batch"`
	TokensPerStep int64    `json:"tokens_per_step"`
	DataParallel  int      `json:"data_parallel,omitempty"`
	MicroBatches  int64    `json:"micro_batches,omitempty"`
	Precision     string   `json:"precision"`
	Recompute     string   `json:"recompute"`
	Optimizer     ir.AdamW `json:"optimizer"`
	Schedule      string   `json:"lr_schedule,omitempty"`
	Steps         int64    `json:"steps"`
	Seed          int64    `json:"seed"`
}

// maxDP bounds check's --dp: the cluster section's most nodes of 8 GPUs.
const maxDP = 8 << 20

// summarise gathers what check reports of a job: the model's size and
// FLOPs, then the sections; dp is --dp (0: every GPU of the cluster).
func summarise(job *ir.Job, dp int) (*checkSummary, error) {
	s := summariseModel(job)
	if c := job.Cluster; c != nil {
		s.Cluster = &clusterSummary{c.Name, c.Nodes, c.GPUsPerNode, c.GPUs(), c.GPU.Name, c.GPU.MemoryBytes, c.GPU.PeakFLOPS, c.IntraBW, c.InterBW, c.Profile}
		if dp > c.GPUs() {
			return nil, fmt.Errorf("--dp %d is more than the cluster's %d GPUs", dp, c.GPUs())
		}
	}
	given := dp > 0
	if c := job.Cluster; c != nil && dp == 0 {
		dp = job.DataParallel()
	}
	if t := job.Train; t != nil {
		ts, err := summariseTrain(t, dp)
		if err != nil {
			return nil, err
		}
		s.Train = ts
	} else if given {
		return nil, fmt.Errorf("--dp needs a train section")
	}
	sh := job.Shard
	s.Shard.Mode = sh.Label()
	if sh.Mode != ir.ShardAuto {
		f := func(x ir.Factor) *[2]int { return &[2]int{x.S0, x.S1} }
		s.Shard.SP, s.Shard.SG, s.Shard.SOS = f(sh.P), f(sh.G), f(sh.OS)
		if sh.Secondary != (ir.Factor{}) {
			s.Shard.Secondary = f(sh.Secondary)
		}
	}
	return s, nil
}

// summariseModel counts the model's params, values and FLOPs, and the
// bytes of its model states at the train section's precision.
func summariseModel(job *ir.Job) *checkSummary {
	g := job.Graph
	st := cost.Stats(g)
	s := &checkSummary{File: g.Pos.File}
	s.Model.Name = g.Name
	s.Model.Params = st.Params
	s.Model.Layers = st.Layers
	s.Model.ParamsPerLayer = st.ParamsPerLayer
	s.Model.ParamsSplit.Embedding = st.ByGroup[cost.GroupEmbedding]
	s.Model.ParamsSplit.Blocks = st.ByGroup[cost.GroupBlock]
	s.Model.ParamsSplit.Head = st.ByGroup[cost.GroupHead]
	s.Model.ParamsSplit.Norms = st.ByGroup[cost.GroupNorm]
	s.Model.ParamsSplit.Other = st.ByGroup[cost.GroupOther]
	s.Model.Values = len(g.Values)
	s.Model.Ops = len(g.Ops())
	s.FlopsPerToken = st.TrainFlopsPerToken()
	s.FlopsFormula = "6*N_mm + 12*L*d*s (PaLM app. B): 3x the forward FLOPs of every matmul and attention in the graph"
	s.MatMulWeights = st.MatMulWeights
	s.AttentionFlopsPerTok = st.AttentionFlopsPerToken()
	prec := ir.BF16Mixed
	if job.Train != nil {
		prec = job.Train.Precision
	}
	s.StateBytesPerParam = cost.StateBytesPerParam(prec)
	s.ModelStateBytes = s.StateBytesPerParam * st.Params
	return s
}

// summariseTrain is the train section's account, with the micro-batch
// count over dp data-parallel GPUs when dp is known.
func summariseTrain(t *ir.Train, dp int) (*trainSummary, error) {
	ts := &trainSummary{SeqLen: t.SeqLen, MicroBatch: t.MicroBatch, GlobalBatch: t.GlobalBatch, TokensPerStep: t.TokensPerStep(),
		Precision: t.Precision.String(), Recompute: t.Recompute.String(), Optimizer: t.Optimizer,
		Steps: t.Steps, Seed: t.Seed}
	if t.Schedule != (ir.LRSchedule{}) {
		ts.Schedule = t.Schedule.String()
	}
	if dp > 0 {
		m, err := t.MicroBatches(dp)
		if err != nil {
			return nil, err
		}
		ts.DataParallel, ts.MicroBatches = dp, m
	}
	return ts, nil
}

func printSummary(w io.Writer, name string, job *ir.Job, s *checkSummary) {
	p := func(label, format string, a ...any) {
		fmt.Fprintf(w, "  %-15s %s\n", label, fmt.Sprintf(format, a...))
	}
	fmt.Fprintf(w, "%s: model %s ok\n", name, s.Model.Name)
	p("layers", "%d", s.Model.Layers)
	p("parameters", "%s (%s)", commas(s.Model.Params), si(float64(s.Model.Params), ""))
	split := s.Model.ParamsSplit
	p("  embedding", "%s", commas(split.Embedding))
	if s.Model.Layers > 0 {
		p("  blocks", "%s (%s per layer x %d)", commas(split.Blocks), commas(s.Model.ParamsPerLayer), s.Model.Layers)
	}
	p("  head", "%s", commas(split.Head))
	p("  norms", "%s", commas(split.Norms))
	if split.Other > 0 {
		p("  other", "%s", commas(split.Other))
	}
	p("flops/token", "%sFLOP = 6*N_mm + 12*L*d*s (PaLM app. B), counted from the graph", si(s.FlopsPerToken, ""))
	note := ""
	// Matmuls of two activations are in the total but neither term.
	if rest := s.FlopsPerToken - 6*float64(s.MatMulWeights) - s.AttentionFlopsPerTok; rest > 1e-9*s.FlopsPerToken {
		note = fmt.Sprintf("; matmuls of two activations %sFLOP", si(rest, ""))
	}
	p("", "N_mm = %s matmul weights, once per matmul reading them; attention term %sFLOP%s", commas(s.MatMulWeights), si(s.AttentionFlopsPerTok, ""), note)
	p("model states", "%s = %sB (%d B/param: P, G, optimizer states)", bytesHuman(float64(s.ModelStateBytes)), si(float64(s.ModelStateBytes), ""), s.StateBytesPerParam)
	if c := s.Cluster; c != nil {
		label := "cluster"
		if c.Name != "" {
			label = "cluster " + c.Name
		}
		fmt.Fprintln(w, label)
		p("gpus", "%d = %d nodes x %d %s", c.GPUs, c.Nodes, c.GPUsPerNode, c.GPU)
		p("memory", "%s per GPU", bytesHuman(float64(c.GPUMemoryBytes)))
		p("peak", "%sFLOP/s per GPU (dense bf16)", si(c.PeakFlops, ""))
		p("intra-node bw", "%s/s per GPU, one direction", si(c.IntraNodeBW, "B"))
		p("inter-node bw", "%s/s per node, one direction", si(c.InterNodeBW, "B"))
		if c.Profile != "" {
			p("profile", "%s", c.Profile)
		}
	}
	if t := s.Train; t != nil {
		fmt.Fprintln(w, "train")
		p("batch", "%d sequences x %d tokens = %s tokens per step", t.GlobalBatch, t.SeqLen, commas(t.TokensPerStep))
		if t.DataParallel > 0 {
			p("micro-batches", "M = %d (micro_batch %d sequences on each of %d data-parallel GPUs)", t.MicroBatches, t.MicroBatch, t.DataParallel)
		} else {
			p("micro-batch", "micro_batch %d sequences per GPU", t.MicroBatch)
		}
		o := t.Optimizer
		p("precision", "%s, recompute %s", t.Precision, t.Recompute)
		p("optimizer", "adamw(lr=%s, beta1=%s, beta2=%s, eps=%s, weight_decay=%s)",
			ir.FormatFloat(o.LR), ir.FormatFloat(o.Beta1), ir.FormatFloat(o.Beta2), ir.FormatFloat(o.Eps), ir.FormatFloat(o.WeightDecay))
		if t.Schedule != "" {
			p("lr schedule", "%s", t.Schedule)
		}
	}
	sh := job.Shard
	if sh.Mode == ir.ShardAuto {
		fmt.Fprintln(w, "shard auto (the planner chooses)")
	} else {
		fmt.Fprintf(w, "shard %s\n", sh.Label())
		p("factors", "params %v, grads %v, optim %v (GPUs per node x nodes)", sh.P, sh.G, sh.OS)
		if sh.Secondary != (ir.Factor{}) {
			p("secondary", "params %v for backward (hpZ)", sh.Secondary)
		}
	}
}

// commas prints an integer with thousands separators: 6,738,415,616.
func commas(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// si prints a number with an SI prefix and 4 significant digits: "6.738 G".
func si(v float64, unit string) string {
	prefixes := []struct {
		p string
		f float64
	}{{"P", 1e15}, {"T", 1e12}, {"G", 1e9}, {"M", 1e6}, {"k", 1e3}}
	for _, p := range prefixes {
		if v >= p.f {
			return fmt.Sprintf("%.4g %s%s", v/p.f, p.p, unit)
		}
	}
	return fmt.Sprintf("%.4g %s", v, unit)
}

// bytesHuman prints a byte count in binary units: "80 GiB", "100.4 GiB".
func bytesHuman(v float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.4g %s", v, units[i])
}
