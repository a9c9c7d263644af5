//go:build mpi

package main

import (
	"fmt"
	"os"

	"amspc/codegen"
	"amspc/engine"
)

// openWorld joins the MPI job that started this process (mpirun, srun),
// one rank per process, the rank being the process's MPI rank; nil when
// no launcher started it (the ranks are then goroutines of this process).
// A job whose size is not the plan's rank count is refused on every
// process: the error is returned with a procWorld without a world, so
// that only rank 0 prints it, before every process finishes.
func openWorld(b *codegen.Bundle) (*procWorld, error) {
	if _, ok := launchedSize(); !ok {
		return nil, nil
	}
	rank, size, err := engine.InitMPI()
	if err != nil {
		return nil, err
	}
	pw := &procWorld{rank: rank, abort: engine.AbortMPI, barrier: engine.BarrierMPI, finish: engine.FinalizeMPI}
	if n := b.Topo.Ranks(); size != n {
		launcher := "mpirun"
		if os.Getenv("SLURM_STEP_ID") != "" {
			launcher = "srun"
		}
		return pw, fmt.Errorf("the job has %d processes, the plan %d ranks (%d nodes x %d per node): launch it with %s -n %d", size, n, b.Topo.Nodes, b.Topo.GPUsPerNode, launcher, n)
	}
	w, err := engine.NewMPIWorld(b, rank)
	if err != nil {
		// This process's own failure: it reports it and ends the job.
		fmt.Fprintf(os.Stderr, "amspc run: rank %d: %v\n", rank, err)
		engine.AbortMPI(1)
		os.Exit(1) // not reached: MPI_Abort ends the process
	}
	pw.world, pw.finish = w, w.Finalize
	return pw, nil
}
