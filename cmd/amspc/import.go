package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"amspc/frontend"
	"amspc/importer/hf"
	"amspc/internal/outfile"
)

const importUsage = "usage: amspc import hf [-o FILE] [--force] [--name NAME] [--nodes N] [--gpus-per-node N] [--gpu PRESET]\n" +
	"                       [--seq N] [--micro-batch N] [--global-batch N|'N tokens'] [--precision bf16|fp16|fp32] config.json"

// runImport writes the .amsp job of a model published elsewhere: today a
// Hugging Face config.json (package importer/hf says what it maps, what it
// refuses and why).
func runImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("import", importUsage, stderr)
	out := fs.String("o", "", "write the job to `FILE` (default: standard output)")
	force := fs.Bool("force", false, "let -o overwrite an existing file")
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
	if err := checkImportFlags(fs, o, *out, *force); err != nil {
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
	if err := notAnInput("-o", *out, files[1]); err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	config, err := os.ReadFile(files[1])
	if err != nil {
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
	}
	o.Source, o.Output = files[1], *out
	res, err := hf.Convert(config, o)
	var list frontend.ErrorList
	switch {
	case errors.As(err, &list):
		return report(stderr, err) // config.json:line:col: ...
	case err != nil:
		fmt.Fprintf(stderr, "amspc import: %v\n", err)
		return exitUser
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
	fmt.Fprintf(stdout, "%s: wrote %s: model %s, %s parameters\n", files[1], *out, res.Model, commas(res.Params))
	return exitOK
}

// checkImportFlags refuses what the importer would otherwise read as
// "unset" and replace by its default: a count of 0 or an empty string
// given on the command line. It also refuses --force without -o, which
// would be dropped. The importer checks the rest (negative counts, a GPU
// that is not a preset, a global batch that does not split); this
// repeats its limits so that an explicit 0 reads as the same error.
func checkImportFlags(fs *flag.FlagSet, o hf.Options, out string, force bool) error {
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
