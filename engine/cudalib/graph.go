//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"amspc/engine"
	"amspc/ir"
)

// Graphs (engine.GraphDevice): a capture is CUDA stream capture on the
// compute stream, which every other stream joins by waiting for an
// event recorded on it at the start (a fork) and leaves by the compute
// stream waiting for an event recorded on each at the end (a join), as
// CUDA needs every stream that joined a capture to rejoin its origin.
// The mode is relaxed: a capture may allocate (cuMemAlloc) while it
// records, as the engine's first use of a size does. UploadOn copies
// from pinned memory that the graph owns for as long as it lives
// (staging memory is reused after every Sync), and SetUpload writes
// into that memory.

// captureModeRelaxed is CU_STREAM_CAPTURE_MODE_RELAXED.
const captureModeRelaxed = 2

// gpuCapture is a capture under way: each stream's UploadOns so far.
type gpuCapture struct {
	mu      sync.Mutex
	staged  *staging
	uploads map[int][]pinned
}

// Graph is a GPU's captured work (engine.Graph).
type Graph struct {
	g       *GPU
	exec    C.CUgraphExec
	staged  *staging
	uploads map[int][]pinned
}

// closeGraphs destroys the GPU's graphs and the events they fork and
// join with (Close: the GPU's work is done).
func (g *GPU) closeGraphs() error {
	g.cmu.Lock()
	graphs, ev := g.graphs, g.gevents
	g.graphs, g.gevents = nil, nil
	g.cmu.Unlock()
	var err error
	for _, gr := range graphs {
		if e := gr.Close(); err == nil {
			err = e
		}
	}
	if ev != nil {
		for _, e := range append([]C.CUevent{ev.fork}, ev.join[:]...) {
			if e == nil {
				continue
			}
			if e2 := g.ctx.do(func() error { return check("cuEventDestroy", C.amsp_cuEventDestroy(e)) }); err == nil {
				err = e2
			}
		}
	}
	return err
}

// graphEvents are the fork and join events (made once, on the first
// capture).
type graphEvents struct {
	fork C.CUevent
	join [numStreams]C.CUevent
}

func (g *GPU) graphEvents() (*graphEvents, error) {
	if g.gevents != nil {
		return g.gevents, nil
	}
	ev := &graphEvents{}
	const disableTiming = 2 // CU_EVENT_DISABLE_TIMING
	make1 := func(e *C.CUevent) error {
		return g.ctx.do(func() error { return check("cuEventCreate", C.amsp_cuEventCreate(e, disableTiming)) })
	}
	if err := make1(&ev.fork); err != nil {
		return nil, err
	}
	for i := range ev.join {
		if err := make1(&ev.join[i]); err != nil {
			return nil, err
		}
	}
	g.gevents = ev
	return ev, nil
}

// Captures says whether the GPU captures graphs: not with every stream
// the legacy one ($AMSPC_CUDA_STREAMS=legacy), which cannot be captured.
func (g *GPU) Captures() bool { return !g.legacy }

