// Command amspc compiles LLM training jobs written in the .amsp language
// into sharded per-rank schedules (AMSP, arXiv 2311.00257).
//
// Usage:
//
//	amspc check [--json] [--cluster FILE] [--train FILE] [--dp N] FILE...
//	amspc plan [--objective step|paper] [--json] [--wide] [--top K] [--shard PLAN] FILE
//	amspc plan --sweep nodes=1,2,4,... [--sweep-batch per-gpu|fixed] [--json] FILE
//	amspc compile [-o DIR] [--shard PLAN] [-dump-after=PASS|all] [-d=check,PASS/off] FILE
//	amspc disasm [--rank N,...] PLAN
//	amspc trace [-o trace.json] [--profile FILE] PLAN
//	amspc run [--steps N] [--data PATH] [--log FILE] [--profile FILE] [--save DIR] FILE|PLAN   (mpirun -n N with -tags mpi)
//	amspc profile [-o profile.csv] [--reps N] [--shard PLAN] FILE
//	amspc validate [--plans rows|all|extremes=N] [--steps N] [--profile FILE] FILE
//	amspc import hf [-o FILE] [--force] [--name NAME] [--nodes N] [--gpus-per-node N] [--gpu PRESET] [--seq N] [--micro-batch N] [--global-batch N] [--precision P] config.json
//	amspc grammar
//	amspc completion bash|zsh
//	amspc version
//
// plan, compile and run take --profile FILE, a profile written by amspc
// profile, in place of the cluster section's profile.
//
// User errors print as file:line:col: message and exit 1; compiler bugs
// print "internal compiler error" and exit 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"amspc/frontend"
	"amspc/internal/outfile"
	"amspc/ir"
)

const version = "0.1.0"

