package solver

import (
	"testing"
	"time"
)

func TestDbgPlanner(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 4, 5, 6} {
		pl := newPlanner(seed, 3, 8, 121)
		p := pl.problem()
		t0 := time.Now()
		s, _ := Default().Solve(p)
		d := time.Since(t0)
		t0 = time.Now()
		want := pl.enumerate()
		t.Logf("seed %d nodes %d obj %.4f want %.4f solve %v enum %v", seed, s.Nodes, s.Obj, want, d, time.Since(t0))
	}
}
