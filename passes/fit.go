package passes

import (
	"fmt"
	"io"

	"amspc/ir"
	"amspc/simulator"
)

// fit makes the program fit the GPU's memory: while the simulated peak
// does not fit (Options.Fits) and more than one stage's gathered params
// may be live at once, the unscheduled sequence is scheduled again one
// stage shallower and simulated again. A shallower prefetch hides less
// communication, so the deepest depth that fits is kept; at depth 1 the
// program stays as it is, and the caller decides what a program that
// does not fit means. With Options.Fits nil the depth is fixed.
func fit(s *State) error {
	if s.fits == nil || s.Timeline == nil {
		return nil
	}
	for s.Dist.Depth > 1 && !s.fits(s.Timeline) {
		depth := s.Dist.Depth - 1
		prog, err := Reschedule(s, depth)
		if err != nil {
			return err
		}
		tl, err := simulator.Simulate(prog, s.machine, StageNames(prog))
		if err != nil {
			return err
		}
		s.Prog, s.Timeline, s.Dist.Depth = prog, tl, depth
	}
	return nil
}

// dumpFit prints the depth fitting chose, and the program.
func dumpFit(w io.Writer, s *State) {
	switch tl := s.Timeline; {
	case s.fits == nil || tl == nil:
		fmt.Fprintf(w, "# prefetch depth %d, fixed\n", s.Dist.Depth)
	case s.fits(tl):
		fmt.Fprintf(w, "# prefetch depth %d: the deepest whose simulated peak (%s) fits\n", s.Dist.Depth, ir.FormatBytes(int64(tl.PeakBytes)))
	default:
		fmt.Fprintf(w, "# prefetch depth %d: the simulated peak (%s) does not fit\n", s.Dist.Depth, ir.FormatBytes(int64(tl.PeakBytes)))
	}
	ir.PrintProgram(w, s.Prog)
}
