//go:build mpi

package engine

// The MPI comm backend: one rank per process, collectives through Open MPI
// (cgo, pkg-config ompi-c), built only with -tags mpi so that the default
// build needs no C library.
//
// Communicators are made once, at start: one per (stream, member list)
// that any rank's program uses, so the two comm streams (and the
// runtime's control stream) never share one and run really concurrently
// (MPI_THREAD_MULTIPLE). Every process makes them in the same global
// order (MPI_Comm_create_group is collective over the members only), so
// the creation cannot deadlock.
//
// Reductions keep the documented order (comm.go): a reduce-scatter sends
// every member's part to its owner (MPI_Alltoall), which folds the parts
// in group order, left to right, in float32; an all-reduce does the same
// on n element ranges and then all-gathers them. So a plan gives the
// same bits on MPI processes as on local ranks. MPI's own MPI_SUM would
// not (its order depends on the algorithm Open MPI picks).

/*
#cgo pkg-config: ompi-c
#include <mpi.h>
#include <stdlib.h>

static MPI_Comm amspc_world(void) { return MPI_COMM_WORLD; }
static MPI_Comm amspc_comm_null(void) { return MPI_COMM_NULL; }
static MPI_Datatype amspc_float(void) { return MPI_FLOAT; }
// MPI_IN_PLACE is a sentinel address ((void *)1 in Open MPI): held in a
// Go pointer variable it is an invalid pointer, which the Go runtime
// throws on when it copies or shrinks that goroutine's stack. So it never
// leaves C: these wrappers pass it.
static int amspc_allgather(void *in, int in_place, int m, void *out, MPI_Comm c) {
	return MPI_Allgather(in_place ? MPI_IN_PLACE : in, m, MPI_FLOAT, out, m, MPI_FLOAT, c);
}
static int amspc_allgatherv_in_place(void *buf, const int *counts, const int *displs, MPI_Comm c) {
	return MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, counts, displs, MPI_FLOAT, c);
}
static int amspc_init(int *provided) {
	int r = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, provided);
	if (r == MPI_SUCCESS) {
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
	}
	return r;
}
static int amspc_thread_multiple(void) { return MPI_THREAD_MULTIPLE; }
static int amspc_reduce_scatter_sum(void *in, void *out, int n, MPI_Comm c) {
	return MPI_Reduce_scatter_block(in, out, n, MPI_FLOAT, MPI_SUM, c);
}
static int amspc_make(int n, int *ranks, int tag, MPI_Comm *out) {
	MPI_Group world, g;
	int r = MPI_Comm_group(MPI_COMM_WORLD, &world);
	if (r != MPI_SUCCESS) return r;
	r = MPI_Group_incl(world, n, ranks, &g);
	if (r != MPI_SUCCESS) return r;
	r = MPI_Comm_create_group(MPI_COMM_WORLD, g, tag, out);
	MPI_Group_free(&g);
	MPI_Group_free(&world);
	if (r == MPI_SUCCESS) MPI_Comm_set_errhandler(*out, MPI_ERRORS_RETURN);
	return r;
}
*/
import "C"

import (
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"amspc/codegen"
	"amspc/ir"
)

// MPIWorld is this process's view of an MPI job: it runs one rank (its
// MPI_COMM_WORLD rank) of Size.
type MPIWorld struct {
	rank, size int
	comms      map[mpiKey]C.MPI_Comm
	done       chan struct{}
	once       sync.Once
	// OnAbort runs once, on the first Abort: it should report the error
	// (the failing op, stage and position) and end the job, since peers
	// blocked in collectives cannot be interrupted otherwise. nil:
	// MPI_Abort with status 1.
	OnAbort func(err error)
	// reps keeps this process's rank's packings of its replicated
	// weights for every product that reads them unchanged (replica.go;
	// one sharer: the rank itself).
	reps replicaMemo
}

type mpiKey struct {
	stream  int
	members string
}

