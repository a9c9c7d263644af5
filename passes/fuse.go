package passes

import (
	"fmt"
	"io"

	"amspc/ir"
)

// fuse rewrites the forward graph by ir's fusion pattern table
// (ir.Fuse): a fused op's backward rule then fuses the backward autodiff
// makes from it.
func fuse(s *State) error {
	s.Fused = true
	return ir.Fuse(s.Graph)
}

// dumpFusions prints the pattern table, then the fused graph.
func dumpFusions(w io.Writer, s *State) {
	for _, f := range ir.FusionRules() {
		fmt.Fprintf(w, "# fusion %s: %v(...) -> %v: %s\n", f.Name, f.Root, f.Fused, f.Why)
	}
	for _, f := range ir.LoweredFusions() {
		fmt.Fprintf(w, "# fusion %s (by lower): %v(...) -> %v: %s\n", f.Name, f.Root, f.Fused, f.Why)
	}
	io.WriteString(w, ir.Print(s.Graph))
}
