package cudalib

import (
	"strings"
	"testing"

	"amspc/engine"
)

// TestGPUOrdinal: which GPU each rank runs on, with collectives staged
// through the host (rank mod GPUs) and with NCCL's (a GPU per rank: the
// rank when every rank is in this process, the process's local rank from
// Open MPI's, Slurm's or MPICH's variables when the ranks are
// processes), and the one-sentence refusals: more ranks than GPUs, no
// local rank, a world that does not add up.
func TestGPUOrdinal(t *testing.T) {
	boot := func(int, []byte) ([]byte, error) { return nil, nil }
	inProcess := func(n int) engine.DeviceWorld {
		w := engine.DeviceWorld{Size: n}
		for r := range n {
			w.Local = append(w.Local, r)
		}
		return w
	}
	procs := func(size int, local ...int) engine.DeviceWorld {
		return engine.DeviceWorld{Size: size, Local: local, Bootstrap: boot}
	}
	const dev = engine.CollectivesDevice
	for _, c := range []struct {
		name        string
		rank, gpus  int
		collectives string
		world       engine.DeviceWorld
		env         map[string]string
		want        int
		err         []string // substrings of the error; nil: no error
	}{
		{name: "ordered, shared", rank: 13, gpus: 8, collectives: engine.CollectivesOrdered, want: 5},
		{name: "default is ordered", rank: 7, gpus: 1, want: 0},
		{name: "ordered ignores the launcher", rank: 3, gpus: 2, env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "0"}, want: 1},
		{name: "unknown mode", rank: 0, gpus: 1, collectives: "nccl", err: []string{`"nccl"`, "ordered", "device"}},

		{name: "in process", rank: 5, gpus: 8, collectives: dev, world: inProcess(8), want: 5},
		{name: "in process, one rank", rank: 0, gpus: 1, collectives: dev, world: inProcess(1), want: 0},
		{name: "in process, launcher ignored", rank: 2, gpus: 4, collectives: dev, world: inProcess(4),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "0", "SLURM_LOCALID": "1"}, want: 2},
		{name: "in process, too many", rank: 0, gpus: 1, collectives: dev, world: inProcess(8),
			err: []string{"NCCL cannot put two ranks of a communicator on one GPU: 8 ranks, 1 GPU; use --collectives ordered to share GPUs"}},
		{name: "in process, too many (2)", rank: 1, gpus: 2, collectives: dev, world: inProcess(3),
			err: []string{"3 ranks, 2 GPUs; use --collectives ordered"}},
		{name: "some ranks elsewhere, no bootstrap", rank: 0, gpus: 8, collectives: dev,
			world: engine.DeviceWorld{Size: 8, Local: []int{0}}, err: []string{"bootstrap"}},
		{name: "no world", rank: 0, gpus: 8, collectives: dev, err: []string{"world"}},
		{name: "not a local rank", rank: 3, gpus: 8, collectives: dev, world: procs(8, 2),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "2"}, err: []string{"rank 3", "not one of"}},
		{name: "local ranks repeat", rank: 1, gpus: 8, collectives: dev, world: procs(8, 1, 1), err: []string{"distinct"}},

		{name: "Open MPI", rank: 11, gpus: 8, collectives: dev, world: procs(16, 11),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, want: 3},
		{name: "Open MPI, more processes than GPUs", rank: 1, gpus: 4, collectives: dev, world: procs(8, 1),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"},
			err: []string{"NCCL cannot put two ranks of a communicator on one GPU: 8 ranks on this node, 4 GPUs; use --collectives ordered to share GPUs"}},
		{name: "Open MPI before Slurm", rank: 1, gpus: 8, collectives: dev, world: procs(8, 1),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "8", "SLURM_LOCALID": "0"}, want: 1},
		{name: "Open MPI without its size", rank: 6, gpus: 4, collectives: dev, world: procs(8, 6),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "6"}, err: []string{"7 ranks on this node, 4 GPUs"}},
		{name: "Slurm", rank: 6, gpus: 4, collectives: dev, world: procs(11, 6),
			env: map[string]string{"SLURM_LOCALID": "2", "SLURM_TASKS_PER_NODE": "4(x2),3", "SLURM_NODEID": "1"}, want: 2},
		{name: "Slurm, last node", rank: 10, gpus: 2, collectives: dev, world: procs(11, 10),
			env: map[string]string{"SLURM_LOCALID": "1", "SLURM_TASKS_PER_NODE": "4(x2),3", "SLURM_NODEID": "2"},
			err: []string{"3 ranks on this node, 2 GPUs"}},
		{name: "Slurm, more tasks than GPUs", rank: 0, gpus: 2, collectives: dev, world: procs(8, 0),
			env: map[string]string{"SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "8", "SLURM_NODEID": "0"},
			err: []string{"8 ranks on this node, 2 GPUs"}},
		{name: "Slurm without tasks per node", rank: 1, gpus: 2, collectives: dev, world: procs(2, 1),
			env: map[string]string{"SLURM_LOCALID": "1"}, want: 1},
		{name: "MPICH", rank: 1, gpus: 2, collectives: dev, world: procs(2, 1),
			env: map[string]string{"MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, want: 1},
		{name: "two ranks a process", rank: 3, gpus: 8, collectives: dev, world: procs(8, 2, 3),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, want: 3},
		{name: "two ranks a process, too many", rank: 2, gpus: 4, collectives: dev, world: procs(8, 2, 3),
			env: map[string]string{"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			err: []string{"8 ranks on this node, 4 GPUs"}},
		{name: "no launcher", rank: 1, gpus: 8, collectives: dev, world: procs(8, 1),
			err: []string{"rank 1", "OMPI_COMM_WORLD_LOCAL_RANK (Open MPI)", "SLURM_LOCALID (Slurm)", "is set"}},
		{name: "bad local rank", rank: 1, gpus: 8, collectives: dev, world: procs(8, 1),
			env: map[string]string{"SLURM_LOCALID": "one"}, err: []string{`SLURM_LOCALID="one"`}},
		{name: "no GPU", rank: 0, gpus: 0, err: []string{"no GPU"}},
	} {
		got, err := gpuOrdinal(c.rank, c.gpus, c.collectives, c.world, func(k string) string { return c.env[k] })
		switch {
		case c.err == nil && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == nil && got != c.want:
			t.Errorf("%s: GPU %d, want %d", c.name, got, c.want)
		case c.err != nil && err == nil:
			t.Errorf("%s: GPU %d, want an error", c.name, got)
		case c.err != nil:
			msg := err.Error()
			for _, s := range c.err {
				if !strings.Contains(msg, s) {
					t.Errorf("%s: %q does not say %q", c.name, msg, s)
				}
			}
			if strings.Count(strings.TrimSuffix(msg, "."), ". ") > 0 || strings.Contains(msg, "\n") {
				t.Errorf("%s: %q is not one sentence", c.name, msg)
			}
		}
	}
}

// TestSlurmTasksOnNode: SLURM_TASKS_PER_NODE's compressed counts.
func TestSlurmTasksOnNode(t *testing.T) {
	for _, c := range []struct {
		perNode, node string
		want          int
	}{
		{"8", "0", 8}, {"4(x2),3", "0", 4}, {"4(x2),3", "1", 4}, {"4(x2),3", "2", 3}, {"4(x2),3", "3", 0},
		{"2,1(x3)", "3", 1}, {"", "0", 0}, {"4", "", 0}, {"4(x", "0", 0}, {"a", "0", 0},
	} {
		if got := slurmTasksOnNode(c.perNode, c.node); got != c.want {
			t.Errorf("SLURM_TASKS_PER_NODE=%q at node %q: %d, want %d", c.perNode, c.node, got, c.want)
		}
	}
}