// InitMPI initialises MPI with MPI_THREAD_MULTIPLE and returns this
// process's rank and the job's size.
func InitMPI() (rank, size int, err error) {
	var provided C.int
	if r := C.amspc_init(&provided); r != C.MPI_SUCCESS {
		return 0, 0, fmt.Errorf("MPI_Init_thread: %s", mpiError(r))
	}
	if provided < C.amspc_thread_multiple() {
		return 0, 0, fmt.Errorf("this MPI library gives thread level %d, not MPI_THREAD_MULTIPLE, which the two comm streams need", int(provided))
	}
	var cr, cs C.int
	C.MPI_Comm_rank(C.amspc_world(), &cr)
	C.MPI_Comm_size(C.amspc_world(), &cs)
	return int(cr), int(cs), nil
}

// NewMPIWorld makes the communicators of every (stream, group) bundle b's
// programs use, and the world's for the control stream. MPI must be
// initialised (InitMPI) with as many processes as b has ranks.
func NewMPIWorld(b *codegen.Bundle, rank int) (*MPIWorld, error) {
	n := b.Topo.Ranks()
	w := &MPIWorld{rank: rank, size: n, comms: map[mpiKey]C.MPI_Comm{}, done: make(chan struct{})}
	type group struct {
		stream  int
		members []int
		key     string
	}
	seen := map[mpiKey]bool{}
	var groups []group
	all := allRanks(n)
	groups = append(groups, group{ControlStream, all, commGroupKey(all)})
	seen[mpiKey{ControlStream, commGroupKey(all)}] = true
	for r := 0; r < n; r++ {
		p := b.Template(r)
		for s := range p.Streams {
			for i := range p.Streams[s] {
				in := &p.Streams[s][i]
				if in.Op != ir.Collective {
					continue
				}
				g := in.Group.Ranks(b.Topo, r)
				k := mpiKey{s, commGroupKey(g)}
				if len(g) < 2 || seen[k] {
					continue
				}
				seen[k] = true
				groups = append(groups, group{s, g, k.members})
			}
		}
	}
	// One global order, so that every member creates its communicators in
	// the same relative order.
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].stream != groups[j].stream {
			return groups[i].stream < groups[j].stream
		}
		return groups[i].key < groups[j].key
	})
	for i, g := range groups {
		if !slices.Contains(g.members, rank) {
			continue
		}
		ranks := make([]C.int, len(g.members))
		for j, m := range g.members {
			ranks[j] = C.int(m)
		}
		var c C.MPI_Comm
		if r := C.amspc_make(C.int(len(ranks)), &ranks[0], C.int(i%32768), &c); r != C.MPI_SUCCESS {
			return nil, fmt.Errorf("making the communicator of %s group [%s]: %s", streamName(g.stream), g.key, mpiError(r))
		}
		w.comms[mpiKey{g.stream, g.key}] = c
	}
	return w, nil
}

func streamName(s int) string {
	if s == ControlStream {
		return "control"
	}
	return ir.StreamName(s)
}

// Size is the number of ranks (processes).
func (w *MPIWorld) Size() int { return w.size }

// Local is this process's rank.
func (w *MPIWorld) Local() []int { return []int{w.rank} }

// Comm is this process's endpoint.
func (w *MPIWorld) Comm(rank int) Comm {
	if rank != w.rank {
		panic(fmt.Sprintf("runtime: MPIWorld.Comm(%d) in the process of rank %d", rank, w.rank))
	}
	return &mpiComm{w: w}
}

// Done is closed by the first Abort.
func (w *MPIWorld) Done() <-chan struct{} { return w.done }

// Abort reports err through OnAbort (which should end the job) or ends it
// with MPI_Abort.
func (w *MPIWorld) Abort(err error) {
	w.once.Do(func() {
		close(w.done)
		if w.OnAbort != nil {
			w.OnAbort(err)
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, fmt.Sprintf("rank %d ", w.rank)) {
			msg = fmt.Sprintf("rank %d: %s", w.rank, msg)
		}
		fmt.Fprintf(os.Stderr, "amspc: %s\n", msg)
		C.MPI_Abort(C.amspc_world(), 1)
	})
}

