package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestEveryCommandHelp: `amspc CMD -h` (and --help, and `amspc help CMD`)
// exits 0 with the command's usage line on standard output and nothing on
// standard error, and lists every flag its usage line names, for every
// command of the table (so a new command is covered by being added).
// A bad flag before -h is still an error.
func TestEveryCommandHelp(t *testing.T) {
	flagRE := regexp.MustCompile(`\[--?([a-z][a-z0-9-]*)`)
	for _, c := range commands {
		for _, args := range [][]string{{c.name, "-h"}, {c.name, "--help"}, {"help", c.name}} {
			var stdout, stderr bytes.Buffer
			st := run(args, &stdout, &stderr)
			out := stdout.String()
			if st != exitOK || stderr.Len() > 0 {
				t.Errorf("%v: status %d, stderr %q", args, st, stderr.String())
				continue
			}
			first, _, _ := strings.Cut(out, "\n")
			if !strings.HasPrefix(first, "usage: amspc "+c.name) {
				t.Errorf("%v: first line %q, want the usage line", args, first)
				continue
			}
			for _, m := range flagRE.FindAllStringSubmatch(first, -1) {
				if !strings.Contains(out, "\n  -"+m[1]) {
					t.Errorf("%v: flag -%s of the usage line is not listed:\n%s", args, m[1], out)
				}
			}
		}
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		var stdout, stderr bytes.Buffer
		if st := run(args, &stdout, &stderr); st != exitOK || !strings.HasPrefix(stdout.String(), "amspc "+version) {
			t.Errorf("%v: status %d, %q", args, st, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if st := run([]string{"plan", "--bogus", "-h"}, &stdout, &stderr); st != exitUser || !strings.Contains(stderr.String(), "bogus") {
		t.Errorf("plan --bogus -h: status %d, stderr %q", st, stderr.String())
	}
}
