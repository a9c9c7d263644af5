package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A file given with --train or --cluster must hold that section: one
// without it is refused with a sentence naming the file and the section,
// not quietly ignored in favour of the main file's.
func TestLoadFlagsMissingSection(t *testing.T) {
	dir := t.TempDir()
	clusterOnly := filepath.Join(dir, "cluster.amsp")
	trainOnly := filepath.Join(dir, "train.amsp")
	for name, text := range map[string]string{
		clusterOnly: "cluster {\n  gpu = \"cpu\"\n  nodes = 2\n  gpus_per_node = 4\n}\n",
		trainOnly:   "train {\n  seq_len = 16\n  micro_batch = 2\n  global_batch = 32\n}\n",
	} {
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	model := "../../testdata/models/tiny.amsp"
	defer func(r io.Reader) { stdin = r }(stdin)
	stdin = strings.NewReader("")
	for _, c := range []struct {
		args   []string
		status int
		errst  string
	}{
		{[]string{"check", "--train", clusterOnly, model}, exitUser, clusterOnly + ": --train names a file with no train section\n"},
		{[]string{"check", "--cluster", trainOnly, model}, exitUser, trainOnly + ": --cluster names a file with no cluster section\n"},
		{[]string{"check", "--cluster", clusterOnly, "--train", trainOnly, model}, exitOK, ""},
		// Standard input can be read once.
		{[]string{"check", "--train", "-", "-"}, exitUser, "--train -: standard input is already read as the main file\n"},
		{[]string{"check", "--cluster", "-", "--train", "-", model}, exitUser, "--train -: standard input is already read for --cluster\n"},
	} {
		stdin = strings.NewReader("")
		var stdout, stderr bytes.Buffer
		st := run(c.args, &stdout, &stderr)
		if st != c.status || (c.errst == "" && stderr.Len() > 0) || !strings.HasSuffix(stderr.String(), c.errst) {
			t.Errorf("amspc %s: status %d (want %d)\nstderr %q\nwant   %q", strings.Join(c.args, " "), st, c.status, stderr.String(), c.errst)
		}
	}

	// One --train - serves every file of the command: standard input is
	// read once, not found empty from the second file on.
	train, err := os.ReadFile(trainOnly)
	if err != nil {
		t.Fatal(err)
	}
	stdin = strings.NewReader(string(train))
	var stdout, stderr bytes.Buffer
	if st := run([]string{"check", "--cluster", clusterOnly, "--train", "-", model, model}, &stdout, &stderr); st != exitOK {
		t.Errorf("check --train - with two files: status %d\n%s", st, stderr.String())
	}
}
