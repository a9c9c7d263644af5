package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestCompileFlagRanges: compile, disasm and trace refuse flag values with
// no meaning, in one line that names the flag and the value, with status
// 1, before reading or writing anything.
func TestCompileFlagRanges(t *testing.T) {
	tiny := "../../testdata/models/tiny.amsp"
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if st := run([]string{"compile", "-o", dir, tiny}, &stdout, &stderr); st != exitOK {
		t.Fatalf("compile: status %d: %s", st, stderr.String())
	}
	trace := filepath.Join(dir, "t.json")
	for _, c := range []struct {
		args []string
		want string // a regexp on the one line of stderr
	}{
		{[]string{"compile", "--bucket", "0", "-o", dir, tiny}, `^amspc compile: --bucket 0 is out of range \(at least 1 byte\)$`},
		{[]string{"compile", "--bucket", "-4096", "-o", dir, tiny}, `^amspc compile: --bucket -4096 is out of range \(at least 1 byte\)$`},
		{[]string{"compile", "-o", "", tiny}, `^amspc compile: -o "": the flag needs a value$`},
		{[]string{"compile", "-dump-after", "bogus", "-o", dir, tiny}, `^amspc compile: -dump-after=bogus: no such pass \(passes: fuse, autodiff, .*, or all\)$`},
		{[]string{"compile", "-d", "nocheck", "-o", dir, tiny}, `^amspc compile: unknown debug flag -d=nocheck \(known: check, and PASS/off for an optional pass: fuse, reduce-scatter, redundant-gathers, bucket, hierarchical\)$`},
		{[]string{"disasm", "--rank", "-1", dir}, `^amspc disasm: --rank -1: rank -1 is not in the plan's 8 ranks \(0 to 7\)$`},
		{[]string{"disasm", "--rank", "99999", dir}, `^amspc disasm: --rank 99999: rank 99999 is not in the plan's 8 ranks \(0 to 7\)$`},
		{[]string{"disasm", "--rank", "0,x", dir}, `^amspc disasm: --rank 0,x: "x" is not a rank number$`},
		{[]string{"disasm", "--rank", "", dir}, `^amspc disasm: --rank "": the flag needs a value$`},
		{[]string{"disasm", "--rank", "1,0,1", dir}, `^amspc disasm: --rank 1,0,1: rank 1 is given twice$`},
		{[]string{"trace", "--ranks", "8", "-o", trace, dir}, `^amspc trace: --ranks 8: rank 8 is not in the plan's 8 ranks \(0 to 7\)$`},
		{[]string{"trace", "--ranks", "", "-o", trace, dir}, `^amspc trace: --ranks "": the flag needs a value$`},
		{[]string{"trace", "--ranks", "2,2", "-o", trace, dir}, `^amspc trace: --ranks 2,2: rank 2 is given twice$`},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			st := run(c.args, &stdout, &stderr)
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if st != exitUser || len(lines) != 1 || !regexp.MustCompile(c.want).MatchString(lines[0]) {
				t.Errorf("status %d (want 1)\nstderr %q\nwant   %s", st, stderr.String(), c.want)
			}
		})
	}
}
