package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"amspc/tokenizer"
)

// TestTokenize: --ids prints each file's ids as gpt-tokenizer encodes
// it (a case of testdata/tokenizers/gpt2), with --bos and --eos around
// it; -o writes a token file of every file's ids in order, which run's
// data reader reads back with the tokenizer's hash checked.
func TestTokenize(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt")
	os.WriteFile(a, []byte("Hello, World! How are you today?"), 0o644)
	os.WriteFile(b, []byte("hello"), 0o644)
	var stdout, stderr bytes.Buffer
	if st := run([]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--ids", "--eos", a, b}, &stdout, &stderr); st != exitOK {
		t.Fatalf("exit %d: %s", st, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	want := [][]int32{{15496, 11, 2159, 0, 1374, 389, 345, 1909, 30, 50256}, {31373, 50256}}
	if len(lines) != 2 {
		t.Fatalf("%d lines:\n%s", len(lines), stdout.String())
	}
	var all []int32
	for i, l := range lines {
		var ids []int32
		if err := json.Unmarshal([]byte(l), &ids); err != nil || !slices.Equal(ids, want[i]) {
			t.Errorf("line %d: %s, want %v (%v)", i, l, want[i], err)
		}
		all = append(all, want[i]...)
	}
	out := filepath.Join(dir, "t.tokens")
	stdout.Reset()
	if st := run([]string{"tokenize", "--tokenizer", gpt2Tokenizer, "--eos", "-o", out, a, b}, &stdout, &stderr); st != exitOK {
		t.Fatalf("exit %d: %s", st, stderr.String())
	}
	tk, err := loadTokenizer(gpt2Tokenizer)
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := loadTokensWith(out, "", tk)
	if err != nil || !slices.Equal(got, all) {
		t.Errorf("the token file reads back as %v (%v), want %v", got, err, all)
	}
	data, _ := os.ReadFile(out)
	if !tokenizer.IsFile(data) {
		t.Errorf("%s has no token file header", out)
	}
	other, _ := tokenizer.EncodeFile(all, tk.VocabSize(), strings.Repeat("00", 32))
	os.WriteFile(out, other, 0o644)
	if _, _, err := loadTokensWith(out, "", tk); err == nil || !strings.Contains(err.Error(), "another tokenizer") {
		t.Errorf("a token file of another tokenizer: %v", err)
	}
}