// BeginCapture starts capturing every stream's work.
func (g *GPU) BeginCapture() error {
	if g.legacy {
		return fmt.Errorf("graphs need the GPU's own streams ($%s=legacy puts the work on the legacy stream, which cannot be captured)", EnvStreams)
	}
	g.cmu.Lock()
	defer g.cmu.Unlock()
	if g.capture != nil {
		return errors.New("a capture is already on")
	}
	ev, err := g.graphEvents()
	if err != nil {
		return err
	}
	origin := g.streams[ir.Compute].h
	err = g.ctx.do(func() error {
		if err := check("cuStreamBeginCapture", C.amsp_cuStreamBeginCapture(origin, captureModeRelaxed)); err != nil {
			return err
		}
		if err := check("cuEventRecord", C.amsp_cuEventRecord(ev.fork, origin)); err != nil {
			return err
		}
		for s, st := range g.streams {
			if s == ir.Compute {
				continue
			}
			if err := check("cuStreamWaitEvent", C.amsp_cuStreamWaitEvent(st.h, ev.fork, 0)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		g.endCapture() // what was begun, ended
		return err
	}
	g.capture = &gpuCapture{staged: &staging{}, uploads: map[int][]pinned{}}
	return nil
}

// endCapture ends the compute stream's capture and returns its graph.
func (g *GPU) endCapture() (C.CUgraph, error) {
	var graph C.CUgraph
	err := g.ctx.do(func() error {
		return check("cuStreamEndCapture", C.amsp_cuStreamEndCapture(g.streams[ir.Compute].h, &graph))
	})
	return graph, err
}

// EndCapture joins every stream back into the compute stream, ends the
// capture and instantiates its graph.
func (g *GPU) EndCapture() (engine.Graph, error) {
	g.cmu.Lock()
	c := g.capture
	g.capture = nil
	g.cmu.Unlock()
	if c == nil {
		return nil, errors.New("EndCapture without BeginCapture")
	}
	ev := g.gevents
	origin := g.streams[ir.Compute].h
	joinErr := g.ctx.do(func() error {
		for s, st := range g.streams {
			if s == ir.Compute {
				continue
			}
			if err := check("cuEventRecord", C.amsp_cuEventRecord(ev.join[s], st.h)); err != nil {
				return err
			}
			if err := check("cuStreamWaitEvent", C.amsp_cuStreamWaitEvent(origin, ev.join[s], 0)); err != nil {
				return err
			}
		}
		return nil
	})
	graph, err := g.endCapture()
	if err == nil {
		err = joinErr
	}
	var exec C.CUgraphExec
	if err == nil {
		err = g.ctx.do(func() error { return check("cuGraphInstantiate", C.amsp_cuGraphInstantiate(&exec, graph, 0)) })
	}
	if graph != nil {
		g.ctx.do(func() error { return check("cuGraphDestroy", C.amsp_cuGraphDestroy(graph)) })
	}
	if err != nil {
		c.staged.free(g.ctx)
		return nil, err
	}
	gr := &Graph{g: g, exec: exec, staged: c.staged, uploads: c.uploads}
	g.cmu.Lock()
	g.graphs = append(g.graphs, gr)
	g.cmu.Unlock()
	return gr, nil
}

// captured stages src for an UploadOn on stream s while a capture is on
// (in memory the graph keeps) and returns it; nil when no capture is on.
func (g *GPU) captured(s int, src []byte) (unsafe.Pointer, error) {
	g.cmu.Lock()
	c := g.capture
	g.cmu.Unlock()
	if c == nil {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.staged.take(g.ctx, src)
	if err != nil {
		return nil, err
	}
	c.uploads[s] = append(c.uploads[s], pinned{p, int64(len(src))})
	return p, nil
}

// Launch enqueues the graph on the compute stream.
func (gr *Graph) Launch() error {
	if gr.exec == nil {
		return errors.New("launch of a closed graph")
	}
	st := gr.g.streams[ir.Compute].h
	return gr.g.ctx.do(func() error { return check("cuGraphLaunch", C.amsp_cuGraphLaunch(gr.exec, st)) })
}

// SetUpload writes src into the pinned memory the k-th upload captured
// on stream s copies from.
func (gr *Graph) SetUpload(s, k int, src []byte) error {
	if k < 0 || k >= len(gr.uploads[s]) {
		return fmt.Errorf("the graph has %d uploads on stream %d, not %d", len(gr.uploads[s]), s, k+1)
	}
	p := gr.uploads[s][k]
	if int64(len(src)) != p.bytes {
		return fmt.Errorf("upload %d on stream %d copies %d bytes, not %d", k, s, p.bytes, len(src))
	}
	copy(unsafe.Slice((*byte)(p.p), len(src)), src)
	return nil
}

// Close destroys the graph (after its launches are done: the caller has
// synchronized) and frees its pinned memory.
func (gr *Graph) Close() error {
	if gr.exec == nil {
		return nil
	}
	exec := gr.exec
	gr.exec = nil
	err := gr.g.ctx.do(func() error { return check("cuGraphExecDestroy", C.amsp_cuGraphExecDestroy(exec)) })
	if e := gr.staged.free(gr.g.ctx); err == nil {
		err = e
	}
	return err
}
