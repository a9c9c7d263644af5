package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"amspc/cost/profile"
	"amspc/ir"
)

// TestProfileCommand profiles the tiny model with one sample and two
// sizes, reads the profile back and plans with it. With --overhead it fits the overhead
// to steps of ZeRO-3 and DDP and says how close their simulated steps
// come; the profile holds what it printed. (How well the fit predicts
// other plans is validate's to measure: bench/validation.md.)
func TestProfileCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "tiny.profile.csv")
	model := "../../testdata/models/tiny.amsp"
	var stdout, stderr bytes.Buffer
	if st := run([]string{"profile", "--reps", "1", "--max-bytes", "16384", "--overhead", "-o", out, model}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	if !strings.Contains(stdout.String(), "wrote "+out) {
		t.Errorf("summary:\n%s", stdout.String())
	}
	p, err := profile.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	// 2 x 4 ranks: group shapes 2x1 4x1 1x2 2x2 4x2; sizes 4K and 16K;
	// four kinds and the shared all-gather.
	if n := len(p.Collectives); n != 5*5*2 {
		t.Errorf("%d collective rows, want 50", n)
	}
	if _, ok := p.SharedBandwidth(ir.Factor{S0: 4, S1: 2}, 1<<20); !ok {
		t.Error("no shared all_gather over 4x2")
	}
	if got := p.MetaValue("ranks"); !strings.HasPrefix(got, "8 (2 nodes x 4 per node)") {
		t.Errorf("ranks metadata %q", got)
	}
	kinds := map[ir.OpKind]bool{}
	for _, k := range p.Kernels {
		kinds[k.Op] = true
	}
	for _, k := range []ir.OpKind{ir.MatMul, ir.MatMulGradB, ir.Attention, ir.AttentionGrad, ir.AdamWStep, ir.Embed, ir.CrossEntropyGrad} {
		if !kinds[k] {
			t.Errorf("no %v kernel measured", k)
		}
	}
	// Every kernel of the step has its exact row.
	if s, ok := p.KernelTime(ir.MatMul, [][]int64{{2, 64, 64}, {64, 172}}, 2*2*64*64*172); !ok || !(s > 0) {
		t.Errorf("tiny's w1 matmul: %v %v", s, ok)
	}
	if _, ok := p.Bandwidth(ir.AllGather, ir.Factor{S0: 4, S1: 2}, 1<<20); !ok {
		t.Error("no all_gather over 4x2")
	}
	if fits := regexp.MustCompile(`(?m)^    (ZeRO-3|DDP): measured .*, simulated .* \([-+][0-9.]+%\)$`).FindAllString(stdout.String(), -1); len(fits) != 2 {
		t.Errorf("no fitted overhead in the summary:\n%s", stdout.String())
	}
	if want := fmt.Sprintf("  overhead: kernels x %.3g, %s per collective,", p.Overhead.KernelScale, dur(p.Overhead.Collective)); !strings.Contains(stdout.String(), want) {
		t.Errorf("the profile's overhead %+v is not the one printed:\n%s", p.Overhead, stdout.String())
	}
	stdout.Reset()
	stderr.Reset()
	if st := run([]string{"plan", "--per-group=false", "--top", "1", "--profile", out, model}, &stdout, &stderr); st != exitOK {
		t.Fatalf("plan --profile: status %d: %s", st, stderr.String())
	}
}

func TestGroupShapes(t *testing.T) {
	var got []string
	for _, f := range groupShapes(4, 2) {
		got = append(got, f.String())
	}
	if s := strings.Join(got, " "); s != "2x1 4x1 1x2 2x2 4x2" {
		t.Errorf("group shapes of 2 x 4: %s", s)
	}
}
