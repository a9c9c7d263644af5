package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"amspc/cost"
	"amspc/engine"
	"amspc/frontend"
	"amspc/importer/hf"
	"amspc/internal/outfile"
	"amspc/ir"
)

const importUsage = "usage: amspc import hf [-o FILE] [--force] [--ckpt DIR [--overwrite]] [--name NAME] [--nodes N] [--gpus-per-node N] [--gpu PRESET]\n" +
	"                       [--seq N] [--micro-batch N] [--global-batch N|'N tokens'] [--precision bf16|fp16|fp32] MODEL_DIR|config.json"

// runImport writes the .amsp job of a model published elsewhere: today a
// Hugging Face config.json (package importer/hf says what it maps, what it
// refuses and why).
func runImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("import", importUsage, stderr)
	out := fs.String("o", "", "write the job to `FILE` (default: standard output)")
	force := fs.Bool("force", false, "let -o overwrite an existing file")
	ckpt := fs.String("ckpt", "", "also import the weights (model.safetensors, or the shards model.safetensors.index.json names, beside config.json) into the checkpoint `DIR`, which amspc run --resume DIR trains from")
	overwrite := fs.Bool("overwrite", false, "with --ckpt, replace a checkpoint in DIR of another model or of a later step")
	var o hf.Options
	fs.StringVar(&o.Name, "name", "", "the model's `NAME` (default: from _name_or_path, else the file's name)")
	fs.Int64Var(&o.Nodes, "nodes", hf.Defaults.Nodes, "cluster nodes")
	fs.Int64Var(&o.GPUsPerNode, "gpus-per-node", hf.Defaults.GPUsPerNode, "GPUs per node")
	fs.StringVar(&o.GPU, "gpu", hf.Defaults.GPU, "GPU `PRESET` (A100-80GB, A800-80GB, H100-80GB, H800-80GB, H200-141GB, cpu)")
	fs.Int64Var(&o.Seq, "seq", 0, fmt.Sprintf("sequence length (default: min(max_position_embeddings, %d))", hf.DefaultMaxSeq))
	fs.Int64Var(&o.MicroBatch, "micro-batch", hf.Defaults.MicroBatch, "sequences per GPU per micro-batch")
	fs.StringVar(&o.GlobalBatch, "global-batch", "", "sequences per step, or 'N tokens' (default: the whole number of micro-batches nearest 4Mi tokens)")
	fs.StringVar(&o.Precision, "precision", hf.Defaults.Precision, "bf16, fp16 or fp32")
	files, err := parseFlags(fs, args)
	if err != nil {
		return exitUser
	}
	if err := checkImportFlags(fs, o, *out, *force, *ckpt, *overwrite); err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	if len(files) != 2 || files[0] != "hf" {
		if len(files) > 0 && files[0] != "hf" {
			fmt.Fprintf(stderr, "amspc import: unknown source %q (known: hf, a Hugging Face config.json)\n", files[0])
		}
		fs.Usage()
		return exitUser
	}
	cfgPath := files[1]
	if fi, err := os.Stat(cfgPath); err == nil && fi.IsDir() {
		cfgPath = filepath.Join(cfgPath, "config.json")
	}
	if err := notAnInput("-o", *out, cfgPath); err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	config, err := os.ReadFile(cfgPath)
	if err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	o.Source, o.Output = cfgPath, *out
	res, err := hf.Convert(config, o)
	var list frontend.ErrorList
	switch {
	case errors.As(err, &list):
		return report(stderr, err) // config.json:line:col: ...
	case err != nil:
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	if *ckpt != "" {
		say := stdout
		if *out == "" {
			say = stderr // standard output carries the job
		}
		if st := importHFWeights(filepath.Dir(cfgPath), res, *ckpt, *overwrite, say, stderr); st != exitOK {
			return st
		}
	}
	if *out == "" {
		_, err := stdout.Write(res.Text)
		if err != nil {
			fmt.Fprintf(stderr, "amspc import: %v\n", err)
			return exitUser
		}
		return exitOK
	}
	if err := writeNew(*out, res.Text, *force); err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "%s: wrote %s: model %s, %s parameters\n", cfgPath, *out, res.Model, commas(res.Params))
	return exitOK
}

