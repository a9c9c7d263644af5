package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"amspc/passes"
)

// runCompile runs the pass pipeline. Sharding, scheduling and code
// generation of per-rank instruction streams are not built yet, so it
// stops after the passes that exist and says so.
func runCompile(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compile", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var lf loadFlags
	lf.register(fs)
	dump := fs.String("dump-after", "", "print the IR after `PASS` (or all): "+strings.Join(passes.Names(), ", "))
	debug := fs.String("d", "", "debug flags: check (verify the IR after every pass)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: amspc compile [-dump-after=PASS|all] [-d=check] [--cluster FILE] [--train FILE] FILE")
		fs.PrintDefaults()
	}
	files, err := parseFlags(fs, args)
	if err != nil {
		return exitUser
	}
	if len(files) != 1 {
		fs.Usage()
		return exitUser
	}
	if *debug != "" && *debug != "check" {
		fmt.Fprintf(stderr, "amspc compile: unknown debug flag -d=%s (known: check)\n", *debug)
		return exitUser
	}
	job, err := lf.load(files[0])
	if err != nil {
		return report(stderr, err)
	}
	_, err = passes.Run(job, passes.Options{Check: *debug == "check", DumpAfter: *dump, Dump: stdout})
	var internal *passes.InternalError
	var user *passes.UserError
	switch {
	case errors.As(err, &internal):
		fmt.Fprintln(stderr, err)
		return exitInternal
	case errors.As(err, &user):
		fmt.Fprintln(stderr, err)
		return exitUser
	case err != nil:
		fmt.Fprintf(stderr, "%s: %v\n", files[0], err)
		return exitUser
	}
	fmt.Fprintf(stderr, "amspc compile: ran %s; sharding, scheduling and per-rank code generation are not supported yet\n",
		strings.Join(passes.Names(), ", "))
	return exitUser
}
