package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPlanFlagValues: check, plan and report refuse a flag value with no
// meaning, and a flag another would drop unsaid, in one line naming the
// flag and its value, with status 1 and before planning.
func TestPlanFlagValues(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	html := filepath.Join(t.TempDir(), "r.html")
	for _, c := range []struct {
		args []string
		want string // a regexp on stderr's one line
	}{
		{[]string{"check", "--dp", "-8", tiny}, `^amspc check: --dp -8 is out of range \(1 to \d+\)$`},
		{[]string{"check", "--dp", "0", tiny}, `^amspc check: --dp 0 is out of range`},
		{[]string{"check", "--dp", "16", tiny}, `: --dp 16 is more than the cluster's 8 GPUs$`},
		{[]string{"check", "--dp", "3", tiny}, `global batch of 32 sequences .* 3 data-parallel ranks`},
		{[]string{"plan", "--top", "0", tiny}, `^amspc plan: --top 0 is out of range \(1 to 1000\)$`},
		{[]string{"plan", "--top", "-3", tiny}, `^amspc plan: --top -3 is out of range`},
		{[]string{"plan", "--top", "1000000", tiny}, `^amspc plan: --top 1000000 is out of range`},
		{[]string{"plan", "--bucket", "0", tiny}, `^amspc plan: --bucket 0 is out of range \(1 byte to 1 TiB\)$`},
		{[]string{"plan", "--bucket", "-4096", tiny}, `^amspc plan: --bucket -4096 is out of range`},
		{[]string{"plan", "--bucket", "1099511627777", tiny}, `^amspc plan: --bucket 1099511627777 is out of range`},
		{[]string{"plan", "--objective", "fast", tiny}, `--objective must be step or paper, not "fast"`},
		{[]string{"plan", "--export", "colossalai", tiny}, `^amspc plan: --export must be deepspeed, fsdp, megatron or torchtitan, not "colossalai"$`},
		{[]string{"plan", "--export", "deepspeed", "--sweep", "nodes=1,2", tiny}, `^amspc plan: --export deepspeed .*--sweep`},
		{[]string{"plan", "--export", "fsdp", "--json", tiny}, `^amspc plan: --export fsdp .*--json`},
		{[]string{"plan", "--export", "fsdp", "--wide", tiny}, `^amspc plan: --export fsdp .*--wide`},
		{[]string{"plan", "--sweep-batch", "fixed", tiny}, `^amspc plan: --sweep-batch fixed needs --sweep$`},
		{[]string{"plan", "--sweep-batch", "some", "--sweep", "nodes=1,2", tiny}, `^amspc plan: --sweep-batch must be per-gpu or fixed, not "some"$`},
		{[]string{"plan", "--sweep", "nodes=1,2", "--wide", tiny}, `^amspc plan: --wide has no effect with --sweep`},
		{[]string{"plan", "--sweep", "nodes=1,2", "--top", "2", tiny}, `^amspc plan: --top has no effect with --sweep`},
		{[]string{"plan", "--sweep", "nodes=1,2", "--shard", "zero3", tiny}, `^amspc plan: --shard has no effect with --sweep`},
		{[]string{"plan", "--sweep", "nodes=0", tiny}, `^amspc plan: --sweep nodes=0: 0 nodes is not a cluster$`},
		{[]string{"plan", "--sweep", "nodes=1,,2", tiny}, `^amspc plan: --sweep nodes=1,,2: "" is not a whole number$`},
		{[]string{"plan", "--sweep", "nodes=2,2", tiny}, `^amspc plan: --sweep nodes=2,2: 2 nodes is listed twice$`},
		{[]string{"plan", "--sweep", "racks=2", tiny}, `^amspc plan: --sweep racks=2: want nodes=N,N or gpus=N,N \(a list of sizes\)$`},
		{[]string{"plan", "--objective", "paper", "--simulate", tiny}, `^amspc plan: --simulate applies to --objective step only`},
		{[]string{"plan", "--objective", "paper", "--per-group=true", tiny}, `^amspc plan: --per-group applies to --objective step only`},
		{[]string{"report", "--top", "0", "-o", html, tiny}, `^amspc report: --top 0 is out of range`},
		{[]string{"report", "--bucket", "-1", "-o", html, tiny}, `^amspc report: --bucket -1 is out of range`},
		{[]string{"report", "--sweep-batch", "fixed", "-o", html, tiny}, `^amspc report: --sweep-batch fixed needs --sweep$`},
		{[]string{"report", "--sweep", "gpus=6", "-o", html, tiny}, `^amspc report: --sweep gpus=6: 6 GPUs is not a whole number of 4-GPU nodes$`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			st := run(c.args, &stdout, &stderr)
			msg := strings.TrimSuffix(stderr.String(), "\n")
			if st != exitUser || strings.Contains(msg, "\n") || !regexp.MustCompile(c.want).MatchString(msg) || stdout.Len() > 0 {
				t.Errorf("status %d, stdout %d bytes, stderr %q; want status 1 and one line matching %q", st, stdout.Len(), stderr.String(), c.want)
			}
		})
	}
	// What the checks allow still runs.
	for _, args := range [][]string{
		{"plan", "--objective", "paper", "--per-group=false", "--top", "1", tiny},
		{"check", "--dp", "4", tiny},
	} {
		var stdout, stderr bytes.Buffer
		if st := run(args, &stdout, &stderr); st != exitOK {
			t.Errorf("%q: status %d: %s", args, st, stderr.String())
		}
	}
}
