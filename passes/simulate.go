package passes

import (
	"fmt"
	"io"

	"amspc/ir"
	"amspc/simulator"
)

// simulate replays the scheduled program on the cost model's machine
// (simulator.Simulate): the step time, the exposed communication and the
// peak memory that the fit pass, the planner and the CLI read. Without a
// machine (Options.Machine) there is nothing to time it with, and the
// program is left unsimulated.
func simulate(s *State) error {
	s.Timeline = nil
	if s.machine == nil {
		return nil
	}
	tl, err := simulator.Simulate(s.Prog, s.machine, StageNames(s.Prog))
	if err != nil {
		return err
	}
	s.Timeline = tl
	return nil
}

// StageNames lists a program's stages in order (for timelines).
func StageNames(p *ir.Program) []string {
	var out []string
	for _, l := range p.Layouts {
		out = append(out, l.Stage)
	}
	return out
}

// dumpTimeline prints the simulated step as comment lines: its time,
// each stream's busy time, and the peak memory.
func dumpTimeline(w io.Writer, s *State) {
	tl := s.Timeline
	if tl == nil {
		fmt.Fprintln(w, "# not simulated: no machine")
		return
	}
	fmt.Fprintf(w, "# step %s: compute %s, exposed communication %s\n", ms(tl.Step), ms(tl.Compute), ms(tl.Exposed))
	var busy [ir.NumStreams]float64
	var spans [ir.NumStreams]int
	for _, sp := range tl.Spans {
		busy[sp.Stream] += sp.Dur
		spans[sp.Stream]++
	}
	for st := range busy {
		fmt.Fprintf(w, "#   %-11s %5d spans, busy %s\n", ir.StreamName(st), spans[st], ms(busy[st]))
	}
	fmt.Fprintf(w, "# peak memory per rank %s: %s persistent, %d transient buffers\n",
		ir.FormatBytes(int64(tl.PeakBytes)), ir.FormatBytes(int64(tl.PersistentBytes)), len(tl.PeakBuffers))
}

// ms prints a time in milliseconds to four significant digits, which
// the last bits of a float sum do not change.
func ms(t float64) string { return fmt.Sprintf("%.4g ms", t*1e3) }
