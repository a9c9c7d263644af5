//go:build !mpi

package main

import (
	"fmt"

	"amspc/codegen"
)

// openWorld: this build has no MPI, so a process started as one of
// several by mpirun or srun is refused (each would train every rank).
func openWorld(b *codegen.Bundle) (*procWorld, error) {
	if n, ok := launchedSize(); ok && n > 1 {
		return nil, fmt.Errorf("this process is one of %d that mpirun or srun started, but this amspc was built without MPI: build it with `go build -tags mpi ./cmd/amspc` (README, Running on MPI)", n)
	}
	return nil, nil
}
