package main

import (
	"math"
	"testing"

	"amspc/cost/profile"
)

// TestSearchOverhead: on steps whose kernels scale and whose collectives
// each add a latency (a plan with many collectives, one with few), the
// search finds the kernel scale and the overhead that made the measured
// steps, within 3 %.
func TestSearchOverhead(t *testing.T) {
	want := profile.Overhead{KernelScale: 0.63, Collective: 1.3e-3}
	type probe struct{ kernels, colls float64 }
	probes := []probe{{20e-3, 30}, {18e-3, 3}}
	step := func(p probe, o profile.Overhead) float64 { return p.kernels*o.KernelScale + p.colls*o.Collective }
	loss := func(o profile.Overhead) ([]float64, float64, error) {
		var l float64
		for _, p := range probes {
			e := step(p, o)/step(p, want) - 1
			l += e * e
		}
		return nil, l, nil
	}
	got, err := searchOverhead(loss)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(got.KernelScale/want.KernelScale-1) > 0.03 || math.Abs(got.Collective/want.Collective-1) > 0.03 {
		t.Errorf("found %+v, want %+v", got, want)
	}
}
