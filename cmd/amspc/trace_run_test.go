package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"amspc/ir"
	"amspc/simulator"
)

// traceFile is a trace as amspc trace and amspc run --trace write it.
type traceFile struct {
	OtherData   map[string]string `json:"otherData"`
	TraceEvents []struct {
		Ph   string  `json:"ph"`
		Name string  `json:"name"`
		Cat  string  `json:"cat"`
		Pid  int     `json:"pid"`
		Tid  int     `json:"tid"`
		Ts   float64 `json:"ts"`
		Dur  float64 `json:"dur"`
		Args struct {
			Name  string `json:"name"`
			Stage string `json:"stage"`
			Index int    `json:"index"`
			Step  int    `json:"step"`
			Event *int   `json:"event"`
		} `json:"args"`
	} `json:"traceEvents"`
}

func readTrace(t *testing.T, path string) *traceFile {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tf traceFile
	if err := json.Unmarshal(b, &tf); err != nil {
		t.Fatalf("%s is not JSON: %v", path, err)
	}
	return &tf
}

// TestRunTrace: run --trace on tiny's local ranks writes a JSON trace
// with every rank and stream of the plan named as amspc trace names them;
// the steps traced (the steady state's first, --trace-steps of them) and
// no others; on every rank and stream, each kernel of the program once a
// step under its kernel's name; the events of amspc trace's plan (its
// kernels and collectives: name, category, stage, index) each once a
// step; and no wait ending before its event's record began.
func TestRunTrace(t *testing.T) {
	dir := t.TempDir()
	plan := filepath.Join(dir, "plan")
	var stdout, stderr bytes.Buffer
	if st := run([]string{"compile", "-o", plan, tinyModel}, &stdout, &stderr); st != exitOK {
		t.Fatalf("compile: status %d: %s", st, stderr.String())
	}
	planned := filepath.Join(dir, "planned.json")
	if st := run([]string{"trace", "-o", planned, plan}, &stdout, &stderr); st != exitOK {
		t.Fatalf("trace: status %d: %s", st, stderr.String())
	}
	b, err := readBundle(plan)
	if err != nil {
		t.Fatal(err)
	}
	pt := readTrace(t, planned)
	for _, c := range []struct {
		args        []string
		first, last int
	}{
		{[]string{"--steps", "2"}, 2, 2},
		{[]string{"--steps", "3", "--trace-steps", "2"}, 2, 3},
		{[]string{"--steps", "1", "--trace-steps", "5"}, 1, 1},
	} {
		measured := filepath.Join(dir, "measured.json")
		stdout.Reset()
		stderr.Reset()
		if st := run(append([]string{"run", plan, "--trace", measured}, c.args...), &stdout, &stderr); st != exitOK {
			t.Fatalf("%v: status %d: %s", c.args, st, stderr.String())
		}
		if !regexp.MustCompile(`(?m)^wrote .*measured.json: steps? \d`).MatchString(stdout.String()) {
			t.Errorf("%v: no wrote line:\n%s", c.args, stdout.String())
		}
		tf := readTrace(t, measured)
		steps := c.last - c.first + 1
		// The names of processes (tid -1) and threads.
		named := map[[2]int]string{}
		type key struct{ rank, stream, step int }
		kernels := map[key]int{}
		// An event's record: its start, by rank, step and event.
		recorded := map[[3]int]float64{}
		// Every event of the plan's trace, and how often it ran.
		type ev struct {
			pid, tid, index  int
			name, cat, stage string
		}
		ran := map[ev]int{}
		for _, e := range tf.TraceEvents {
			switch e.Ph {
			case "M":
				tid := e.Tid
				if e.Name == "process_name" {
					tid = -1
				}
				named[[2]int{e.Pid, tid}] = e.Args.Name
				continue
			case "X":
			default:
				t.Fatalf("%v: event of phase %q", c.args, e.Ph)
			}
			if e.Args.Step < c.first || e.Args.Step > c.last || e.Dur < 0 {
				t.Fatalf("%v: %s of step %d (%v us), tracing steps %d to %d", c.args, e.Name, e.Args.Step, e.Dur, c.first, c.last)
			}
			p := b.Template(e.Pid)
			in := &p.Streams[e.Tid][e.Args.Index]
			if e.Cat != ir.StreamName(e.Tid) || e.Name != simulator.SpanName(p, in) {
				t.Errorf("%v: rank %d %s %d is %s %q, want %s %q", c.args, e.Pid, ir.StreamName(e.Tid), e.Args.Index, e.Cat, e.Name, ir.StreamName(e.Tid), simulator.SpanName(p, in))
			}
			ran[ev{e.Pid, e.Tid, e.Args.Index, e.Name, e.Cat, e.Args.Stage}]++
			switch in.Op {
			case ir.Kernel:
				kernels[key{e.Pid, e.Tid, e.Args.Step}]++
			case ir.Record:
				recorded[[3]int{e.Pid, e.Args.Step, int(in.Event)}] = e.Ts
			}
		}
		for r := 0; r < b.Topo.Ranks(); r++ {
			if named[[2]int{r, -1}] != fmt.Sprintf("rank %d", r) {
				t.Errorf("%v: rank %d's process is named %q", c.args, r, named[[2]int{r, -1}])
			}
			p := b.Template(r)
			for s, ins := range p.Streams {
				if named[[2]int{r, s}] != ir.StreamName(s) {
					t.Errorf("%v: rank %d's thread %d is named %q, want %s", c.args, r, s, named[[2]int{r, s}], ir.StreamName(s))
				}
				want := 0
				for _, in := range ins {
					if in.Op == ir.Kernel {
						want++
					}
				}
				for step := c.first; step <= c.last; step++ {
					if got := kernels[key{r, s, step}]; got != want {
						t.Errorf("%v: rank %d %s step %d: %d kernel events, the program has %d kernels there", c.args, r, ir.StreamName(s), step, got, want)
					}
				}
			}
		}
		for _, e := range pt.TraceEvents {
			if e.Ph != "X" {
				continue
			}
			if n := ran[ev{e.Pid, e.Tid, e.Args.Index, e.Name, e.Cat, e.Args.Stage}]; n != steps {
				t.Errorf("%v: the plan's %s (rank %d %s %d, %s) ran %d times in %d steps", c.args, e.Name, e.Pid, e.Cat, e.Args.Index, e.Args.Stage, n, steps)
			}
		}
		for _, e := range tf.TraceEvents {
			if e.Ph != "X" || e.Args.Event == nil || b.Template(e.Pid).Streams[e.Tid][e.Args.Index].Op != ir.Wait {
				continue
			}
			rec, ok := recorded[[3]int{e.Pid, e.Args.Step, *e.Args.Event}]
			if !ok || e.Ts+e.Dur < rec {
				t.Errorf("%v: rank %d step %d: wait e%d ends at %.3f us, before its record began (%.3f, traced %v)", c.args, e.Pid, e.Args.Step, *e.Args.Event, e.Ts+e.Dur, rec, ok)
			}
		}
	}
}