// Finalize ends this process's part of the job.
func (w *MPIWorld) Finalize() {
	for k, c := range w.comms {
		C.MPI_Comm_free(&c)
		delete(w.comms, k)
	}
	C.MPI_Finalize()
}

// FinalizeMPI ends MPI in a process that made no world (a refused run).
func FinalizeMPI() { C.MPI_Finalize() }

// BarrierMPI returns when every process of the job has called it. A
// process that reports an error every process found should call it
// before ending: the first process to end with an error status ends the
// job, perhaps before the reporting one has printed.
func BarrierMPI() { C.MPI_Barrier(C.amspc_world()) }

// AbortMPI ends every process of the job with status code.
func AbortMPI(code int) { C.MPI_Abort(C.amspc_world(), C.int(code)) }

func mpiError(code C.int) string {
	buf := make([]C.char, C.MPI_MAX_ERROR_STRING)
	var n C.int
	if C.MPI_Error_string(code, &buf[0], &n) != C.MPI_SUCCESS {
		return fmt.Sprintf("MPI error %d", int(code))
	}
	return C.GoStringN(&buf[0], n)
}

type mpiComm struct{ w *MPIWorld }

func (c *mpiComm) Rank() int       { return c.w.rank }
func (c *mpiComm) Abort(err error) { c.w.Abort(err) }

// replicas is the rank's memo of packings of its replicated weights.
func (c *mpiComm) replicas() *replicaMemo { return &c.w.reps }

// comm finds the communicator of (stream, g) and this rank's index in g.
func (c *mpiComm) comm(kind string, stream int, g []int) (C.MPI_Comm, int, error) {
	idx, err := commIndex(g, c.w.size, c.w.rank)
	if err != nil {
		return C.amspc_comm_null(), 0, err
	}
	if len(g) == 1 {
		return C.amspc_comm_null(), 0, nil
	}
	mc, ok := c.w.comms[mpiKey{stream, commGroupKey(g)}]
	if !ok {
		return mc, 0, &CommError{Call: kind, Rank: c.w.rank, Stream: stream, Group: g, Err: fmt.Errorf("%w: no communicator for %s group %v (not in the plan)", ErrCommInvalid, streamName(stream), g)}
	}
	return mc, idx, nil
}

func (c *mpiComm) fail(kind string, stream int, g []int, r C.int) error {
	return &CommError{Call: kind, Rank: c.w.rank, Stream: stream, Group: g, Err: fmt.Errorf("%s", mpiError(r))}
}

func ptr(s []float32) unsafe.Pointer { return unsafe.Pointer(&s[0]) }

func (c *mpiComm) AllGather(stream int, g []int, in, out []float32) error {
	mc, idx, err := c.comm("all_gather", stream, g)
	if err != nil {
		return err
	}
	n, m := len(g), len(in)
	if len(out) != n*m {
		return &CommError{Call: "all_gather", Rank: c.w.rank, Stream: stream, Group: g, Err: fmt.Errorf("%w: output of %d elements for %d x %d", ErrCommInvalid, len(out), n, m)}
	}
	if m == 0 {
		return nil
	}
	if n == 1 {
		copy(out, in)
		return nil
	}
	inPlace := C.int(0)
	if commSame(in, out[idx*m:(idx+1)*m]) {
		inPlace = 1
	}
	if r := C.amspc_allgather(ptr(in), inPlace, C.int(m), ptr(out), mc); r != C.MPI_SUCCESS {
		return c.fail("all_gather", stream, g, r)
	}
	return nil
}

