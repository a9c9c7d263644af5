package frontend

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"amspc/ir"
)

// Source is one input file.
type Source struct {
	Name string
	Text []byte
	// Section, for a file named by a flag for one section (--cluster
	// FILE, --train FILE), is that section's kind: Load refuses the
	// file when it holds none, rather than keep the main file's.
	Section string
	// Prefix is how many bytes at the start of Text the caller wrote
	// rather than the user (the "shard " before --shard's value): errors
	// on the first line count columns from after them.
	Prefix int
}

// Parse parses one file into its syntax tree.
func Parse(src Source) (*File, error) {
	if !utf8.Valid(src.Text) {
		line, col := 1, 1
		for i := 0; i < len(src.Text); {
			r, n := utf8.DecodeRune(src.Text[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			if r == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
			i += n
		}
		return nil, ErrorList{{Pos: ir.Pos{File: src.Name, Line: line, Col: col}, Msg: "invalid UTF-8"}}
	}
	if e := checkNesting(src); e != nil {
		return nil, ErrorList{e}
	}
	f, err := parser.ParseBytes(src.Name, src.Text)
	if err != nil {
		return nil, ErrorList{syntaxError(src, err)}
	}
	return f, nil
}

// maxNesting bounds brackets inside brackets and runs of unary minus. The
// parser and the lowering recurse once per level, a Go stack overflow
// cannot be recovered, and participle slows down quadratically long before
// that (100,000 parentheses take seconds); real files nest a few levels.
const maxNesting = 100

// checkNesting reports the first token nested deeper than maxNesting. A
// file the lexer rejects is left to the parser, which says why.
func checkNesting(src Source) *Error {
	lx, err := amspLexer.Lex(src.Name, bytes.NewReader(src.Text))
	if err != nil {
		return nil
	}
	syms := amspLexer.Symbols()
	depth, minus := 0, 0
	for {
		tok, err := lx.Next()
		if err != nil || tok.EOF() {
			return nil
		}
		if tok.Type == syms["Comment"] || tok.Type == syms["Whitespace"] {
			continue
		}
		switch tok.Value {
		case "(", "[", "{":
			depth++
		case ")", "]", "}":
			depth = max(depth-1, 0)
		}
		if tok.Value == "-" {
			minus++
		} else {
			minus = 0
		}
		if depth > maxNesting || minus > maxNesting {
			return &Error{Pos: srcPos(src, tok.Pos), Msg: fmt.Sprintf("nested too deeply: more than %d levels", maxNesting)}
		}
	}
}

// sections is the chosen section of each kind after combining files.
type sections struct {
	model   *ModelSection
	cluster *ClusterSection
	train   *TrainSection
	shard   *ShardSection
}

// has reports whether s holds a section of kind ("" is always held).
func (s sections) has(kind string) bool {
	switch kind {
	case "":
		return true
	case "model":
		return s.model != nil
	case "cluster":
		return s.cluster != nil
	case "train":
		return s.train != nil
	case "shard":
		return s.shard != nil
	}
	return false
}

// without is s less the sections of the kinds in drop, but for keep.
func (s sections) without(drop map[string]bool, keep string) sections {
	if drop["cluster"] && keep != "cluster" {
		s.cluster = nil
	}
	if drop["train"] && keep != "train" {
		s.train = nil
	}
	if drop["shard"] && keep != "shard" {
		s.shard = nil
	}
	return s
}

// collect takes the sections of one file, reporting a kind given twice.
func collect(d *diag, f *File) sections {
	var s sections
	first := map[string]ir.Pos{}
	dup := func(kind string, p ir.Pos) bool {
		if prev, ok := first[kind]; ok {
			d.errorf(p, "second %s section (the first is at %s); a file holds one of each", kind, prev)
			return true
		}
		first[kind] = p
		return false
	}
	for _, sec := range f.Sections {
		switch {
		case sec.Model != nil:
			if !dup("model", pos(sec.Model.Pos)) {
				s.model = sec.Model
			}
		case sec.Cluster != nil:
			if !dup("cluster", pos(sec.Cluster.Pos)) {
				s.cluster = sec.Cluster
			}
		case sec.Train != nil:
			if !dup("train", pos(sec.Train.Pos)) {
				s.train = sec.Train
			}
		case sec.Shard != nil:
			if !dup("shard", pos(sec.Shard.Pos)) {
				s.shard = sec.Shard
			}
		}
	}
	return s
}

// Load parses and lowers a job. The model comes from main; each file in
// extra (given with --cluster, --train or --shard) replaces main's
// sections of the kinds it holds, so one model can be checked against
// several clusters; a kind that one file's Section names comes from that
// file alone. The graph is
// verified before it is returned; errors are an ErrorList of user errors,
// or an internal error when verification of a lowered graph fails.
func Load(main Source, extra ...Source) (*ir.Job, error) {
	return LoadWith(Options{}, main, extra...)
}

// Options change what Load takes from the files.
type Options struct {
	// Profile replaces the cluster section's profile setting (--profile
	// FILE): a path as given on the command line, relative to the
	// working directory, where the setting's is relative to its file.
	// Either is only recorded on the job (ir.Cluster.Profile and where
	// it was named): the frontend reads its sources and nothing else.
	Profile string
}

// LoadWith is Load with options.
func LoadWith(opts Options, main Source, extra ...Source) (*ir.Job, error) {
	job, err := load(opts, main, extra, 0)
	if list, ok := err.(ErrorList); ok {
		for _, e := range list {
			for _, src := range append([]Source{main}, extra...) {
				if src.Prefix > 0 && e.Pos.File == src.Name && e.Pos.Line == 1 {
					e.Pos.Col = max(e.Pos.Col-src.Prefix, 1)
				}
			}
		}
	}
	return job, err
}

// load is Load with the train section's micro_batch replaced by
// microBatch when it is positive (Job.Rebatch).
func load(opts Options, main Source, extra []Source, microBatch int64) (*ir.Job, error) {
	d := &diag{}
	f, err := Parse(main)
	if err != nil {
		return nil, err
	}
	s := collect(d, f)
	flagged := map[string]bool{} // the kinds a flag names a file for
	for _, src := range extra {
		flagged[src.Section] = true
	}
	for _, src := range extra {
		ef, err := Parse(src)
		if err != nil {
			return nil, err
		}
		es := collect(d, ef)
		if !es.has(src.Section) {
			d.errorf(ir.Pos{File: src.Name}, "--%s names a file with no %s section", src.Section, src.Section)
		}
		if es.model != nil {
			d.errorf(pos(es.model.Pos), "a model section belongs in the main file, not in %s", src.Name)
		}
		// A section that a flag names comes from that flag's file: a
		// cluster beside the train section of --train FILE does not
		// replace --cluster's. The file's other sections apply, as they
		// do for a file without a Section.
		es = es.without(flagged, src.Section)
		if es.cluster != nil {
			s.cluster = es.cluster
		}
		if es.train != nil {
			s.train = es.train
		}
		if es.shard != nil {
			s.shard = es.shard
		}
	}
	if s.model == nil {
		d.errorf(ir.Pos{File: main.Name, Line: 1, Col: 1}, "no model section")
		return nil, d.err()
	}
	job := &ir.Job{}
	if s.cluster != nil {
		job.Cluster = lowerCluster(d, s.cluster, opts.Profile)
	}
	var batch, seq int64
	dtype := ir.BF16
	why := describeMissing("train")
	if s.train != nil {
		t, ok := lowerTrain(d, s.train)
		if ok && microBatch > 0 {
			t.MicroBatch = microBatch
		}
		batch, seq = t.MicroBatch, t.SeqLen
		dtype = t.Precision.DType()
		why = "" // a bad micro_batch or seq_len is already reported
		if ok {
			job.Train = t
		}
	}
	job.Graph = lowerModel(d, s.model, batch, seq, dtype, why)
	if s.shard != nil {
		job.Shard = lowerShard(d, s.shard, job.Cluster, s.cluster != nil)
	}
	if job.Train != nil && job.Cluster != nil {
		if _, err := job.Train.MicroBatches(job.DataParallel()); err != nil {
			d.errorf(job.Train.GlobalBatchPos, "%v", err)
		}
	}
	if d.failed() {
		return nil, d.err()
	}
	if job.Shard == nil {
		job.Shard = &ir.ShardSpec{Mode: ir.ShardAuto}
	}
	if err := ir.Verify(job.Graph); err != nil {
		return nil, &ir.InternalError{Pass: "lower", Err: err}
	}
	job.Rebatch = func(mb int64) (*ir.Job, error) {
		if mb <= 0 {
			return nil, fmt.Errorf("micro-batch size %d is not positive", mb)
		}
		return load(opts, main, extra, mb)
	}
	return job, nil
}