// TestRunTraceFlags: --trace's and --trace-steps's mistakes are refused
// before training, naming the flag, and nothing is written.
func TestRunTraceFlags(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "trace.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--trace-steps", "2"}, `^amspc run: --trace-steps needs --trace FILE$`},
		{[]string{"--trace", out, "--trace-steps", "0"}, `^amspc run: --trace-steps 0: want 1 or more$`},
		{[]string{"--trace", out, "--trace-steps", "x"}, `invalid value "x" for flag -trace-steps`},
		{[]string{"--trace", "-"}, `^amspc run: --trace -: standard output shows the run's progress; name a file$`},
		{[]string{"--trace", ""}, `^amspc run: --trace "": the flag needs a value$`},
		{[]string{"--trace", tinyModel}, `^amspc run: --trace .*tiny.amsp is the input`},
		{[]string{"--trace", out, "--log", out}, `^amspc run: --trace and --log both name `},
		{[]string{"--trace", out, "--cpuprofile", out}, `^amspc run: --trace and --cpuprofile both name `},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"run", "--steps", "1", tinyModel}, c.args...)
		if st := run(args, &stdout, &stderr); st != exitUser || !regexp.MustCompile(`(?m)`+c.want).MatchString(stderr.String()) {
			t.Errorf("%v: status %d, stderr %q, want %s", c.args, st, stderr.String(), c.want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%v: wrote %s", c.args, out)
		}
	}
}

// TestRunTraceStandIn: run --collectives standin --trace on the
// simulated GPU writes the stand-in run's trace in the device's own
// times: rank 0 alone, its kernels on the compute stream and its
// gathers and reductions (the stand-ins) on the comm streams, and it
// prints the exposed communication measured and simulated.
func TestRunTraceStandIn(t *testing.T) {
	out := filepath.Join(t.TempDir(), "trace.json")
	var stdout, stderr bytes.Buffer
	args := []string{"run", "--device", "sim", "--collectives", "standin", "--steps", "3", "--shard", "zero3", "--trace", out, tinyModel}
	if st := run(args, &stdout, &stderr); st != exitOK {
		t.Fatalf("%v: status %d\n%s%s", args, st, stdout.String(), stderr.String())
	}
	if !regexp.MustCompile(`(?m)^exposed communication: .* measured, .* simulated`).MatchString(stdout.String()) {
		t.Errorf("no exposed communication in:\n%s", stdout.String())
	}
	tf := readTrace(t, out)
	if !regexp.MustCompile(`device's timestamps`).MatchString(tf.OtherData["clock"]) {
		t.Errorf("clock %q", tf.OtherData["clock"])
	}
	per := map[string]int{}
	for _, e := range tf.TraceEvents {
		if e.Ph != "X" {
			continue
		}
		if e.Pid != 0 {
			t.Fatalf("an event of rank %d", e.Pid)
		}
		per[e.Cat]++
	}
	for _, cat := range []string{"compute", "comm.gather", "comm.reduce"} {
		if per[cat] == 0 {
			t.Errorf("no %s events: %v", cat, per)
		}
	}
}
