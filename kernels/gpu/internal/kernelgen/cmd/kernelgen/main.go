// Command kernelgen writes kernels/gpu's generated files from ops.cu and
// mma.cu (package kernelgen says what and how). go generate runs it in
// kernels/gpu (gpu.go's go:generate line); -dir names another directory.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"amspc/kernels/gpu/internal/kernelgen"
)

func main() {
	dir := flag.String("dir", ".", "kernels/gpu's directory")
	flag.Parse()
	if err := run(*dir); err != nil {
		fmt.Fprintln(os.Stderr, "kernelgen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	read := func(name string) (kernelgen.Source, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		return kernelgen.Source{Name: name, Text: string(b)}, err
	}
	ops, err := read("ops.cu")
	if err != nil {
		return err
	}
	mma, err := read("mma.cu")
	if err != nil {
		return err
	}
	files, err := kernelgen.Generate(ops, mma)
	if err != nil {
		return err
	}
	for _, f := range files {
		path := filepath.Join(dir, filepath.FromSlash(f.Path))
		// An unchanged file keeps its time stamp, so builds that watch it
		// do not redo work.
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.Data) {
			continue
		}
		if err := os.WriteFile(path, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
