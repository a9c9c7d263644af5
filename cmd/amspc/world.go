package main

import (
	"os"
	"strconv"

	"amspc/engine"
)

// procWorld is the MPI job this process is one rank of.
type procWorld struct {
	world engine.World
	rank  int
	// finish ends the process's part of the job after a clean run; abort
	// ends every process of the job with a status; barrier returns when
	// every process has called it.
	finish  func()
	abort   func(status int)
	barrier func()
}

// launchedSize is the number of processes mpirun (OMPI_COMM_WORLD_SIZE),
// a PMI launcher (PMI_SIZE) or srun (SLURM_NTASKS, inside a job step)
// started, when one of them started this process.
func launchedSize() (int, bool) {
	keys := []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}
	if os.Getenv("SLURM_STEP_ID") != "" {
		keys = append(keys, "SLURM_NTASKS")
	}
	for _, k := range keys {
		if n, err := strconv.Atoi(os.Getenv(k)); err == nil && n > 0 {
			return n, true
		}
	}
	return 0, false
}
