package kernels

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"amspc/internal/hugepage"
)

var workers atomic.Int32

// SetWorkers sets how many goroutines one kernel call may use (0, the
// default: GOMAXPROCS). A process that runs several ranks at once gives
// each its share of the cores, so concurrent kernels do not fan out past
// them. Results never depend on it.
func SetWorkers(n int) { workers.Store(int32(max(n, 0))) }

// Workers is how many goroutines one kernel call may use.
func Workers() int {
	if n := workers.Load(); n > 0 {
		return int(n)
	}
	return runtime.GOMAXPROCS(0)
}

// minParallelWork is the operation count below which spawning goroutines
// costs more than it saves (a goroutine start is about a microsecond).
const minParallelWork = 1 << 15

// parallelFor calls fn on disjoint ranges covering [0, n), from up to
// Workers() goroutines when n*cost (cost is the work per index, in rough
// operations) pays for them. Ranges are handed out dynamically for balance
// (causal attention rows differ in cost), which is safe for determinism
// because fn must compute each index on its own: which goroutine runs a
// range never changes what it computes.
func parallelFor(n, cost int, fn func(lo, hi int)) {
	parallelForWorkers(Workers(), n, cost, fn)
}

func parallelForWorkers(workers, n, cost int, fn func(lo, hi int)) {
	if n <= 0 {
		return
	}
	if workers > n {
		workers = n
	}
	if workers <= 1 || n*cost < minParallelWork {
		fn(0, n)
		return
	}
	// Four grains per worker balance uneven rows without much overhead.
	grain := (n + 4*workers - 1) / (4 * workers)
	var next atomic.Int64
	work := func() {
		for {
			lo := int(next.Add(int64(grain))) - grain
			if lo >= n {
				return
			}
			fn(lo, min(lo+grain, n))
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// Scratch pools. A pooled slice keeps its capacity, so steady-state
// training allocates nothing here.
var (
	pool32 sync.Pool // *[]float32
	pool64 sync.Pool // *[]float64
)

func getF32(n int) *[]float32 {
	if p, ok := pool32.Get().(*[]float32); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float32, n)
	if n > 0 {
		hugepage.Advise(unsafe.Pointer(&s[0]), uintptr(4*n))
	}
	return &s
}

func putF32(p *[]float32) { pool32.Put(p) }

func getF64(n int) *[]float64 {
	if p, ok := pool64.Get().(*[]float64); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	s := make([]float64, n)
	if n > 0 {
		hugepage.Advise(unsafe.Pointer(&s[0]), uintptr(8*n))
	}
	return &s
}

func putF64(p *[]float64) { pool64.Put(p) }
