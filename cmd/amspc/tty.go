package main

import (
	"io"
	"os"

	"amspc/internal/outfile"
)

// isTerminal reports whether w is a terminal (not merely a character
// device: /dev/null is one too), looking through the checked writer the
// commands are given.
func isTerminal(w io.Writer) bool {
	f := osFile(w)
	return f != nil && isTTY(f)
}

// sameFile reports whether two writers are the same open file (stdout and
// stderr both on one terminal, or redirected to one file), so that a
// message meant for both is written once.
func sameFile(a, b io.Writer) bool {
	fa, fb := osFile(a), osFile(b)
	if fa == nil || fb == nil {
		return false
	}
	sa, erra := fa.Stat()
	sb, errb := fb.Stat()
	return erra == nil && errb == nil && os.SameFile(sa, sb)
}

// osFile is the file w writes to, looking through checked writers; nil
// when it is not a file.
func osFile(w io.Writer) *os.File {
	for {
		c, ok := w.(*outfile.Checked)
		if !ok {
			break
		}
		w = c.W
	}
	f, _ := w.(*os.File)
	return f
}
