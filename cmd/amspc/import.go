package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"amspc/frontend"
	"amspc/importer/hf"
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
	if len(files) != 2 || files[0] != "hf" {
		if len(files) > 0 && files[0] != "hf" {
			fmt.Fprintf(stderr, "amspc import: unknown source %q (known: hf, a Hugging Face config.json)\n", files[0])
		}
		fs.Usage()
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

// writeNew writes a file that must not exist yet, unless force.
func writeNew(path string, data []byte, force bool) error {
	flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	if !force {
		flags |= os.O_EXCL
	}
	f, err := os.OpenFile(path, flags, 0o644)
	if errors.Is(err, os.ErrExist) {
		return fmt.Errorf("%s exists (--force overwrites it)", path)
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
