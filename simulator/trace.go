package simulator

import (
	"bufio"
	"fmt"
	"io"
	"strconv"

	"amspc/ir"
)

// WriteTrace writes a timeline in Chrome's trace event format (JSON
// object form), viewable in Perfetto or chrome://tracing: one process per
// rank, one thread per stream, a complete ("X") event per instruction that
// takes time. Times are microseconds. Every rank runs the same template,
// so each listed rank shows the same timeline. Output is deterministic.
func WriteTrace(w io.Writer, tl *Timeline, ranks []int) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")
	first := true
	sep := func() {
		if !first {
			bw.WriteString(",\n")
		}
		first = false
	}
	us := func(s float64) string { return strconv.FormatFloat(s*1e6, 'f', 3, 64) }
	for _, r := range ranks {
		sep()
		fmt.Fprintf(bw, `{"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"rank %d"}}`, r, r)
		for s := 0; s < ir.NumStreams; s++ {
			sep()
			fmt.Fprintf(bw, `{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":%q}}`, r, s, ir.StreamName(s))
		}
		for _, sp := range tl.Spans {
			sep()
			fmt.Fprintf(bw, `{"ph":"X","name":%q,"cat":%q,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{"stage":%q,"index":%d}}`,
				sp.Name, ir.StreamName(sp.Stream), r, sp.Stream, us(sp.Start), us(sp.Dur), sp.Stage, sp.Index)
		}
	}
	bw.WriteString("\n]}\n")
	return bw.Flush()
}
