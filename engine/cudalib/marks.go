//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"errors"
	"sync"
)

// Marks (engine.TimingDevice): a mark is a CUDA event with timing,
// recorded on its stream; its time is cuEventElapsedTime from mark 0's
// event (resolution about half a microsecond). The events are made as
// needed and used again after ResetMarks.
type marks struct {
	mu     sync.Mutex
	events []C.CUevent
	n      int // marks since the last ResetMarks
}

// Mark records a timing event on stream s and returns its number.
func (g *GPU) Mark(s int) (int, error) {
	st, err := g.Stream(s)
	if err != nil {
		return 0, err
	}
	g.marks.mu.Lock()
	defer g.marks.mu.Unlock()
	if g.marks.n == len(g.marks.events) {
		var e C.CUevent
		if err := g.ctx.do(func() error { return check("cuEventCreate", C.amsp_cuEventCreate(&e, 0)) }); err != nil {
			return 0, err
		}
		g.marks.events = append(g.marks.events, e)
	}
	i := g.marks.n
	e := g.marks.events[i]
	if err := g.ctx.do(func() error { return check("cuEventRecord", C.amsp_cuEventRecord(e, st.h)) }); err != nil {
		return 0, err
	}
	g.marks.n++
	return i, nil
}

// MarkTimes is each mark's time since mark 0, in seconds (after a Sync).
func (g *GPU) MarkTimes() ([]float64, error) {
	g.marks.mu.Lock()
	defer g.marks.mu.Unlock()
	if g.marks.n == 0 {
		return nil, nil
	}
	out := make([]float64, g.marks.n)
	base := g.marks.events[0]
	err := g.ctx.do(func() error {
		for i := 1; i < g.marks.n; i++ {
			var ms C.float
			if err := check("cuEventElapsedTime", C.amsp_cuEventElapsedTime(&ms, base, g.marks.events[i])); err != nil {
				return err
			}
			out[i] = float64(ms) / 1e3
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(errors.New("reading the trace's CUDA events"), err)
	}
	return out, nil
}

// ResetMarks numbers the marks from 0 again.
func (g *GPU) ResetMarks() {
	g.marks.mu.Lock()
	g.marks.n = 0
	g.marks.mu.Unlock()
}

// closeMarks destroys the marks' events (Close).
func (g *GPU) closeMarks() error {
	g.marks.mu.Lock()
	defer g.marks.mu.Unlock()
	var err error
	for _, e := range g.marks.events {
		if e2 := g.ctx.do(func() error { return check("cuEventDestroy", C.amsp_cuEventDestroy(e)) }); err == nil {
			err = e2
		}
	}
	g.marks.events, g.marks.n = nil, 0
	return err
}
