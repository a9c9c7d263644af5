// Package par runs independent pieces of work on every processor.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// For runs f(0), ..., f(n-1), as many at once as there are processors
// (GOMAXPROCS), and returns when all have returned. Each f(i) must be
// independent of the others; what f writes to its own index i is what
// the caller reads afterwards, so the result does not depend on the
// order the calls ran in.
func For(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 {
		for i := range n {
			f(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for j := int(next.Add(1) - 1); j < n; j = int(next.Add(1) - 1) {
				f(j)
			}
		})
	}
	wg.Wait()
}
