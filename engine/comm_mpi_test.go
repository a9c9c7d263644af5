//go:build mpi

package engine

import (
	"fmt"
	"os"
	"testing"

	"amspc/codegen"
	"amspc/ir"
)

// The benchmarks here run under mpirun, every process the same fixed
// number of iterations (a collective needs every member):
//
//	go test -tags mpi -c -o rt.test ./runtime
//	mpirun --oversubscribe -n 8 ./rt.test -test.run '^$' -test.bench MPIReduceScatter -test.benchtime 50x
//
// Without mpirun they are skipped.

// benchMPI is this process's rank and the job's size once InitMPI ran.
var benchMPI *[2]int

func TestMain(m *testing.M) {
	code := m.Run()
	if benchMPI != nil {
		FinalizeMPI()
	}
	os.Exit(code)
}

// benchWorld is the MPI world of one group of every rank on the gather
// stream, made from a one-instruction bundle.
func benchWorld(b *testing.B) (*MPIWorld, []int) {
	if os.Getenv("OMPI_COMM_WORLD_SIZE") == "" {
		b.Skip("run under mpirun")
	}
	if benchMPI == nil {
		rank, size, err := InitMPI()
		if err != nil {
			b.Fatal(err)
		}
		benchMPI = &[2]int{rank, size}
	}
	rank, size := benchMPI[0], benchMPI[1]
	f := ir.Factor{S0: size, S1: 1}
	bundle := &codegen.Bundle{Topo: ir.Topology{GPUsPerNode: size, Nodes: 1}, Templates: []ir.Program{{
		Streams: [ir.NumStreams][]ir.Instr{ir.CommGather: {{Op: ir.Collective, Coll: ir.ReduceScatter,
			Group: ir.Group{Outer: f, Inner: ir.Factor{S0: 1, S1: 1}}}}}}},
		RankTemplate: make([]int32, size)}
	w, err := NewMPIWorld(bundle, rank)
	if err != nil {
		b.Fatal(err)
	}
	g := make([]int, size)
	for i := range g {
		g[i] = i
	}
	return w, g
}

// BenchmarkMPIReduceScatter: the ordered reduce-scatter (all-to-all, then
// a left fold in group order) against MPI_Reduce_scatter_block's own sum,
// per input size.
func BenchmarkMPIReduceScatter(b *testing.B) {
	w, g := benchWorld(b)
	n := len(g)
	for _, mib := range []int{1, 16, 64} {
		elems := mib << 20 / 4 / n * n
		in, out := make([]float32, elems), make([]float32, elems/n)
		for i := range in {
			in[i] = float32(i%7) * 0.25
		}
		for _, c := range []struct {
			name string
			f    func() error
		}{
			{"ordered", func() error { return w.Comm(w.rank).ReduceScatter(ir.CommGather, g, in, out) }},
			{"native", func() error { return w.NativeReduceScatter(ir.CommGather, g, in, out) }},
		} {
			b.Run(fmt.Sprintf("%dMiB/%s", mib, c.name), func(b *testing.B) {
				b.SetBytes(int64(4 * elems))
				for range b.N {
					if err := c.f(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
