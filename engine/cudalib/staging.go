//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"sync"
	"unsafe"
)

// staging is pinned host memory that UploadOn copies from: the copy a
// stream runs when it gets there reads it then, so the host neither waits
// for the stream nor keeps the caller's bytes. A Sync has waited for
// every copy, so the memory is used again from the start after one.
type staging struct {
	mu     sync.Mutex
	chunks []pinned
	cur    int   // the chunk being filled
	off    int64 // bytes of it used
	takes  int64 // copies staged so far
}

type pinned struct {
	p     unsafe.Pointer
	bytes int64
}

// stagingChunk is the size of a staging chunk: a step's uploads (AdamW's
// decayed ranges and factors, check flags) are a few KiB.
const stagingChunk = 1 << 20

// take copies src into pinned memory and returns it.
func (st *staging) take(c *Context, src []byte) (unsafe.Pointer, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := int64(len(src)+15) &^ 15
	for st.cur < len(st.chunks) && st.off+n > st.chunks[st.cur].bytes {
		st.cur, st.off = st.cur+1, 0
	}
	if st.cur == len(st.chunks) {
		var p unsafe.Pointer
		size := max(n, stagingChunk)
		if err := c.do(func() error { return check("cuMemAllocHost", C.amsp_cuMemAllocHost(&p, C.size_t(size))) }); err != nil {
			return nil, err
		}
		st.chunks = append(st.chunks, pinned{p, size})
	}
	dst := unsafe.Add(st.chunks[st.cur].p, st.off)
	copy(unsafe.Slice((*byte)(dst), len(src)), src)
	st.off += n
	st.takes++
	return dst, nil
}

// mark is the copies staged so far, taken before a Sync.
func (st *staging) mark() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.takes
}

// reset makes every chunk free again after a Sync that began at mark,
// unless a copy was staged since (another stream's, which the Sync may
// not have waited for).
func (st *staging) reset(mark int64) {
	st.mu.Lock()
	if st.takes == mark {
		st.cur, st.off = 0, 0
	}
	st.mu.Unlock()
}

// free releases the pinned memory.
func (st *staging) free(c *Context) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	var err error
	for _, ch := range st.chunks {
		if e := c.do(func() error { return check("cuMemFreeHost", C.amsp_cuMemFreeHost(ch.p)) }); err == nil {
			err = e
		}
	}
	st.chunks, st.cur, st.off = nil, 0, 0
	return err
}

// UploadOn copies src to device memory at addr in stream s's order,
// without waiting: through pinned staging memory, so src may change as
// soon as UploadOn returns.
func (g *GPU) UploadOn(s int, addr uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	stream, err := g.Stream(s)
	if err != nil {
		return err
	}
	p, err := g.captured(s, src)
	if err == nil && p == nil {
		p, err = g.staged.take(g.ctx, src)
	}
	if err != nil {
		return err
	}
	return g.ctx.do(func() error {
		return check("cuMemcpyHtoDAsync", C.amsp_cuMemcpyHtoDAsync(C.CUdeviceptr(addr), p, C.size_t(len(src)), stream.h))
	})
}
