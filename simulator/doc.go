// Package simulator predicts how a scheduled step program runs: it
// replays a rank template's three streams and their events on the cost
// model (Simulate) to give the step time, the exposed communication and
// the peak memory the planner ranks plans by, and writes the timeline as
// a Chrome trace.
//
// In: an ir.Program after the passes' schedule pass (passes.Pipeline:
// lower, collectives, reduce-scatter, redundant-gathers, bucket,
// hierarchical, schedule decide what runs where and when; its simulate
// stage calls Simulate, and fit simulates each prefetch depth it tries).
// Out: a Timeline.
package simulator
