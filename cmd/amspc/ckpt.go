package main

import (
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
)

const ckptUsage = `usage: amspc ckpt COMMAND ...

commands:
  info DIR                                 what a checkpoint holds: model, step, plan, files; exit 1 if
                                           a file is missing or of the wrong size
  verify DIR                               check every file's size and SHA-256 against the manifest; exit 1
                                           naming each damaged or missing file
  export DIR -o FILE [--optimizer]         write its full tensors as one safetensors file
  export DIR --hf OUT_DIR --config config.json
                                           write its weights in Hugging Face's names and layout (sharded at
                                           5 GB), with the config the model was imported from
  import FILE --model MODEL.amsp -o DIR [--overwrite]
                                           make a checkpoint of a safetensors file's tensors (refused over a
                                           checkpoint of another model or a later step unless --overwrite)`

// runCkpt inspects and converts checkpoints (run --save writes them).
func runCkpt(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, ckptUsage)
		return exitUser
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, ckptUsage)
		return exitOK
	case "info":
		return ckptInfo(args[1:], stdout, stderr)
	case "verify":
		return ckptVerify(args[1:], stdout, stderr)
	case "export":
		return ckptExport(args[1:], stdout, stderr)
	case "import":
		return ckptImport(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "amspc ckpt: unknown command %q\n%s\n", args[0], ckptUsage)
	return exitUser
}

func ckptInfo(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ckpt info", "usage: amspc ckpt info DIR", stderr)
	dir, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	m, err := engine.ReadManifest(dir)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt info: %v\n", err)
		return exitUser
	}
	var bytes int64
	for _, f := range m.Files {
		bytes += f.Bytes
	}
	var params, elems int64
	for _, t := range m.Tensors {
		if !strings.HasSuffix(t.Name, ".adam_m") && !strings.HasSuffix(t.Name, ".adam_v") {
			params++
			n := int64(1)
			for _, d := range t.Shape {
				n *= d
			}
			elems += n
		}
	}
	fmt.Fprintf(stdout, "%s: model %s after step %d (seed %d), format version %d\n", dir, m.Model, m.Step, m.Seed, m.Version)
	if m.Plan != "" {
		fmt.Fprintf(stdout, "saved under plan %s on %d ranks\n", m.Plan, m.Ranks)
	}
	fmt.Fprintf(stdout, "%d params (%s elements), %d tensors with Adam's moments, in %d files of %s\n",
		params, commas(elems), len(m.Tensors), len(m.Files), bytesHuman(float64(bytes)))
	if m.ModelHash != "" {
		fmt.Fprintf(stdout, "model hash %s (of its params' names and shapes)\n", m.ModelHash)
	}
	// Damage seen without reading the files; their hashes are verify's.
	if damage := engine.CheckFiles(dir, m); len(damage) > 0 {
		for _, d := range damage {
			fmt.Fprintf(stderr, "amspc ckpt info: %s: %s\n", dir, d)
		}
		fmt.Fprintf(stderr, "amspc ckpt info: %s is damaged: %d of its %d files missing or of the wrong size\n", dir, len(damage), len(m.Files))
		return exitUser
	}
	fmt.Fprintf(stdout, "every file is there at its recorded size (amspc ckpt verify %s checks their SHA-256)\n", dir)
	return exitOK
}

func ckptVerify(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ckpt verify", "usage: amspc ckpt verify DIR", stderr)
	dir, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	m, damage, err := engine.VerifyCheckpoint(dir)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt verify: %v\n", err)
		return exitUser
	}
	if len(damage) > 0 {
		for _, d := range damage {
			fmt.Fprintf(stderr, "amspc ckpt verify: %s: %s\n", dir, d)
		}
		bad := map[string]bool{}
		for _, d := range damage {
			bad[d.Path] = true
		}
		fmt.Fprintf(stderr, "amspc ckpt verify: %s is damaged: %d of its %d files do not match the manifest\n", dir, len(bad), len(m.Files))
		return exitUser
	}
	var bytes int64
	for _, f := range m.Files {
		bytes += f.Bytes
	}
	fmt.Fprintf(stdout, "%s: ok: model %s after step %d, %d files (%s) match their size and SHA-256\n", dir, m.Model, m.Step, len(m.Files), bytesHuman(float64(bytes)))
	return exitOK
}

