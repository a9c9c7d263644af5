package cudalib

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"amspc/engine"
)

// Which GPU a rank runs on (issue 29, item 3). With collectives staged
// through the host (--collectives ordered) any number of ranks share the
// GPUs: rank r takes GPU r mod the GPUs. With NCCL's (--collectives
// device) no two ranks of one communicator may share a GPU, so each rank
// has one of its own: when every rank is in this process, rank r takes
// GPU r; when the ranks are processes (mpirun, srun), a rank takes its
// process's local rank on the node, which the launcher says in its
// environment (localRankVars).

// localRankVars are the launchers' variables for a process's local rank
// on its node and the number of processes there, looked up in this order
// (Open MPI's mpirun sets its own even inside a Slurm allocation, whose
// variables it inherits, so it comes first).
var localRankVars = []struct {
	launcher, rank, size string
}{
	{"Open MPI", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
	{"Slurm", "SLURM_LOCALID", ""}, // the size: SLURM_TASKS_PER_NODE at SLURM_NODEID
	{"MPICH", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
}

// gpuOrdinal is the GPU (an ordinal of the gpus the driver sees) that
// rank runs on, for a run whose collectives are collectives
// (engine.CollectivesOrdered, "" or engine.CollectivesDevice) among the
// ranks of w; getenv reads the launcher's variables (os.Getenv). Its
// error is one sentence.
func gpuOrdinal(rank, gpus int, collectives string, w engine.DeviceWorld, getenv func(string) string) (int, error) {
	if gpus < 1 {
		return 0, fmt.Errorf("no GPU for rank %d", rank)
	}
	switch collectives {
	case "", engine.CollectivesOrdered:
		if rank < 0 {
			return 0, fmt.Errorf("rank %d", rank)
		}
		return rank % gpus, nil
	case engine.CollectivesDevice:
	default:
		return 0, fmt.Errorf("collectives %q: they are %s or %s", collectives, engine.CollectivesOrdered, engine.CollectivesDevice)
	}
	if err := checkWorld(w); err != nil {
		return 0, err
	}
	at := slices.Index(w.Local, rank)
	if at < 0 {
		return 0, fmt.Errorf("rank %d is not one of this process's ranks %v", rank, w.Local)
	}
	if w.Bootstrap == nil {
		// Every rank in this process: rank r on GPU r.
		if w.Size > gpus {
			return 0, tooFewGPUs(w.Size, gpus, "")
		}
		return rank, nil
	}
	// One or more ranks per process, several processes: the process's
	// local rank picks its GPUs, one per rank it runs (the ranks of
	// every process on the node being as many).
	local, size, err := localRank(getenv)
	if err != nil {
		return 0, fmt.Errorf("rank %d: %w", rank, err)
	}
	per := len(w.Local)
	if n := size * per; n > gpus {
		return 0, tooFewGPUs(n, gpus, " on this node")
	}
	return local*per + at, nil
}

// checkWorld checks what a device-collective run says of its world: its
// size, this process's ranks (distinct, in range), and that a world
// whose ranks are not all here has a way to share NCCL's id.
func checkWorld(w engine.DeviceWorld) error {
	if w.Size < 1 || len(w.Local) == 0 {
		return fmt.Errorf("collectives on the device need the run's world of ranks (%d ranks, %d here)", w.Size, len(w.Local))
	}
	seen := map[int]bool{}
	for _, r := range w.Local {
		if r < 0 || r >= w.Size || seen[r] {
			return fmt.Errorf("this process's ranks %v are not distinct ranks of a world of %d", w.Local, w.Size)
		}
		seen[r] = true
	}
	if w.Bootstrap == nil && len(w.Local) != w.Size {
		return fmt.Errorf("a world of %d ranks, %d of them in this process, needs a bootstrap to share NCCL's id with the others", w.Size, len(w.Local))
	}
	return nil
}

// tooFewGPUs refuses n ranks on gpus GPUs with NCCL.
func tooFewGPUs(n, gpus int, where string) error {
	unit := "GPUs"
	if gpus == 1 {
		unit = "GPU"
	}
	return fmt.Errorf("NCCL cannot put two ranks of a communicator on one GPU: %d ranks%s, %d %s; use --collectives ordered to share GPUs", n, where, gpus, unit)
}

// localRank is this process's local rank on its node and the number of
// processes on the node (at least local+1), from the first launcher
// whose local-rank variable is set.
func localRank(getenv func(string) string) (local, size int, err error) {
	for _, v := range localRankVars {
		s := getenv(v.rank)
		if s == "" {
			continue
		}
		local, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || local < 0 {
			return 0, 0, fmt.Errorf("%s=%q is not a local rank", v.rank, s)
		}
		size := 0
		if v.size != "" {
			size, _ = strconv.Atoi(strings.TrimSpace(getenv(v.size)))
		} else {
			size = slurmTasksOnNode(getenv("SLURM_TASKS_PER_NODE"), getenv("SLURM_NODEID"))
		}
		return local, max(size, local+1), nil
	}
	names := make([]string, len(localRankVars))
	for i, v := range localRankVars {
		names[i] = fmt.Sprintf("%s (%s)", v.rank, v.launcher)
	}
	return 0, 0, fmt.Errorf("its process cannot tell its local rank on the node, which picks its GPU: none of %s is set", strings.Join(names, ", "))
}

// slurmTasksOnNode is the number of tasks Slurm's SLURM_TASKS_PER_NODE
// (e.g. "4(x2),3": 4 on each of the first two nodes, 3 on the third)
// gives node index node (SLURM_NODEID), or 0 when either cannot be read.
func slurmTasksOnNode(perNode, node string) int {
	id, err := strconv.Atoi(strings.TrimSpace(node))
	if err != nil || id < 0 || perNode == "" {
		return 0
	}
	for _, part := range strings.Split(perNode, ",") {
		count, reps := part, "1"
		if i := strings.Index(part, "(x"); i >= 0 && strings.HasSuffix(part, ")") {
			count, reps = part[:i], part[i+2:len(part)-1]
		}
		n, err1 := strconv.Atoi(count)
		k, err2 := strconv.Atoi(reps)
		if err1 != nil || err2 != nil || n < 0 || k < 1 {
			return 0
		}
		if id < k {
			return n
		}
		id -= k
	}
	return 0
}
