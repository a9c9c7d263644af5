package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestJSONKeysSnakeCase: every key of every JSON document the commands
// print or write (check, plan, the sweep, validate, a checkpoint's
// manifest, run's log) is snake_case, so none can regress to a Go field
// name.
func TestJSONKeysSnakeCase(t *testing.T) {
	dir := t.TempDir()
	ckpt, log := filepath.Join(dir, "ckpt"), filepath.Join(dir, "log.jsonl")
	tiny := "../../testdata/models/tiny.amsp"
	outputs := map[string]func() []byte{}
	for _, args := range [][]string{
		{"check", "--json", tiny},
		{"check", "--json", "../../testdata/models/llama-7b.amsp"},
		{"plan", "--json", tiny},
		{"plan", "--json", "--sweep", "nodes=1,2", tiny},
		{"validate", "--json", "--steps", "1", "--warmup", "0", tiny},
	} {
		outputs[args[0]+" "+args[len(args)-1]+" "+args[1]+" "+args[2]] = func() []byte {
			var stdout, stderr bytes.Buffer
			if st := run(args, &stdout, &stderr); st != 0 {
				t.Fatalf("%v: status %d: %s", args, st, stderr.String())
			}
			return stdout.Bytes()
		}
	}
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if !snake.MatchString(k) {
					t.Errorf("%s: key %q is not snake_case", where, k)
				}
				walk(where, x)
			}
		case []any:
			for _, x := range v {
				walk(where, x)
			}
		}
	}
	for name, out := range outputs {
		var v any
		if err := json.Unmarshal(out(), &v); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		walk(name, v)
	}
	var stdout, stderr bytes.Buffer
	if st := run([]string{"run", tiny, "--steps", "1", "--save", ckpt, "--log", log}, &stdout, &stderr); st != 0 {
		t.Fatalf("run: status %d: %s", st, stderr.String())
	}
	for _, f := range []string{filepath.Join(ckpt, "manifest.json"), log} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		for dec.More() {
			var v any
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			walk(f, v)
		}
	}
}
