package simulator

import (
	"bufio"
	"encoding/json"
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
	tw := NewTraceWriter(w)
	for _, r := range ranks {
		tw.Rank(r)
		for i := range tl.Spans {
			tw.Span(r, &tl.Spans[i])
		}
	}
	return tw.Close()
}

// A TraceWriter writes the trace format of WriteTrace, one event at a
// time: amspc trace writes a plan's predicted timeline with it and amspc
// run --trace what its ranks measured, so that the two share their
// processes (rank r is pid r), threads (stream s is tid s, named as
// ir.StreamName names it), event names and categories, and open side by
// side.
type TraceWriter struct {
	bw    *bufio.Writer
	first bool
}

// NewTraceWriter starts a trace on w. meta holds pairs of a key and a
// value, written in order into the trace's "otherData" object (the trace
// event format's metadata); without any, the trace has no such object.
func NewTraceWriter(w io.Writer, meta ...string) *TraceWriter {
	t := &TraceWriter{bw: bufio.NewWriter(w), first: true}
	t.bw.WriteString(`{"displayTimeUnit":"ns",`)
	if len(meta) > 0 {
		t.bw.WriteString(`"otherData":{`)
		for i := 0; i+1 < len(meta); i += 2 {
			if i > 0 {
				t.bw.WriteByte(',')
			}
			k, _ := json.Marshal(meta[i])
			v, _ := json.Marshal(meta[i+1])
			t.bw.Write(k)
			t.bw.WriteByte(':')
			t.bw.Write(v)
		}
		t.bw.WriteString("},")
	}
	t.bw.WriteString("\"traceEvents\":[\n")
	return t
}

func (t *TraceWriter) sep() {
	if !t.first {
		t.bw.WriteString(",\n")
	}
	t.first = false
}

// Rank names rank r's process and the threads of its streams.
func (t *TraceWriter) Rank(r int) {
	t.sep()
	fmt.Fprintf(t.bw, `{"ph":"M","name":"process_name","pid":%d,"tid":0,"args":{"name":"rank %d"}}`, r, r)
	for s := 0; s < ir.NumStreams; s++ {
		t.sep()
		fmt.Fprintf(t.bw, `{"ph":"M","name":"thread_name","pid":%d,"tid":%d,"args":{"name":%q}}`, r, s, ir.StreamName(s))
	}
}

// A TraceArg is an integer argument of an event, after its stage and
// index.
type TraceArg struct {
	Key string
	Val int64
}

// Span writes sp as a complete event of rank r on its stream's thread,
// categorised by the stream's name, its times in microseconds (to the
// nanosecond), its arguments the stage, the index in its stream and
// args, in order.
func (t *TraceWriter) Span(r int, sp *Span, args ...TraceArg) {
	us := func(s float64) string { return strconv.FormatFloat(s*1e6, 'f', 3, 64) }
	t.sep()
	fmt.Fprintf(t.bw, `{"ph":"X","name":%q,"cat":%q,"pid":%d,"tid":%d,"ts":%s,"dur":%s,"args":{"stage":%q,"index":%d`,
		sp.Name, ir.StreamName(sp.Stream), r, sp.Stream, us(sp.Start), us(sp.Dur), sp.Stage, sp.Index)
	for _, a := range args {
		fmt.Fprintf(t.bw, ",%q:%d", a.Key, a.Val)
	}
	t.bw.WriteString("}}")
}

// Close ends the trace and flushes it, returning the first error writing
// it met.
func (t *TraceWriter) Close() error {
	t.bw.WriteString("\n]}\n")
	return t.bw.Flush()
}
