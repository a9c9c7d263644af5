package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"amspc/engine"
	"amspc/internal/outfile"
)

// besideOutput is where a command says what it wrote to out: standard
// output, unless out is standard output itself ("-"), whose contents a
// message must not cut into.
func besideOutput(out string, stdout, stderr io.Writer) io.Writer {
	if out == outfile.Stdout {
		return stderr
	}
	return stdout
}

// notAnInput refuses an output path that names one of the command's
// input files (links and other names of it included): `report -o
// model.amsp model.amsp` would replace the model with a page, `ckpt export
// DIR -o DIR/manifest.json` the checkpoint's manifest. flag names the
// output's flag; empty inputs and "-" are skipped.
func notAnInput(flag, out string, inputs ...string) error {
	if out == "" || out == outfile.Stdout {
		return nil
	}
	fo, err := os.Stat(out)
	if err != nil {
		return nil // a new file replaces nothing
	}
	for _, in := range inputs {
		if in == "" || in == "-" {
			continue
		}
		if fi, err := os.Stat(in); err == nil && os.SameFile(fi, fo) {
			return fmt.Errorf("%s %s is the input %s: writing it would replace it", flag, out, in)
		}
	}
	return nil
}

// checkpointFiles lists what a checkpoint directory's readers read: its
// manifest and the files it names (none when it cannot be read; export
// then reports why).
func checkpointFiles(dir string) []string {
	out := []string{filepath.Join(dir, engine.ManifestName)}
	if m, err := engine.ReadManifest(dir); err == nil {
		for _, f := range m.Files {
			out = append(out, filepath.Join(dir, filepath.FromSlash(f.Path)))
		}
	}
	return out
}
