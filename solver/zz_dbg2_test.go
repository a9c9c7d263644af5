package solver

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestDbgBrute(t *testing.T) {
	for _, e := range engines {
		r := rand.New(rand.NewPCG(1, 2))
		t0 := time.Now()
		worst, wi, wn := time.Duration(0), 0, 0
		for i := range 200 {
			p := randomBinary(r)
			t1 := time.Now()
			s, _ := e.Solve(p)
			if d := time.Since(t1); d > worst {
				worst, wi, wn = d, i, s.Nodes
			}
		}
		t.Logf("%s total %v worst %v (problem %d, %d nodes)", e.name, time.Since(t0), worst, wi, wn)
	}
}

func TestDbgBF(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	t0 := time.Now()
	for range 200 {
		bruteForce(randomBinary(r))
	}
	t.Logf("bf %v", time.Since(t0))
}
