//go:build !mpi

package main

import (
	"bytes"
	"strings"
	"testing"
)

// A build without MPI started as one of several processes refuses to run
// (each process would train every rank) and says how to build with MPI.
func TestRunRefusesMPILaunchWithoutMPI(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_SIZE", "8")
	var stdout, stderr bytes.Buffer
	st := run([]string{"run", "--steps", "1", "../../testdata/models/tiny.amsp"}, &stdout, &stderr)
	if st != exitUser || !strings.Contains(stderr.String(), "built without MPI: build it with `go build -tags mpi ./cmd/amspc`") {
		t.Errorf("status %d, stderr %q", st, stderr.String())
	}
}