// importHFWeights writes the step-0 checkpoint of the imported job res
// into ckpt from the Hugging Face weights in dir, saying so on say.
func importHFWeights(dir string, res *hf.Result, ckpt string, overwrite bool, say, stderr io.Writer) int {
	job, err := frontend.Load(frontend.Source{Name: res.Model + ".amsp", Text: res.Text})
	if err != nil {
		return report(stderr, err)
	}
	files, err := engine.ForeignFiles(dir)
	if err != nil {
		fmt.Fprintf(stderr, "amspc import: --ckpt: %v\n", err)
		return exitUser
	}
	var need int64
	for _, f := range files {
		if fi, err := os.Stat(f); err == nil {
			need += 3 * fi.Size() // the file, and its tensors widened to fp32
		}
	}
	if avail := availableBytes(); float64(need) > avail {
		fmt.Fprintf(stderr, "amspc import: importing the weights in %s needs about %s of memory, more than the %s available\n", dir, cost.GiB(float64(need)), cost.GiB(avail))
		return exitUser
	}
	params := paramShapes(job)
	release, err := engine.PrepareSave(ckpt, engine.NewModelID(job.Graph.Name, params), 0, "", overwrite, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "amspc import: --ckpt: %v\n", err)
		return exitUser
	}
	defer release()
	m, err := engine.ImportForeign(files, foreignMapping(res.Weights), hf.Skipped, job.Graph.Name, params, uint64(job.Train.Seed), ckpt)
	if err != nil {
		fmt.Fprintf(stderr, "amspc import: --ckpt: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(say, "%s: wrote checkpoint %s: model %s at step 0, %d params from %d file(s); train from it with amspc run --resume %s\n",
		dir, ckpt, m.Model, len(m.Tensors), len(files), ckpt)
	return exitOK
}

// foreignMapping is the importer's mapping as the engine takes it.
func foreignMapping(ws []hf.Weight) []engine.Foreign {
	out := make([]engine.Foreign, len(ws))
	for i, w := range ws {
		out[i] = engine.Foreign{Param: w.Param, Name: w.HF, Transpose: w.Transpose, Offset: w.Offset, Copy: w.Copy}
	}
	return out
}

// paramShapes lists the job's params as checkpoints name them.
func paramShapes(job *ir.Job) []engine.ParamShape {
	var params []engine.ParamShape
	for _, v := range job.Graph.Params() {
		params = append(params, engine.ParamShape{Name: v.Name, Shape: v.Shape})
	}
	return params
}

// checkImportFlags refuses what the importer would otherwise read as
// "unset" and replace by its default: a count of 0 or an empty string
// given on the command line. It also refuses --force without -o and --overwrite without --ckpt, which
// would be dropped. The importer checks the rest (negative counts, a GPU
// that is not a preset, a global batch that does not split); this
// repeats its limits so that an explicit 0 reads as the same error.
func checkImportFlags(fs *flag.FlagSet, o hf.Options, out string, force bool, ckpt string, overwrite bool) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for _, c := range []struct {
		flag string
		v    int64
		max  int64
	}{
		{"nodes", o.Nodes, 1 << 20},
		{"gpus-per-node", o.GPUsPerNode, 1 << 10},
		{"seq", o.Seq, 1 << 24},
		{"micro-batch", o.MicroBatch, 1 << 30},
	} {
		if set[c.flag] && (c.v < 1 || c.v > c.max) {
			return fmt.Errorf("--%s %d is out of range (1 to %d)", c.flag, c.v, c.max)
		}
	}
	switch {
	// An empty string flag is refused by parseFlags.
	case set["global-batch"] && strings.TrimSpace(o.GlobalBatch) == "":
		return fmt.Errorf("--global-batch %q: want a number of sequences, or N tokens (multipliers K M G Ki Mi Gi)", o.GlobalBatch)
	case force && out == "":
		return fmt.Errorf("--force overwrites the file of -o, and there is none")
	case overwrite && ckpt == "":
		return fmt.Errorf("--overwrite replaces the checkpoint of --ckpt, and there is none")
	}
	return nil
}

// writeNew writes a file that must not exist yet, unless force; a device
// or FIFO (/dev/null, a pipe) is written in place and needs no --force.
func writeNew(path string, data []byte, force bool) error {
	create := outfile.Create
	if fi, err := os.Stat(path); !force && (err != nil || fi.Mode().IsRegular()) {
		create = outfile.CreateNew // refused if a file is there at the commit
	}
	o, err := create(path, nil)
	if err != nil {
		if _, serr := os.Stat(path); serr == nil && !force {
			return fmt.Errorf("%s exists (--force overwrites it)", path)
		}
		return err
	}
	o.Write(data)
	return o.Commit()
}
