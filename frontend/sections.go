package frontend

import (
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"amspc/cluster"
	"amspc/ir"
)

// settings indexes a section's settings by key, reporting unknown and
// repeated keys. known lists the keys in the order errors should suggest.
type settings struct {
	d       *diag
	section string
	byKey   map[string]*Setting
}

func newSettings(d *diag, section string, list []*Setting, known []string) *settings {
	s := &settings{d: d, section: section, byKey: map[string]*Setting{}}
	for _, st := range list {
		ok := false
		for _, k := range known {
			ok = ok || k == st.Key
		}
		if !ok {
			d.errorf(pos(st.Pos), "unknown %s setting %s (known: %s)", section, st.Key, strings.Join(known, ", "))
			continue
		}
		if prev, dup := s.byKey[st.Key]; dup {
			d.errorf(pos(st.Pos), "%s.%s set twice (first at %s)", section, st.Key, pos(prev.Pos))
			continue
		}
		s.byKey[st.Key] = st
	}
	return s
}

// unit kinds a quantity may be asked for.
type unitKind uint8

const (
	unitCount unitKind = iota // plain number, maybe with K/M/G/Ki/Mi/Gi
	unitBytes
	unitByteRate
	unitFlopRate
	unitTime
)

var timeUnits = map[string]float64{"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1}

var byteUnits = map[string]float64{
	"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
	// bits, for network links quoted in Gb/s
	"Kb": 1e3 / 8, "Mb": 1e6 / 8, "Gb": 1e9 / 8, "Tb": 1e12 / 8,
}

var flopUnits = map[string]float64{
	"FLOP": 1, "KFLOP": 1e3, "MFLOP": 1e6, "GFLOP": 1e9, "TFLOP": 1e12, "PFLOP": 1e15,
}

var countUnits = map[string]float64{
	"K": 1e3, "M": 1e6, "G": 1e9, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
}

// quantity reads a number with units of the wanted kind. For unitCount the
// trailing unit (if any) is returned for the caller to interpret
// ("tokens", "sequences").
func (s *settings) quantity(st *Setting, want unitKind) (float64, string, bool) {
	q := st.Value.Quantity
	p := pos(st.Value.Pos)
	if q == nil {
		s.d.errorf(p, "%s.%s must be a number%s", s.section, st.Key, unitHint(want))
		return 0, "", false
	}
	if strings.Contains(q.Number, "x") {
		s.d.errorf(p, "%s.%s must be a number, not a factor %s", s.section, st.Key, q.Number)
		return 0, "", false
	}
	v, err := strconv.ParseFloat(q.Number, 64)
	if err != nil || math.IsInf(v, 0) {
		s.d.errorf(p, "number %s is out of range", q.Number)
		return 0, "", false
	}
	units := q.Units
	switch want {
	case unitCount:
		if q.Per != "" {
			s.d.errorf(p, "%s.%s is a count, not a rate (/%s)", s.section, st.Key, q.Per)
			return 0, "", false
		}
		if len(units) > 0 {
			if m, ok := countUnits[units[0]]; ok {
				v *= m
				units = units[1:]
			}
		}
		if len(units) > 1 {
			s.d.errorf(p, "unknown unit %s", strings.Join(units, " "))
			return 0, "", false
		}
		rest := ""
		if len(units) == 1 {
			rest = units[0]
		}
		return v, rest, true
	case unitBytes, unitByteRate, unitFlopRate:
		table := byteUnits
		if want == unitFlopRate {
			table = flopUnits
		}
		if len(units) != 1 {
			if len(units) == 0 {
				s.d.errorf(p, "%s.%s needs a unit%s", s.section, st.Key, unitHint(want))
			} else {
				s.d.errorf(p, "unknown unit %s%s", strings.Join(units, " "), unitHint(want))
			}
			return 0, "", false
		}
		m, ok := table[units[0]]
		if !ok {
			s.d.errorf(p, "unknown unit %s%s", units[0], unitHint(want))
			return 0, "", false
		}
		rate := want != unitBytes
		switch {
		case rate && q.Per == "":
			s.d.errorf(p, "%s.%s is a rate: write %s %s/s", s.section, st.Key, q.Number, units[0])
			return 0, "", false
		case rate && q.Per != "s":
			s.d.errorf(p, "unknown unit %s/%s (rates are per second: /s)", units[0], q.Per)
			return 0, "", false
		case !rate && q.Per != "":
			s.d.errorf(p, "%s.%s is a size, not a rate: drop /%s", s.section, st.Key, q.Per)
			return 0, "", false
		}
		return v * m, "", true
	}
	if want == unitTime {
		if len(units) != 1 || q.Per != "" {
			s.d.errorf(p, "%s.%s needs a time unit%s", s.section, st.Key, unitHint(want))
			return 0, "", false
		}
		m, ok := timeUnits[units[0]]
		if !ok {
			s.d.errorf(p, "unknown unit %s%s", units[0], unitHint(want))
			return 0, "", false
		}
		return v * m, "", true
	}
	return 0, "", false
}

// quantityText is a setting's value as written, for messages.
func quantityText(st *Setting) string {
	q := st.Value.Quantity
	if q == nil {
		return "?"
	}
	s := strings.Join(append([]string{q.Number}, q.Units...), " ")
	if q.Per != "" {
		s += "/" + q.Per
	}
	return s
}

func unitHint(k unitKind) string {
	switch k {
	case unitBytes:
		return " (bytes: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
	case unitByteRate:
		return " (a rate such as 200 GB/s or 400 Gb/s)"
	case unitFlopRate:
		return " (a rate such as 312 TFLOP/s)"
	case unitTime:
		return " (ns, us, ms or s)"
	}
	return ""
}

// integer reads a positive whole count that fits in max.
func (s *settings) integer(key string, max int64) (int64, bool, bool) {
	st, ok := s.byKey[key]
	if !ok {
		return 0, false, true
	}
	v, unit, good := s.quantity(st, unitCount)
	if !good {
		return 0, true, false
	}
	if unit != "" {
		s.d.errorf(pos(st.Value.Pos), "unknown unit %s for %s.%s", unit, s.section, key)
		return 0, true, false
	}
	return s.wholeCount(st, v, max)
}

func (s *settings) wholeCount(st *Setting, v float64, max int64) (int64, bool, bool) {
	p := pos(st.Value.Pos)
	if v != math.Trunc(v) {
		s.d.errorf(p, "%s.%s must be a whole number, not %s", s.section, st.Key, ir.FormatFloat(v))
		return 0, true, false
	}
	if v < 1 || v > float64(max) {
		s.d.errorf(p, "%s.%s = %s is out of range (1 to %d)", s.section, st.Key, ir.FormatFloat(v), max)
		return 0, true, false
	}
	return int64(v), true, true
}

func (s *settings) str(key string) (string, *Setting, bool) {
	st, ok := s.byKey[key]
	if !ok {
		return "", nil, true
	}
	if st.Value.Str == nil {
		hint := ""
		if st.Value.Ident != nil {
			hint = fmt.Sprintf(": %s.%s = %q", s.section, key, *st.Value.Ident)
		}
		s.d.errorf(pos(st.Value.Pos), "%s.%s must be a string in double quotes%s", s.section, key, hint)
		return "", st, false
	}
	v, err := strconv.Unquote(*st.Value.Str)
	if err != nil {
		s.d.errorf(pos(st.Value.Pos), "bad string %s", *st.Value.Str)
		return "", st, false
	}
	return v, st, true
}

func (s *settings) word(key string, choices ...string) (string, bool) {
	st, ok := s.byKey[key]
	if !ok {
		return "", true
	}
	if st.Value.Ident != nil {
		for _, c := range choices {
			if *st.Value.Ident == c {
				return c, true
			}
		}
	}
	s.d.errorf(pos(st.Value.Pos), "%s.%s must be one of %s", s.section, key, strings.Join(choices, ", "))
	return "", false
}

// Limits that keep every product below 2^53 (exact in a float64) and far
// from overflowing an int64.
const (
	maxNodes       = 1 << 20
	maxGPUsPerNode = 1 << 10
	maxSeqLen      = 1 << 24
	maxBatch       = 1 << 30
)

var clusterKeys = []string{"nodes", "gpus_per_node", "gpu", "memory", "peak_flops", "efficiency",
	"intra_node_bw", "inter_node_bw", "intra_latency", "inter_latency", "profile"}

func lowerCluster(d *diag, c *ClusterSection, profileFlag string) *ir.Cluster {
	s := newSettings(d, "cluster", c.Settings, clusterKeys)
	out := &ir.Cluster{Name: c.Name, Pos: pos(c.Pos), Nodes: 1, GPUsPerNode: 1}
	ok := true
	if n, set, good := s.integer("nodes", maxNodes); set && good {
		out.Nodes = int(n)
	} else {
		ok = ok && good
	}
	if n, set, good := s.integer("gpus_per_node", maxGPUsPerNode); set && good {
		out.GPUsPerNode = int(n)
	} else {
		ok = ok && good
	}
	name, st, good := s.str("gpu")
	switch {
	case !good:
		ok = false
	case st == nil:
		d.errorf(pos(c.Pos), "cluster needs gpu = \"NAME\" (a preset: %s)", gpuNames())
		ok = false
	default:
		gpu, found := cluster.LookupGPU(name)
		if !found {
			d.errorf(pos(st.Value.Pos), "unknown gpu %q (presets: %s)", name, gpuNames())
			ok = false
		}
		out.GPU = gpu
	}
	out.IntraBW, out.InterBW = out.GPU.IntraBW, out.GPU.InterBW
	override := func(key string, kind unitKind, dst *float64) {
		st, set := s.byKey[key]
		if !set {
			return
		}
		v, _, good := s.quantity(st, kind)
		switch {
		case !good:
		case math.IsInf(v, 0):
			d.errorf(pos(st.Value.Pos), "cluster.%s = %s is out of range", key, quantityText(st))
			good = false
		case !(v > 0):
			d.errorf(pos(st.Value.Pos), "cluster.%s = %s must be positive", key, quantityText(st))
			good = false
		}
		if !good {
			ok = false
			return
		}
		*dst = v
	}
	if st, set := s.byKey["memory"]; set {
		mem := -1.0
		override("memory", unitBytes, &mem)
		switch {
		case mem < 0: // reported by override
		case mem > float64(int64(1)<<62):
			d.errorf(pos(st.Value.Pos), "cluster.memory = %s is out of range (at most 2^62 bytes)", quantityText(st))
			ok = false
		case mem < 1:
			d.errorf(pos(st.Value.Pos), "cluster.memory = %s is less than 1 B", quantityText(st))
			ok = false
		default:
			out.GPU.MemoryBytes = int64(mem)
		}
	}
	override("peak_flops", unitFlopRate, &out.GPU.PeakFLOPS)
	override("intra_node_bw", unitByteRate, &out.IntraBW)
	override("inter_node_bw", unitByteRate, &out.InterBW)
	out.IntraLatency, out.InterLatency = ir.DefaultIntraLatency, ir.DefaultInterLatency
	override("intra_latency", unitTime, &out.IntraLatency)
	override("inter_latency", unitTime, &out.InterLatency)
	if st, set := s.byKey["efficiency"]; set {
		v, unit, good := s.quantity(st, unitCount)
		if good && (unit != "" || !(v > 0 && v <= 1)) {
			d.errorf(pos(st.Value.Pos), "cluster.efficiency = %s must be a fraction of peak in (0, 1]", quantityText(st))
			good = false
		}
		if good {
			out.GPU.Efficiency = v
		} else {
			ok = false
		}
	}
	if p, st, good := s.str("profile"); !good {
		ok = false
	} else if st != nil && p == "" && profileFlag == "" {
		d.errorf(pos(st.Value.Pos), "cluster.profile must name a file, not an empty string")
		ok = false
	} else if profileFlag != "" {
		// --profile wins; the file's setting is not used. The
		// frontend reads only its sources: the caller reads the
		// profile (cost/profile.Check), reporting errors where it was
		// named.
		out.Profile, out.ProfilePos = profileFlag, ir.Pos{File: "--profile"}
	} else if st != nil {
		// Relative to the file that names it, as an include would be,
		// so a model and its profile move together.
		out.Profile, out.ProfilePos, out.ProfileSetting = besideFile(st, p), pos(st.Pos), p
	}
	if !ok {
		return nil
	}
	return out
}

func gpuNames() string {
	var names []string
	for _, g := range cluster.GPUPresets {
		names = append(names, g.Name)
	}
	return strings.Join(names, ", ")
}

var trainKeys = []string{"seq_len", "micro_batch", "global_batch", "precision", "optimizer", "lr_schedule", "clip_grad_norm", "recompute", "steps", "seed", "data", "eval_every", "eval_tokens"}

// lowerTrain resolves a train section. It returns the settings it could
// read even when others are wrong (a bad seq_len or micro_batch is left 0),
// so the model can still bind batch and seq, and ok says whether all were
// right.
func lowerTrain(d *diag, t *TrainSection) (out *ir.Train, ok bool) {
	s := newSettings(d, "train", t.Settings, trainKeys)
	out = &ir.Train{Pos: pos(t.Pos), MicroBatch: 1, Optimizer: ir.DefaultAdamW, Steps: 1}
	ok = true
	take := func(key string, max int64, dst *int64, required bool) {
		v, set, good := s.integer(key, max)
		switch {
		case !good:
			*dst = 0
			ok = false
		case set:
			*dst = v
		case required:
			d.errorf(pos(t.Pos), "train needs %s", key)
			ok = false
		}
	}
	take("seq_len", maxSeqLen, &out.SeqLen, true)
	take("micro_batch", maxBatch, &out.MicroBatch, false)
	take("steps", 1<<40, &out.Steps, false)
	take("eval_every", 1<<40, &out.EvalEvery, false)
	take("eval_tokens", 1<<40, &out.EvalTokens, false)
	if st, set := s.byKey["seed"]; set {
		v, unit, good := s.quantity(st, unitCount)
		if good && (unit != "" || v != math.Trunc(v) || v < 0 || v > 1<<62) {
			d.errorf(pos(st.Value.Pos), "train.seed = %s must be a whole number from 0 to 2^62", quantityText(st))
			good = false
		}
		ok = ok && good
		out.Seed = int64(v)
	}
	if st, set := s.byKey["global_batch"]; !set {
		d.errorf(pos(t.Pos), "train needs global_batch (sequences, or N tokens)")
		ok = false
	} else {
		out.GlobalBatchPos = pos(st.Value.Pos)
		v, unit, good := s.quantity(st, unitCount)
		switch {
		case !good:
			ok = false
		case unit == "" || unit == "sequences" || unit == "seqs":
			n, _, good := s.wholeCount(st, v, maxBatch)
			ok = ok && good
			out.GlobalBatch = n
		case unit == "tokens":
			n, _, good := s.wholeCount(st, v, maxBatch*maxSeqLen)
			ok = ok && good
			if good && out.SeqLen > 0 {
				switch {
				case n%out.SeqLen != 0:
					d.errorf(out.GlobalBatchPos, "global batch of %d tokens is not a whole number of %d-token sequences", n, out.SeqLen)
					ok = false
				case n/out.SeqLen > maxBatch:
					d.errorf(out.GlobalBatchPos, "global batch of %d tokens is %d sequences of %d, more than the limit of %d", n, n/out.SeqLen, out.SeqLen, maxBatch)
					ok = false
				}
				out.GlobalBatch = n / out.SeqLen
			}
		default:
			d.errorf(out.GlobalBatchPos, "unknown unit %s for train.global_batch (sequences or tokens)", unit)
			ok = false
		}
	}
	if w, good := s.word("precision", "bf16", "fp16", "fp32"); good && w != "" {
		out.Precision, _ = ir.ParsePrecision(w)
	} else {
		ok = ok && good
	}
	if w, good := s.word("recompute", "none", "selective", "full"); good && w != "" {
		out.Recompute, _ = ir.ParseRecompute(w)
	} else {
		ok = ok && good
	}
	if st, set := s.byKey["optimizer"]; set {
		opt, good := lowerOptimizer(d, st)
		ok = ok && good
		out.Optimizer = opt
	}
	if st, set := s.byKey["lr_schedule"]; set {
		sched, good := lowerSchedule(d, st)
		ok = ok && good
		out.Schedule = sched
		if good && sched.Kind != ir.ConstantLR && sched.MinLR > out.Optimizer.LR {
			d.errorf(pos(st.Value.Pos), "lr_schedule's min_lr %s is above the optimizer's lr %s: a decay would raise the rate", ir.FormatFloat(sched.MinLR), ir.FormatFloat(out.Optimizer.LR))
			ok = false
		}
	}
	if st, set := s.byKey["clip_grad_norm"]; set {
		v, unit, good := s.quantity(st, unitCount)
		if good && (unit != "" || !(v > 0) || math.IsInf(v, 0)) {
			d.errorf(pos(st.Value.Pos), "train.clip_grad_norm = %s must be a number above 0 (leave it out for no clipping)", quantityText(st))
			good = false
		}
		ok = ok && good
		out.ClipGradNorm, out.ClipGradNormPos = v, pos(st.Value.Pos)
	}
	switch p, st, good := s.str("data"); {
	case !good:
		ok = false
	case st != nil && p == "":
		d.errorf(pos(st.Value.Pos), "train.data must name a file, not an empty string")
		ok = false
	case st != nil:
		// Read when the job runs, not here: a plan can be compiled
		// where the tokens are not.
		out.Data = besideFile(st, p)
	}
	return out, ok
}

// besideFile resolves a path written in a setting relative to the file
// that holds it, as an include would be, so a model moves together with
// its profile and data. A source with no directory (<stdin>, --shard)
// resolves against the working directory.
func besideFile(st *Setting, path string) string {
	if filepath.IsAbs(path) {
		return path
	}
	return filepath.Join(filepath.Dir(st.Pos.Filename), path)
}

// lowerSchedule reads lr_schedule: constant, or constant(warmup=N),
// cosine(warmup=N, min_lr=X), linear(warmup=N, min_lr=X),
// wsd(warmup=N, decay=N, min_lr=X); every argument optional (0).
func lowerSchedule(d *diag, st *Setting) (ir.LRSchedule, bool) {
	const usage = "train.lr_schedule must be constant, cosine(warmup=, min_lr=), linear(warmup=, min_lr=) or wsd(warmup=, decay=, min_lr=)"
	var out ir.LRSchedule
	name, c := "", st.Value.Call
	switch {
	case st.Value.Ident != nil:
		name = *st.Value.Ident
	case c != nil:
		name = c.Name
	}
	kind, known := ir.ParseSchedule(name)
	if !known {
		d.errorf(pos(st.Value.Pos), "%s", usage)
		return out, false
	}
	out.Kind = kind
	if c == nil {
		return out, true
	}
	ok := true
	seen := map[string]bool{}
	for _, a := range c.Args {
		p := pos(a.Pos)
		allowed := a.Key == "warmup" || a.Key == "min_lr" && kind != ir.ConstantLR || a.Key == "decay" && kind == ir.WSDLR
		switch {
		case a.Key == "":
			d.errorf(p, "%s's arguments are named: %s", name, usage)
			ok = false
			continue
		case !allowed:
			d.errorf(p, "%s has no argument %s (%s)", name, a.Key, usage)
			ok = false
			continue
		case seen[a.Key]:
			d.errorf(p, "%s: %s given twice", name, a.Key)
			ok = false
			continue
		}
		seen[a.Key] = true
		v, good := constNumber(a.Value)
		p = pos(a.Value.Pos)
		switch {
		case !good || v < 0 || math.IsInf(v, 0):
			d.errorf(p, "%s %s must be a number 0 or more", name, a.Key)
			ok = false
		case a.Key == "min_lr":
			out.MinLR = v
		case v != math.Trunc(v) || v > 1<<40:
			d.errorf(p, "%s %s = %s must be a whole number of steps", name, a.Key, ir.FormatFloat(v))
			ok = false
		case a.Key == "warmup":
			out.Warmup = int64(v)
		default:
			out.Decay = int64(v)
		}
	}
	return out, ok
}

func lowerOptimizer(d *diag, st *Setting) (ir.AdamW, bool) {
	c := st.Value.Call
	opt := ir.DefaultAdamW
	if c == nil || c.Name != "adamw" {
		d.errorf(pos(st.Value.Pos), "train.optimizer must be adamw(lr=, beta1=, beta2=, eps=, weight_decay=)")
		return opt, false
	}
	// open marks a range open at lo: a zero learning rate trains
	// nothing, and eps keeps Adam's update from dividing by zero.
	type field struct {
		name string
		dst  *float64
		lo   float64
		hi   float64
		open bool
	}
	fields := []field{
		{"lr", &opt.LR, 0, math.Inf(1), true},
		{"beta1", &opt.Beta1, 0, 1, false},
		{"beta2", &opt.Beta2, 0, 1, false},
		{"eps", &opt.Eps, 0, math.Inf(1), true},
		{"weight_decay", &opt.WeightDecay, 0, math.Inf(1), false},
	}
	ok := true
	seen := map[string]bool{}
	for _, a := range c.Args {
		p := pos(a.Pos)
		var f *field
		for i := range fields {
			if fields[i].name == a.Key {
				f = &fields[i]
			}
		}
		if a.Key == "" || f == nil {
			if a.Key == "" {
				d.errorf(p, "adamw arguments are named: adamw(lr=, beta1=, beta2=, eps=, weight_decay=)")
			} else {
				d.errorf(p, "adamw has no argument %s (it takes lr, beta1, beta2, eps, weight_decay)", a.Key)
			}
			ok = false
			continue
		}
		if seen[a.Key] {
			d.errorf(p, "adamw: %s given twice", a.Key)
			ok = false
			continue
		}
		seen[a.Key] = true
		v, good := constNumber(a.Value)
		p = pos(a.Value.Pos) // a bad value is blamed on the value
		lo := "["
		if f.open {
			lo = "("
		}
		switch {
		case !good:
			d.errorf(p, "adamw %s must be a number", f.name)
		case v < f.lo || v >= f.hi || (f.open && v == f.lo):
			d.errorf(p, "adamw %s = %s is outside %s%s, %s)", f.name, ir.FormatFloat(v), lo, ir.FormatFloat(f.lo), ir.FormatFloat(f.hi))
			good = false
		}
		if !good {
			ok = false
			continue
		}
		*f.dst = v
	}
	return opt, ok
}

// constNumber reads a literal number (optionally negated) from an
// expression; settings take literals, not dim arithmetic.
func constNumber(e *Expr) (float64, bool) {
	if len(e.Rest) > 0 || len(e.Left.Rest) > 0 {
		return 0, false
	}
	u, sign := e.Left.Left, 1.0
	for u.Neg != nil {
		u, sign = u.Neg, -sign
	}
	if u.Primary == nil || u.Primary.Number == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(*u.Primary.Number, 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, false
	}
	return sign * v, true
}

// shardKeys are the settings a shard section needs; it may also set
// tensor = T and sequence = true|false.
var shardKeys = []string{"params", "grads", "optim"}

// lowerShard resolves a shard section against the cluster: c is nil when
// the file has none, which only auto allows, or when the cluster section
// has errors (haveCluster), which are reported already.
func lowerShard(d *diag, sh *ShardSection, c *ir.Cluster, haveCluster bool) *ir.ShardSpec {
	p := pos(sh.Pos)
	out := &ir.ShardSpec{Pos: p}
	if sh.Preset != nil || sh.Call != nil {
		return lowerPreset(d, sh, c, haveCluster)
	}
	out.Mode = ir.ShardFixed
	s := newSettings(d, "shard", sh.Settings, append(append([]string(nil), shardKeys...), "tensor", "sequence"))
	ok := true
	for _, k := range shardKeys {
		if _, set := s.byKey[k]; !set {
			d.errorf(p, "shard needs %s = FACTOR (all of params, grads, optim)", k)
			ok = false
		}
	}
	if !ok {
		return nil
	}
	if c == nil {
		if !haveCluster {
			d.errorf(p, "shard factors need a cluster section to check against")
		}
		return nil
	}
	// Tensor parallelism takes tensor GPUs of a node; params, grads and
	// optim shard over the rest: gpn of each node.
	gpn := c.GPUsPerNode
	tensor, _, goodT := s.integer("tensor", maxGPUsPerNode)
	seq, goodSeq := s.word("sequence", "true", "false")
	if !goodT || !goodSeq {
		return nil
	}
	if tensor > 1 {
		if int(tensor) > gpn || gpn%int(tensor) != 0 {
			d.errorf(pos(s.byKey["tensor"].Value.Pos), "shard.tensor = %d must divide the %d GPUs of a node (tensor parallelism stays inside a node)", tensor, gpn)
			return nil
		}
		gpn /= int(tensor)
		out.Tensor = int(tensor)
	}
	if seq == "true" {
		if tensor <= 1 {
			d.errorf(pos(s.byKey["sequence"].Value.Pos), "shard.sequence = true needs shard.tensor = 2 or more (sequence parallelism splits what tensor parallelism replicates)")
			return nil
		}
		out.Sequence = true
	}
	factor := func(key string) (ir.Factor, bool) {
		st := s.byKey[key]
		q := st.Value.Quantity
		vp := pos(st.Value.Pos)
		if q == nil || len(q.Units) > 0 || q.Per != "" {
			d.errorf(vp, "shard.%s must be a GPU count (8) or a factor s0xs1 (8x4)", key)
			return ir.Factor{}, false
		}
		if a, b, isMesh := strings.Cut(q.Number, "x"); isMesh {
			s0, e0 := strconv.Atoi(a)
			s1, e1 := strconv.Atoi(b)
			if e0 != nil || e1 != nil || s0 < 1 || s1 < 1 {
				d.errorf(vp, "shard.%s factor %s must be two positive integers", key, q.Number)
				return ir.Factor{}, false
			}
			return ir.Factor{S0: s0, S1: s1}, true
		}
		v, err := strconv.ParseFloat(q.Number, 64)
		if err != nil || v != math.Trunc(v) || v < 1 || v > maxNodes*maxGPUsPerNode {
			d.errorf(vp, "shard.%s = %s must be a positive whole number of GPUs", key, q.Number)
			return ir.Factor{}, false
		}
		f, ferr := ir.GPUsToFactor(int(v), gpn, c.Nodes)
		if ferr != nil {
			d.errorf(vp, "shard.%s: %v", key, ferr)
			return ir.Factor{}, false
		}
		return f, true
	}
	var good [3]bool
	out.P, good[0] = factor("params")
	out.G, good[1] = factor("grads")
	out.OS, good[2] = factor("optim")
	if !good[0] || !good[1] || !good[2] {
		return nil
	}
	dp := ir.Factor{S0: gpn, S1: c.Nodes}
	if err := ir.ValidateFactors(dp, out.P, out.G, out.OS); err != nil {
		// ValidateFactors names the factor at fault first ("grads
		// factor 2x1 must ..."); point at that setting.
		at := p
		if f := strings.Fields(err.Error()); len(f) > 0 {
			if st, ok := s.byKey[f[0]]; ok {
				at = pos(st.Value.Pos)
			}
		}
		d.errorf(at, "invalid shard: %v", err)
		return nil
	}
	return out
}

// lowerPreset resolves `shard NAME` and `shard NAME(k)`. Errors point at
// the group size when it is to blame, else at the preset.
func lowerPreset(d *diag, sh *ShardSection, c *ir.Cluster, haveCluster bool) *ir.ShardSpec {
	p := pos(sh.Pos)
	out := &ir.ShardSpec{Pos: p}
	name, namePos := "", p
	if sh.Preset != nil {
		name = *sh.Preset
	} else {
		name, namePos = sh.Call.Name, pos(sh.Call.Pos)
	}
	known, takesK := name == "auto", false
	for _, pr := range cluster.Presets {
		if pr.Name == name {
			known, takesK = true, pr.TakesK
		}
	}
	switch {
	case !known:
		d.errorf(namePos, "unknown shard preset %s (known: auto, ddp, zero1, zero2, zero3, mics(k), hsdp(k), zeropp(k))", name)
		return nil
	case takesK && sh.Call == nil:
		d.errorf(namePos, "shard %s needs a group size: %s(8)", name, name)
		return nil
	case !takesK && sh.Call != nil:
		d.errorf(namePos, "shard %s takes no argument", name)
		return nil
	case name == "auto":
		return out
	}
	argPos := namePos
	k := 0
	if sh.Call != nil {
		if len(sh.Call.Args) != 1 || sh.Call.Args[0].Key != "" {
			d.errorf(namePos, "shard %s takes one argument, a group size: %s(8)", name, name)
			return nil
		}
		argPos = pos(sh.Call.Args[0].Pos)
		v, good := constNumber(sh.Call.Args[0].Value)
		switch {
		case !good:
			d.errorf(argPos, "shard %s group size must be a number: %s(8)", name, name)
			return nil
		case v != math.Trunc(v) || v < 1 || v > maxNodes*maxGPUsPerNode:
			d.errorf(argPos, "shard %s group size %s is not a whole number from 1 to %d", name, ir.FormatFloat(v), maxNodes*maxGPUsPerNode)
			return nil
		}
		k = int(v)
	}
	out.Mode, out.Preset, out.K = ir.ShardPreset, name, k
	if c == nil {
		if !haveCluster {
			d.errorf(namePos, "shard %s needs a cluster section to resolve against", out.Label())
		}
		return nil
	}
	dp := ir.Factor{S0: c.GPUsPerNode, S1: c.Nodes}
	var err error
	out.P, out.G, out.OS, out.Secondary, err = cluster.ResolvePreset(name, k, dp)
	if err == nil {
		err = ir.ValidateFactors(dp, out.P, out.G, out.OS)
	}
	if err != nil {
		d.errorf(argPos, "shard %s: %v", out.Label(), err)
		return nil
	}
	return out
}

// describe is used in messages about a missing train section.
func describeMissing(what string) string {
	return fmt.Sprintf("but the file has no %s section (add one, or pass --%s FILE)", what, what)
}