func ckptExport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ckpt export", "usage: amspc ckpt export DIR -o FILE [--optimizer] | amspc ckpt export DIR --hf OUT_DIR --config MODEL_DIR|config.json", stderr)
	out := fs.String("o", "", "write the tensors to `FILE` (safetensors)")
	optimizer := fs.Bool("optimizer", false, "also write Adam's moments (NAME.adam_m, NAME.adam_v), so that import can resume training where the checkpoint was")
	hfOut := fs.String("hf", "", "write the weights in Hugging Face's names and layout into the directory `OUT_DIR` (model.safetensors, or 5 GB shards with model.safetensors.index.json, and config.json), for transformers' from_pretrained")
	config := fs.String("config", "", "with --hf, the Hugging Face `config.json` (or its directory) the model was imported from (amspc import hf)")
	dir, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if *hfOut != "" || *config != "" {
		if *out != "" || *optimizer || *hfOut == "" || *config == "" {
			fmt.Fprintln(stderr, "amspc ckpt export: --hf OUT_DIR takes --config config.json, and neither -o nor --optimizer")
			return exitUser
		}
		return exportHF(dir, *hfOut, *config, stdout, stderr)
	}
	if err := notAnInput("-o", *out, checkpointFiles(dir)...); err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: %v\n", err)
		return exitUser
	}
	if *out == "" {
		fmt.Fprintln(stderr, "amspc ckpt export: -o FILE is required")
		return exitUser
	}
	m, err := engine.ExportCheckpoint(dir, *out, *optimizer)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: %v\n", err)
		return exitUser
	}
	what := "weights"
	if *optimizer {
		what = "weights and Adam's moments"
	}
	fmt.Fprintf(stdout, "wrote %s: model %s after step %d, %s as full fp32 tensors\n", *out, m.Model, m.Step, what)
	return exitOK
}

func ckptImport(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("ckpt import", "usage: amspc ckpt import FILE --model MODEL.amsp -o DIR [--overwrite]", stderr)
	model := fs.String("model", "", "the `MODEL.amsp` file whose params FILE holds")
	out := fs.String("o", "", "write the checkpoint into `DIR`")
	overwrite := fs.Bool("overwrite", false, "replace a checkpoint in DIR of another model, or of the step the import writes or a later one")
	file, ok := oneFile(fs, args)
	if !ok {
		return exitUser
	}
	if *model == "" || *out == "" {
		fmt.Fprintln(stderr, "amspc ckpt import: --model MODEL.amsp and -o DIR are required")
		return exitUser
	}
	var lf loadFlags
	job, err := lf.load(*model)
	if err != nil {
		return report(stderr, err)
	}
	params := paramShapes(job)
	// From the header alone: the memory the import holds, and the step
	// it writes.
	info, err := engine.InspectImport(file)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt import: %v\n", err)
		return exitUser
	}
	if avail := availableBytes(); float64(info.Bytes) > avail {
		fmt.Fprintf(stderr, "amspc ckpt import: importing %s needs about %s of memory (the file and its tensors as fp32), more than the %s available\n",
			file, cost.GiB(float64(info.Bytes)), cost.GiB(avail))
		return exitUser
	}
	release, err := engine.PrepareSave(*out, engine.NewModelID(job.Graph.Name, params), info.Step, "", *overwrite, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt import: -o: %v\n", err)
		return exitUser
	}
	defer release()
	m, err := engine.ImportWeights(file, job.Graph.Name, params, *out)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt import: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "wrote %s: model %s at step %d, %d tensors; train from it with amspc run --resume %s\n", *out, m.Model, m.Step, len(m.Tensors), *out)
	return exitOK
}

// exportHF writes the checkpoint in dir in Hugging Face's names and
// layout into out, with the config it was imported from.
func exportHF(dir, out, config string, stdout, stderr io.Writer) int {
	if fi, err := os.Stat(config); err == nil && fi.IsDir() {
		config = filepath.Join(config, "config.json")
	}
	text, err := os.ReadFile(config)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: --config: %v\n", err)
		return exitUser
	}
	res, err := hf.Convert(text, hf.Options{Source: config})
	if err != nil {
		return report(stderr, err)
	}
	job, err := frontend.Load(frontend.Source{Name: res.Model + ".amsp", Text: res.Text})
	if err != nil {
		return report(stderr, err)
	}
	m, err := engine.ReadManifest(dir)
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: %v\n", err)
		return exitUser
	}
	if id := engine.NewModelID(m.Model, paramShapes(job)); m.ModelHash != id.Hash { // the name may be --name's
		fmt.Fprintf(stderr, "amspc ckpt export: %s holds model %s, whose params are not those %s describes (another model, or other sizes)\n", dir, m.Model, config)
		return exitUser
	}
	if err := notAnInput("--hf", out, dir); err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: %v\n", err)
		return exitUser
	}
	files, err := engine.ExportForeign(dir, foreignMapping(res.Weights), out, engine.ForeignShard)
	if err == nil {
		err = outfile.Write(filepath.Join(out, "config.json"), nil, func(w io.Writer) error {
			_, err := w.Write(text)
			return err
		})
	}
	// The tokenizer's files beside the config go along, so that the
	// directory loads as a model with its tokenizer.
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model", "generation_config.json"} {
		b, rerr := os.ReadFile(filepath.Join(filepath.Dir(config), name))
		if err != nil || rerr != nil {
			continue
		}
		err = outfile.Write(filepath.Join(out, name), nil, func(w io.Writer) error {
			_, err := w.Write(b)
			return err
		})
	}
	if err != nil {
		fmt.Fprintf(stderr, "amspc ckpt export: %v\n", err)
		return exitUser
	}
	fmt.Fprintf(stdout, "wrote %s: model %s after step %d in Hugging Face's names and layout, %d weight file(s), config.json and the tokenizer's files beside it\n", out, m.Model, m.Step, len(files))
	return exitOK
}
