package par

import (
	"runtime"
	"sync/atomic"
	"testing"
)

func TestForCallsEachIndexOnce(t *testing.T) {
	for _, procs := range []int{1, 2, 8} {
		old := runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 3, 1000} {
			calls := make([]int32, n)
			var total atomic.Int32
			For(n, func(i int) {
				atomic.AddInt32(&calls[i], 1)
				total.Add(1)
			})
			if int(total.Load()) != n {
				t.Errorf("GOMAXPROCS %d, n %d: %d calls", procs, n, total.Load())
			}
			for i, c := range calls {
				if c != 1 {
					t.Errorf("GOMAXPROCS %d, n %d: f(%d) called %d times", procs, n, i, c)
				}
			}
		}
		runtime.GOMAXPROCS(old)
	}
}
