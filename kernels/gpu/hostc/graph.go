//go:build cgo

package hostc

import (
	"errors"
	"fmt"
	"slices"

	"amspc/engine"
	"amspc/ir"
)

// Graphs (engine.GraphDevice). While a Device captures, every operation
// that would enqueue work (Launch, Gemm, Copy, Zero, UploadOn, Record,
// Wait, Collective) appends it to the capture instead, in call order;
// Launch of the graph enqueues them all again in that order, as a CUDA
// graph's launch replays its nodes: each stream's work in its captured
// order, the streams ordered by the captured events (a Record's call
// comes before the calls of every Wait on it, so replaying the calls in
// order is a legal schedule), and all of it between a fork from the
// compute stream and joins back into it. Replays run the same kernels
// on the same addresses: with the same inputs, the same bits.

// errCapturing is what a transfer or Sync gets while a capture is on.
var errCapturing = errors.New("hostc: a transfer or Sync while capturing a graph")

// A capture is what a Device records between BeginCapture and
// EndCapture.
type capture struct {
	ops     []capOp
	uploads map[int]int // UploadOns captured per stream
	err     error       // the first operation that could not be captured
}

// A capOp is one captured operation on stream s: work to run (an
// upload's copies *up), a Record or Wait of event ev, or a collective.
type capOp struct {
	s    int
	kind capKind
	work func() error
	up   *[]byte
	ev   int
	coll *engine.DeviceColl
}

type capKind uint8

const (
	capWork capKind = iota
	capUpload
	capRecord
	capWait
	capColl
)

// Graph is a Device's captured work (engine.Graph).
type Graph struct {
	d       *Device
	ops     []capOp
	uploads map[int][]*[]byte // each stream's captured uploads, in order
	streams []int             // the streams it uses besides ir.Compute
	closed  bool
}

// The events a graph's launch forks and joins with: the engine's event
// indices are never negative.
const forkEvent = -1

func joinEvent(s int) int { return -2 - s }

// Captures says the device captures graphs (engine.GraphDevice).
func (d *Device) Captures() bool { return true }

// BeginCapture starts capturing (engine.GraphDevice).
func (d *Device) BeginCapture() error {
	d.q.Lock()
	defer d.q.Unlock()
	if d.capture != nil {
		return errors.New("hostc: a capture is already on")
	}
	d.capture = &capture{uploads: map[int]int{}}
	return nil
}

// EndCapture ends the capture and returns its graph.
func (d *Device) EndCapture() (engine.Graph, error) {
	d.q.Lock()
	c := d.capture
	d.capture = nil
	d.q.Unlock()
	if c == nil {
		return nil, errors.New("hostc: EndCapture without BeginCapture")
	}
	if c.err != nil {
		return nil, c.err
	}
	g := &Graph{d: d, ops: c.ops, uploads: map[int][]*[]byte{}}
	for _, op := range c.ops {
		if op.s != ir.Compute && !slices.Contains(g.streams, op.s) {
			g.streams = append(g.streams, op.s)
		}
		if op.kind == capUpload {
			g.uploads[op.s] = append(g.uploads[op.s], op.up)
		}
	}
	slices.Sort(g.streams)
	return g, nil
}

// captured records op if a capture is on and says whether it did.
// Callers hold q.
func (d *Device) captured(op capOp) bool {
	c := d.capture
	if c == nil {
		return false
	}
	if op.s < 0 {
		if c.err == nil {
			c.err = fmt.Errorf("hostc: stream %d", op.s)
		}
		return true
	}
	if op.kind == capUpload {
		c.uploads[op.s]++
	}
	c.ops = append(c.ops, op)
	return true
}

// capturing records op if a capture is on and says whether it did.
func (d *Device) capturing(op capOp) bool {
	d.q.Lock()
	defer d.q.Unlock()
	return d.captured(op)
}

// Launch enqueues the graph's work (engine.Graph).
func (g *Graph) Launch() error {
	if g.closed {
		return errors.New("hostc: launch of a closed graph")
	}
	d := g.d
	if err := d.Record(ir.Compute, forkEvent); err != nil {
		return err
	}
	for _, s := range g.streams {
		if err := d.Wait(s, forkEvent); err != nil {
			return err
		}
	}
	for _, op := range g.ops {
		var err error
		switch op.kind {
		case capWork, capUpload:
			err = d.enqueue(op.s, op.work)
		case capRecord:
			err = d.Record(op.s, op.ev)
		case capWait:
			err = d.Wait(op.s, op.ev)
		case capColl:
			c := *op.coll
			err = d.Collective(op.s, &c)
		}
		if err != nil {
			return err
		}
	}
	for _, s := range g.streams {
		if err := d.Record(s, joinEvent(s)); err != nil {
			return err
		}
		if err := d.Wait(ir.Compute, joinEvent(s)); err != nil {
			return err
		}
	}
	return nil
}

// SetUpload replaces what the k-th upload captured on stream s copies.
func (g *Graph) SetUpload(s, k int, src []byte) error {
	if k < 0 || k >= len(g.uploads[s]) {
		return fmt.Errorf("hostc: the graph has %d uploads on stream %d, not %d", len(g.uploads[s]), s, k+1)
	}
	up := g.uploads[s][k]
	if len(src) != len(*up) {
		return fmt.Errorf("hostc: upload %d on stream %d copies %d bytes, not %d", k, s, len(*up), len(src))
	}
	copy(*up, src)
	return nil
}

// Close releases the graph.
func (g *Graph) Close() error {
	g.closed = true
	g.ops, g.uploads = nil, nil
	return nil
}
