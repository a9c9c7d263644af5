package kernels

import (
	"math/bits"
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

// Scratch pools, one per size class (capacities a quarter of a power of
// two apart, so a slice is at most a quarter larger than asked for): a
// request takes a slice of its class only, so steady-state training
// allocates nothing here. (One pool for all sizes dropped every pooled
// slice too small for the request and allocated a new one: fresh pages,
// 9,400 page faults a step on d512x8's 8 ranks.)
var (
	pools32 [numClasses]sync.Pool // *[]float32
	pools64 [numClasses]sync.Pool // *[]float64
)

const numClasses = 4 * 64

// sizeClass is the class of a request for n elements and its capacity.
func sizeClass(n int) (class, size int) {
	if n <= 16 {
		return 0, 16
	}
	b := bits.Len(uint(n - 1)) // 2^(b-1) < n <= 2^b
	base := 1 << (b - 1)
	q := base / 4
	sub := (n - base + q - 1) / q // 1..4
	return (b-1)*4 + sub - 3, base + sub*q
}

func getF32(n int) *[]float32 { return getPooled[float32](&pools32, n) }
func putF32(p *[]float32)     { putPooled(&pools32, p) }
func getF64(n int) *[]float64 { return getPooled[float64](&pools64, n) }
func putF64(p *[]float64)     { putPooled(&pools64, p) }

// getPooled is a slice of n elements from its class's pool, or a new one
// of the class's capacity (on huge pages where Linux grants them).
func getPooled[T float32 | float64](pools *[numClasses]sync.Pool, n int) *[]T {
	c, size := sizeClass(n)
	if p, ok := pools[c].Get().(*[]T); ok {
		*p = (*p)[:n]
		return p
	}
	s := make([]T, size)
	hugepage.Advise(unsafe.Pointer(&s[0]), uintptr(size)*unsafe.Sizeof(s[0]))
	s = s[:n]
	return &s
}

// putPooled gives p back to its class's pool (a slice whose capacity is
// no class's is left to the collector).
func putPooled[T float32 | float64](pools *[numClasses]sync.Pool, p *[]T) {
	if c, size := sizeClass(cap(*p)); size == cap(*p) {
		pools[c].Put(p)
	}
}
