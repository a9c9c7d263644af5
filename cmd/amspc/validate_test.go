package main

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
)

// TestValidateCommand runs the rows plan prints for tiny one step each
// and checks the result's shape: every row compiled, ran and was
// compared, and the summary agrees with the rows. (The figures
// themselves are machine-dependent; bench/ reports them.)
func TestValidateCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"validate", "--steps", "1", "--warmup", "0", "--json", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitOK {
		t.Fatalf("status %d: %s", st, stderr.String())
	}
	var sum validationSummary
	if err := json.Unmarshal(stdout.Bytes(), &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Model != "tiny" || sum.Ranks != 8 || len(sum.Rows) < 5 {
		t.Fatalf("summary %+v", sum)
	}
	seen := map[string]bool{}
	var errs []float64
	for _, r := range sum.Rows {
		key := r.Factors + " " + r.Recompute
		if seen[key] {
			t.Errorf("%s ran twice", key)
		}
		seen[key] = true
		if !(r.Predicted > 0) || !(r.Measured > 0) || math.Abs(r.Error-(r.Predicted/r.Measured-1)) > 1e-12 {
			t.Errorf("row %+v", r)
		}
		errs = append(errs, math.Abs(r.Error))
	}
	if sum.MedianAbsError != median(errs) || !(sum.Spearman >= -1 && sum.Spearman <= 1) {
		t.Errorf("median error %g (rows: %g), Spearman %g", sum.MedianAbsError, median(errs), sum.Spearman)
	}
	for i := 1; i < len(sum.Rows); i++ {
		if sum.Rows[i].Predicted < sum.Rows[i-1].Predicted {
			t.Errorf("rows not in predicted order at %d", i)
		}
	}

	stderr.Reset()
	if st := run([]string{"validate", "--plans", "best", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser ||
		!strings.Contains(stderr.String(), "want rows, all or extremes=N") {
		t.Errorf("--plans best: status %d, %s", st, stderr.String())
	}
}

// Spearman's rank correlation: ties take their mean rank.
func TestSpearman(t *testing.T) {
	for _, c := range []struct {
		x, y []float64
		want float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{10, 20, 30, 40}, 1},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1},
		{[]float64{1, 2, 3, 4, 5}, []float64{2, 1, 4, 3, 5}, 0.8},
		{[]float64{1, 1, 2}, []float64{1, 2, 3}, math.Sqrt(3) / 2},
	} {
		if got := spearman(c.x, c.y); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("spearman(%v, %v) = %g, want %g", c.x, c.y, got, c.want)
		}
	}
	if got := ranks([]float64{3, 1, 3, 2}); got[0] != 3.5 || got[1] != 1 || got[2] != 3.5 || got[3] != 2 {
		t.Errorf("ranks %v", got)
	}
}