func (c *mpiComm) ReduceScatter(stream int, g []int, in, out []float32) error {
	mc, _, err := c.comm("reduce_scatter", stream, g)
	if err != nil {
		return err
	}
	n, m := len(g), len(out)
	if len(in) != n*m {
		return &CommError{Call: "reduce_scatter", Rank: c.w.rank, Stream: stream, Group: g, Err: fmt.Errorf("%w: input of %d elements for %d x %d", ErrCommInvalid, len(in), n, m)}
	}
	if m == 0 {
		return nil
	}
	if n == 1 {
		copy(out, in)
		return nil
	}
	// Every member's part comes to its owner, which folds them in group
	// order.
	tmp := make([]float32, n*m)
	if r := C.MPI_Alltoall(ptr(in), C.int(m), C.amspc_float(), ptr(tmp), C.int(m), C.amspc_float(), mc); r != C.MPI_SUCCESS {
		return c.fail("reduce_scatter", stream, g, r)
	}
	parts := make([][]float32, n)
	for j := range parts {
		parts[j] = tmp[j*m : (j+1)*m]
	}
	commFold([][]float32{out}, parts)
	return nil
}

func (c *mpiComm) AllReduce(stream int, g []int, buf []float32) error {
	mc, idx, err := c.comm("all_reduce", stream, g)
	if err != nil {
		return err
	}
	n, L := len(g), len(buf)
	if n == 1 || L == 0 {
		return nil
	}
	// Member i owns elements [lo(i), lo(i+1)): it receives every member's
	// copy of them, folds them in group order, and the owners' ranges are
	// then gathered into every member's buffer.
	lo := func(i int) int { return i * L / n }
	counts, displs := make([]C.int, n), make([]C.int, n)
	for i := range n {
		counts[i], displs[i] = C.int(lo(i+1)-lo(i)), C.int(lo(i))
	}
	mine := lo(idx+1) - lo(idx)
	tmp := make([]float32, max(n*mine, 1))
	rcounts, rdispls := make([]C.int, n), make([]C.int, n)
	for j := range n {
		rcounts[j], rdispls[j] = C.int(mine), C.int(j*mine)
	}
	if r := C.MPI_Alltoallv(ptr(buf), &counts[0], &displs[0], C.amspc_float(),
		ptr(tmp), &rcounts[0], &rdispls[0], C.amspc_float(), mc); r != C.MPI_SUCCESS {
		return c.fail("all_reduce", stream, g, r)
	}
	if mine > 0 {
		parts := make([][]float32, n)
		for j := range parts {
			parts[j] = tmp[j*mine : (j+1)*mine]
		}
		commFold([][]float32{buf[lo(idx):lo(idx+1)]}, parts)
	}
	if r := C.amspc_allgatherv_in_place(ptr(buf), &counts[0], &displs[0], mc); r != C.MPI_SUCCESS {
		return c.fail("all_reduce", stream, g, r)
	}
	return nil
}

func (c *mpiComm) Broadcast(stream int, g []int, root int, buf []float32) error {
	mc, _, err := c.comm("broadcast", stream, g)
	if err != nil {
		return err
	}
	ri := -1
	for i, m := range g {
		if m == root {
			ri = i
		}
	}
	if ri < 0 {
		return &CommError{Call: "broadcast", Rank: c.w.rank, Stream: stream, Group: g, Err: fmt.Errorf("%w: root %d is not in the group %v", ErrCommInvalid, root, g)}
	}
	if len(g) == 1 || len(buf) == 0 {
		return nil
	}
	if r := C.MPI_Bcast(ptr(buf), C.int(len(buf)), C.amspc_float(), C.int(ri), mc); r != C.MPI_SUCCESS {
		return c.fail("broadcast", stream, g, r)
	}
	return nil
}

// NativeReduceScatter is MPI_Reduce_scatter_block with MPI_SUM over
// (stream, g): Open MPI's own order of summation, which depends on the
// algorithm it picks, so its bits are not the documented left fold. It
// exists to measure what the ordered ReduceScatter costs against it
// (BenchmarkMPIReduceScatter); the runtime never calls it.
func (w *MPIWorld) NativeReduceScatter(stream int, g []int, in, out []float32) error {
	c := &mpiComm{w: w}
	mc, _, err := c.comm("reduce_scatter", stream, g)
	if err != nil {
		return err
	}
	if r := C.amspc_reduce_scatter_sum(ptr(in), ptr(out), C.int(len(out)), mc); r != C.MPI_SUCCESS {
		return c.fail("reduce_scatter", stream, g, r)
	}
	return nil
}