func main() {
	collectLess(os.Args[1:])
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// collectLess lets the commands that search and compile run without
// the garbage collector until their heap reaches 1 GiB, and at GOGC=400
// after that, unless the environment sets GOGC or GOMEMLIMIT: they
// compile a program per simulated candidate and keep little of each (a
// LLaMA-2-70B search allocates under 1 GB in all, and the collector
// took a fifth of it on two cores; a compile with the plan given, a
// sixth). cmd/compile starts its heap large for the same reason. The
// commands that train keep Go's default: their heap is the model's
// tensors.
func collectLess(args []string) {
	if len(args) == 0 || os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	switch args[0] {
	case "plan", "compile", "trace", "report":
	default:
		return
	}
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(1 << 30)
	// The first collection is the heap reaching the limit; the sentinel
	// is unreachable from the start, so its finalizer runs after it.
	sentinel := &struct{ p *int }{}
	runtime.SetFinalizer(sentinel, func(*struct{ p *int }) {
		debug.SetGCPercent(400)
		debug.SetMemoryLimit(math.MaxInt64)
	})
}

// Exit statuses.
const (
	exitOK       = 0
	exitUser     = 1 // bad input or usage
	exitInternal = 2 // a compiler bug
)

type command struct {
	name    string
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands []command

func init() {
	commands = []command{
		{"check", "parse, lower and verify .amsp files; summarise model, cluster and training", runCheck},
		{"plan", "choose sharding factors and compare them with DDP, ZeRO, FSDP, MiCS, ZeRO++", runPlan},
		{"compile", "compile a training step into a plan bundle of per-rank instruction streams", runCompile},
		{"disasm", "print ranks' instruction streams from a plan bundle", runDisasm},
		{"trace", "write a plan's predicted timeline as a Chrome/Perfetto trace", runTrace},
		{"report", "write a plan comparison as one self-contained HTML page of charts", runReport},
		{"run", "compile and train a job on CPU ranks, printing the loss of every step", runRun},
		{"ckpt", "inspect checkpoints; export them as one safetensors file or as Hugging Face weights, import one", runCkpt},
		{"sample", "generate text from a checkpoint on the CPU (a KV cache; deterministic with a seed)", runSample},
		{"profile", "measure kernels and collectives on the local ranks; write the profile plan reads", runProfile},
		{"validate", "train plans a few steps on the local ranks and compare measured with predicted step times", runValidate},
		{"tokenize", "encode text files with a Hugging Face tokenizer.json into a token file run reads (or print the ids)", runTokenize},
		{"import", "write the .amsp job of a Hugging Face model (LLaMA, Mistral, Qwen2, Gemma) and import its weights", runImport},
		{"grammar", "print the language's grammar (EBNF)", runGrammar},
		{"completion", "print a bash or zsh completion script", runCompletion},
		{"version", "print amspc's version", func(args []string, stdout, stderr io.Writer) int {
			if len(args) > 0 {
				fmt.Fprintln(stderr, "usage: amspc version")
				return exitUser
			}
			fmt.Fprintln(stdout, "amspc", version)
			return exitOK
		}},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: amspc COMMAND [flags] [files]")
	fmt.Fprintln(w, "\ncommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w, "\nrun 'amspc COMMAND -h' for a command's flags")
}

func run(args []string, stdout, stderr io.Writer) (status int) {
	// A panic is a compiler bug; say so instead of printing a Go trace as
	// if the user had done something wrong.
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "internal compiler error: %v\n", r)
			status = exitInternal
		}
	}()
	if len(args) == 0 {
		usage(stderr)
		return exitUser
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) == 1 {
			out := &outfile.Checked{W: stdout}
			usage(out)
			if err := out.Err(); err != nil {
				fmt.Fprintf(stderr, "amspc: writing standard output: %v\n", err)
				return exitUser
			}
			return exitOK
		}
		args = []string{args[1], "-h"} // amspc help CMD
	case "--version", "-version":
		args[0] = "version"
	}
	for _, c := range commands {
		if c.name == args[0] {
			if helpAsked(args[1:]) {
				// CMD -h: its usage line and every flag, on standard
				// output; asking is not an error.
				out := &outfile.Checked{W: stdout}
				c.run(args[1:], out, out)
				if err := out.Err(); err != nil {
					fmt.Fprintf(stderr, "amspc %s: writing standard output: %v\n", c.name, err)
					return exitUser
				}
				return exitOK
			}
			return runChecked(c, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "amspc: unknown command %q\n", args[0])
	usage(stderr)
	return exitUser
}

// runChecked runs a command with its standard output checked: a command
// whose output could not be written (a full disk, a closed pipe's error)
// fails, saying so, instead of exiting 0 with an empty or cut output.
func runChecked(c command, args []string, stdout, stderr io.Writer) int {
	out := &outfile.Checked{W: stdout}
	status := c.run(args, out, stderr)
	if err := out.Err(); err != nil {
		fmt.Fprintf(stderr, "amspc %s: writing standard output: %v\n", c.name, err)
		return max(status, exitUser)
	}
	return status
}

// helpAsked reports whether a command line asks for the command's help:
// -h, -help or --help after only positional arguments (a subcommand, a
// file), so that a bad flag before it is still reported as one.
func helpAsked(args []string) bool {
	for _, a := range args {
		switch {
		case a == "-h" || a == "-help" || a == "--help":
			return true
		case a == "--" || strings.HasPrefix(a, "-"):
			return false
		}
	}
	return false
}

// newFlagSet makes a command's flag set: errors and usage go to stderr,
// and -h prints the usage line and the flags.
func newFlagSet(name, usage string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// oneFile parses a command line that names exactly one file.
func oneFile(fs *flag.FlagSet, args []string) (string, bool) {
	files, err := parseFlags(fs, args)
	if err != nil {
		return "", false
	}
	if len(files) != 1 {
		fs.Usage()
		return "", false
	}
	return files[0], true
}

// parseFlags parses flags that may come before, between or after the
// positional arguments (`amspc check model.amsp --json`).
func parseFlags(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			break
		}
		if args[0] == "--" {
			pos = append(pos, args[1:]...)
			break
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
	// A string flag given as "" (--log "", an unset shell variable) would
	// silently mean its default: say so instead.
	var err error
	fs.Visit(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok && err == nil {
			if v, ok := g.Get().(string); ok && v == "" {
				dash := "--"
				if len(f.Name) == 1 {
					dash = "-"
				}
				err = fmt.Errorf("amspc %s: %s%s \"\": the flag needs a value", fs.Name(), dash, f.Name)
			}
		}
	})
	if err != nil {
		fmt.Fprintln(fs.Output(), err)
		return nil, err
	}
	return pos, nil
}

// report prints an error from loading or compiling and returns the exit
// status it calls for.
func report(stderr io.Writer, err error) int {
	var internal *ir.InternalError
	if errors.As(err, &internal) {
		fmt.Fprintln(stderr, err)
		return exitInternal
	}
	var list frontend.ErrorList
	if errors.As(err, &list) {
		fmt.Fprintln(stderr, list.Error())
		return exitUser
	}
	fmt.Fprintf(stderr, "amspc: %v\n", err)
	return exitUser
}

func runGrammar(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "usage: amspc grammar")
		return exitUser
	}
	fmt.Fprintln(stdout, frontend.Grammar())
	return exitOK
}
