package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"amspc/internal/golden"
)

// TestExportGoldens: for each preset on tiny and on llama-7b, two
// tensor- and sequence-parallel plans (Megatron's distributed optimizer
// and FSDP x TP), and for the plan the planner chooses, --export
// deepspeed's JSON, --export fsdp's code, --export megatron's arguments
// and --export torchtitan's TOML match testdata/export (stdout, then
// what stderr explains), made with -update and reviewed. Plans a
// framework cannot run name the component and the nearest plan it can,
// costed.
func TestExportGoldens(t *testing.T) {
	presets := []string{"ddp", "zero1", "zero2", "zero3", "mics(4)", "hsdp(4)", "zeropp(4)", "{params=2,grads=2,optim=8}",
		"{tensor=2,sequence=true,params=1,grads=1,optim=2x2}", "{tensor=2,sequence=true,params=2x2,grads=2x2,optim=2x2}"}
	for _, model := range []string{"tiny", "llama-7b"} {
		shards := presets
		if model == "llama-7b" {
			shards = []string{"ddp", "zero1", "zero2", "zero3", "mics(8)", "hsdp(8)", "zeropp(8)", "{params=8,grads=8,optim=64}",
				"{tensor=8,sequence=true,params=1,grads=1,optim=1x128}", "{tensor=4,sequence=true,params=2x128,grads=2x128,optim=2x128}"}
		}
		for _, fw := range []string{"deepspeed", "fsdp", "megatron", "torchtitan"} {
			for _, sh := range append(shards, "") {
				args := []string{"plan", "--export", fw, "--per-group=false"}
				if !strings.Contains(sh, "tensor") {
					// Tensor-parallel plans are priced only by simulation.
					args = append(args, "--simulate=false")
				}
				name := sh
				if sh == "" {
					name = "chosen"
				} else {
					args = append(args, "--shard", sh)
				}
				args = append(args, "../../testdata/models/"+model+".amsp")
				var stdout, stderr bytes.Buffer
				if st := run(args, &stdout, &stderr); st != exitOK {
					t.Fatalf("%v: status %d: %s", args, st, stderr.String())
				}
				if fw == "deepspeed" && !strings.HasPrefix(stdout.String(), "{") {
					t.Errorf("%v: not a JSON object:\n%s", args, stdout.String())
				}
				file := strings.NewReplacer("(", "", ")", "", "{", "", "}", "", "=", "", ",", "-").Replace(name)
				ext := map[string]string{"deepspeed": "json", "fsdp": "py", "megatron": "sh", "torchtitan": "toml"}[fw]
				got := stdout.String()
				if stderr.Len() > 0 {
					got += fmt.Sprintf("\n# stderr:\n%s", stderr.String())
				}
				golden.File(t, filepath.Join("testdata", "export", model+"-"+file+"."+fw+"."+ext), got)
			}
		}
	}
}

// TestExportRefuses: an unknown framework is a usage error.
func TestExportRefuses(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if st := run([]string{"plan", "--export", "colossalai", "../../testdata/models/tiny.amsp"}, &stdout, &stderr); st != exitUser || !strings.Contains(stderr.String(), "deepspeed, fsdp, megatron or torchtitan") {
		t.Errorf("status %d, stderr %q", st, stderr.String())
	}
}
