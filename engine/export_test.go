package engine

import "fmt"

// SharedGatherBuffers is how many of rank 0's buffers a shared all-gather
// can fill (for tests in package engine_test).
func SharedGatherBuffers(r *Run) int {
	n := 0
	for _, ok := range r.ranks[0].shareable {
		if ok {
			n++
		}
	}
	return n
}

// ReplicaPackings is how many matmuls of r's ranks used a packing of a
// replicated weight that another rank made, how many times a rank was
// done with one after its last use in the step, and how many packings
// are alive.
func ReplicaPackings(r *Run) (reused, early int64, live int) {
	if rs, ok := r.World.Comm(0).(replicaSharer); ok {
		m := rs.replicas()
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.reused.Load(), m.early.Load(), len(m.m)
	}
	return 0, 0, 0
}

// Every test that trains local ranks checks that the replicas sharing a
// weight's packing hold the same bits (replica.go).
func init() { verifyReplicas, countPacks = true, true }

// PackCalls is how many products each local rank ran since the last
// call (by rank) that packed their weight or first used a shared
// packing.
func PackCalls(r *Run) map[int]int64 {
	out := map[int]int64{}
	for _, k := range r.ranks {
		out[k.r] = k.packCalls
		k.packCalls = 0
	}
	return out
}

// NoReplicaChecks turns that check off until the returned func, for the
// benchmarks, which time what `amspc run` runs.
func NoReplicaChecks() (restore func()) {
	verifyReplicas = false
	return func() { verifyReplicas = true }
}

// StoredLaunches is how many instructions a device backend ran through
// their stored plans (gpu.Plan.Stored).
func StoredLaunches(be Backend) int64 { return be.(*deviceBackend).storedRuns.Load() }

// GraphReplays is how many steps a device backend replayed as a graph.
func GraphReplays(be Backend) int64 { return be.(*deviceBackend).replays.Load() }

// StaleGraphInputs keeps a device backend's replays from refilling the
// token windows (tokens) or the per-step scratch (!tokens): a mutation.
func StaleGraphInputs(be Backend, tokens bool) {
	be.(*deviceBackend).staleInputs = func(t bool) bool { return t == tokens }
}

// RankBuffer is rank r's buffer named name, read back (tests).
func RankBuffer(run *Run, r int, name string) ([]float32, error) {
	for _, k := range run.ranks {
		if k.r != r {
			continue
		}
		for id, b := range k.p.Buffers {
			if b.Name == name {
				return k.read(int32(id))
			}
		}
		return nil, fmt.Errorf("rank %d has no buffer %s", r, name)
	}
	return nil, fmt.Errorf("no rank %d here", r)
}

// ReadTensors reads every tensor of the checkpoint in dir, whole, by
// name (tests).
func ReadTensors(t interface{ Fatal(...any) }, dir string) map[string][]float32 {
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	pr := newPieceReader(dir, m)
	out := map[string][]float32{}
	for i := range m.Tensors {
		mt := &m.Tensors[i]
		n, _ := ir64(mt.Shape)
		x := make([]float32, n)
		if err := pr.read(mt, 0, x); err != nil {
			t.Fatal(err)
		}
		out[mt.Name] = x
	}
	return out
}
