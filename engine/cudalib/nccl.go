//go:build cgo

package cudalib

/*
#include "dl.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// NCCL's collectives on device memory, enqueued on a stream: a world
// communicator made from a unique id every rank shares (NCCLUniqueID on
// one rank, sent to the others by the caller, e.g. over MPI), and
// communicators split from it (one per group). The values below are
// nccl.h's (NVIDIA/nccl src/nccl.h.in).

// NCCLID is a communicator's unique id (ncclUniqueId:
// NCCL_UNIQUE_ID_BYTES = 128 bytes).
type NCCLID [128]byte

// NCCLNoColor is Split's color for a rank that joins no communicator
// (NCCL_SPLIT_NOCOLOR).
const NCCLNoColor = -1

// I32 is int32 (CUDA_R_32I) for NCCL's collectives that do not sum:
// all-gather and broadcast (token ids).
const I32 DType = 10

const (
	ncclInt32    = 2 // ncclDataType_t
	ncclFloat32  = 7
	ncclBfloat16 = 9 // since NCCL 2.10
	ncclSum      = 0 // ncclRedOp_t

	ncclInProgress = 7 // ncclResult_t: a non-blocking call still running

	// ncclMinVersion is NCCL 2.18.0's NCCL_VERSION_CODE: ncclCommSplit
	// came in 2.18.
	ncclMinVersion = 21800
)

// NCCLError is a failed NCCL call.
type NCCLError struct {
	Call string
	Code int    // ncclResult_t
	Text string // ncclGetErrorString's, and ncclGetLastError's when it has one
}

func (e *NCCLError) Error() string {
	return fmt.Sprintf("%s: %s (NCCL error %d)", e.Call, e.Text, e.Code)
}

// ncclCheck turns an NCCL result into an error naming the call. It reads
// NCCL's last error message of this thread, so call it on the thread
// that made the call (inside Context.do).
func ncclCheck(call string, r C.ncclResult_t) error {
	if r == 0 {
		return nil
	}
	if r == C.AMSP_NCCL_NOSYM {
		// ncclReady rules this out; a wrapper says it rather than crash.
		return &NCCLError{Call: call, Code: int(r), Text: "this NCCL lacks it"}
	}
	text := C.GoString(C.amsp_ncclGetErrorString(r))
	if last := C.GoString(C.amsp_ncclGetLastError()); last != "" {
		text += ": " + last
	}
	return &NCCLError{Call: call, Code: int(r), Text: text}
}

// ncclVersion spells an NCCL_VERSION_CODE: X*1000+Y*100+Z up to 2.8,
// X*10000+Y*100+Z since 2.9 (nccl.h's NCCL_VERSION).
func ncclVersion(code int) string {
	if code < 10000 {
		return fmt.Sprintf("%d.%d.%d", code/1000, code/100%10, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/10000, code/100%100, code%100)
}

var (
	ncclOnce sync.Once
	ncclErr  error
)

// ncclReady says, in one sentence, why the loaded NCCL cannot run
// amspc's collectives: an entry point it lacks, or its version.
func ncclReady() error {
	ncclOnce.Do(func() {
		l, err := Load()
		if err != nil {
			ncclErr = err
			return
		}
		path := l.Paths[libNCCL]
		if name := C.amsp_nccl_missing(); name != nil {
			ncclErr = fmt.Errorf("NCCL %s (%s) lacks %s: amspc's NCCL collectives need NCCL 2.18 or later", ncclVersion(l.NCCL), path, C.GoString(name))
		} else if l.NCCL < ncclMinVersion {
			ncclErr = fmt.Errorf("NCCL %s (%s) is older than 2.18, which amspc's NCCL collectives need (ncclCommSplit)", ncclVersion(l.NCCL), path)
		}
	})
	return ncclErr
}

// ncclType is NCCL's data type for dt.
func ncclType(dt DType) (C.int, error) {
	switch dt {
	case F32:
		return ncclFloat32, nil
	case BF16:
		return ncclBfloat16, nil
	case I32:
		return ncclInt32, nil
	}
	return 0, fmt.Errorf("NCCL collectives take fp32, bf16 or int32, not %v", dt)
}

// NCCLUniqueID makes a new communicator's id (ncclGetUniqueId): one rank
// calls it and hands the bytes to every rank's NCCLInit.
func (l *Libs) NCCLUniqueID() (NCCLID, error) {
	var id NCCLID
	if err := ncclReady(); err != nil {
		return id, err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return id, ncclCheck("ncclGetUniqueId", C.amsp_ncclGetUniqueId(unsafe.Pointer(&id[0])))
}

// NCCLGroup runs f between ncclGroupStart and ncclGroupEnd, on one
// locked OS thread (NCCL keeps a group per thread): the collectives f
// enqueues, on any communicators, start as one (as every rank's group
// must hold the same ones). ncclGroupEnd runs even when f fails.
func (l *Libs) NCCLGroup(f func() error) error {
	if err := ncclReady(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := ncclCheck("ncclGroupStart", C.amsp_ncclGroupStart()); err != nil {
		return err
	}
	ferr := f()
	err := ncclCheck("ncclGroupEnd", C.amsp_ncclGroupEnd())
	if ferr != nil {
		return ferr
	}
	return err
}

// NCCLComm is an NCCL communicator on a context's GPU. Its calls are
// serialized (NCCL's communicators are not safe for concurrent use), but
// every rank must issue a communicator's collectives in the same order:
// a caller whose streams issue collectives concurrently gives each
// stream communicators of its own (Split).
type NCCLComm struct {
	c           *Context
	mu          sync.Mutex
	comm        C.ncclComm_t
	ranks, rank int
}

// NCCLInit joins rank of nranks to the communicator of id on c's GPU
// (ncclCommInitRank): it returns once all nranks have joined. One
// communicator cannot have two ranks on one GPU.
func (c *Context) NCCLInit(nranks, rank int, id NCCLID) (*NCCLComm, error) {
	if err := ncclReady(); err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("NCCL rank %d of %d", rank, nranks)
	}
	n := &NCCLComm{c: c, ranks: nranks, rank: rank}
	err := c.do(func() error {
		return ncclCheck("ncclCommInitRank", C.amsp_ncclCommInitRank(&n.comm, C.int(nranks), unsafe.Pointer(&id[0]), C.int(rank)))
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// Ranks and Rank are the communicator's size and this rank in it.
func (n *NCCLComm) Ranks() int { return n.ranks }
func (n *NCCLComm) Rank() int  { return n.rank }

// call runs f with the communicator, on c's locked thread, one call at a
// time.
func (n *NCCLComm) call(what string, f func(C.ncclComm_t) C.ncclResult_t) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.comm == nil {
		return fmt.Errorf("%s on a destroyed NCCL communicator", what)
	}
	return n.c.do(func() error { return ncclCheck(what, f(n.comm)) })
}

// Split makes the communicator of the ranks that pass the same color,
// ordered by key then by rank here (ncclCommSplit, with this
// communicator's configuration). Every rank calls it; one that passes
// NCCLNoColor joins none and gets nil.
func (n *NCCLComm) Split(color, key int) (*NCCLComm, error) {
	if color < 0 && color != NCCLNoColor {
		return nil, fmt.Errorf("NCCL split color %d: colors are non-negative, or NCCLNoColor", color)
	}
	var nc C.ncclComm_t
	var size, rank C.int
	err := n.call("ncclCommSplit", func(comm C.ncclComm_t) C.ncclResult_t {
		if r := C.amsp_ncclCommSplit(comm, C.int(color), C.int(key), &nc); r != 0 || nc == nil {
			return r
		}
		if r := C.amsp_ncclCommCount(nc, &size); r != 0 {
			return r
		}
		return C.amsp_ncclCommUserRank(nc, &rank)
	})
	if err != nil {
		if nc != nil {
			n.c.do(func() error { C.amsp_ncclCommAbort(nc); return nil })
		}
		return nil, err
	}
	if nc == nil {
		return nil, nil
	}
	return &NCCLComm{c: n.c, comm: nc, ranks: int(size), rank: int(rank)}, nil
}

// The collectives enqueue on stream s (a GPU's: GPU.Stream) and return;
// they read and write device memory in s's order, so a caller orders
// them against other streams with events. Counts are elements of dt
// (F32, BF16 or I32); sums are NCCL's (their order depends on its
// algorithm).

// AllGather gathers every rank's sendCount elements at send into recv
// (Ranks x sendCount elements, rank i's at i*sendCount). In place when
// send is recv + Rank*sendCount.
func (n *NCCLComm) AllGather(s Stream, send, recv Ptr, sendCount int64, dt DType) error {
	t, err := ncclType(dt)
	if err != nil || sendCount < 0 {
		return countErr("ncclAllGather", sendCount, err)
	}
	return n.call("ncclAllGather", func(comm C.ncclComm_t) C.ncclResult_t {
		return C.amsp_ncclAllGather(C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(sendCount), t, comm, s.h)
	})
}

// ReduceScatter sums the ranks' send (Ranks x recvCount elements) and
// leaves part Rank of the sum in recv (recvCount elements). In place
// when recv is send + Rank*recvCount.
func (n *NCCLComm) ReduceScatter(s Stream, send, recv Ptr, recvCount int64, dt DType) error {
	t, err := ncclType(dt)
	if err != nil || recvCount < 0 {
		return countErr("ncclReduceScatter", recvCount, err)
	}
	return n.call("ncclReduceScatter", func(comm C.ncclComm_t) C.ncclResult_t {
		return C.amsp_ncclReduceScatter(C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(recvCount), t, ncclSum, comm, s.h)
	})
}

// AllReduce sums the ranks' count elements at send into every rank's
// recv. In place when send is recv.
func (n *NCCLComm) AllReduce(s Stream, send, recv Ptr, count int64, dt DType) error {
	t, err := ncclType(dt)
	if err != nil || count < 0 {
		return countErr("ncclAllReduce", count, err)
	}
	return n.call("ncclAllReduce", func(comm C.ncclComm_t) C.ncclResult_t {
		return C.amsp_ncclAllReduce(C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count), t, ncclSum, comm, s.h)
	})
}

// Broadcast copies root's count elements at send into every rank's
// recv (send is read on root only). In place when send is recv.
func (n *NCCLComm) Broadcast(s Stream, send, recv Ptr, count int64, dt DType, root int) error {
	t, err := ncclType(dt)
	if err != nil || count < 0 {
		return countErr("ncclBroadcast", count, err)
	}
	if root < 0 || root >= n.ranks {
		return fmt.Errorf("ncclBroadcast from rank %d of %d", root, n.ranks)
	}
	return n.call("ncclBroadcast", func(comm C.ncclComm_t) C.ncclResult_t {
		return C.amsp_ncclBroadcast(C.CUdeviceptr(send), C.CUdeviceptr(recv), C.size_t(count), t, C.int(root), comm, s.h)
	})
}

// countErr is a collective's argument error: err, or a negative count.
func countErr(call string, count int64, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	return fmt.Errorf("%s of %d elements", call, count)
}

// AsyncError is an error NCCL met running the communicator's
// collectives (a peer gone, a network failure), or nil: a rank that
// waits on a collective polls it, and aborts the communicator on one.
func (n *NCCLComm) AsyncError() error {
	var r C.ncclResult_t
	if err := n.call("ncclCommGetAsyncError", func(comm C.ncclComm_t) C.ncclResult_t {
		return C.amsp_ncclCommGetAsyncError(comm, &r)
	}); err != nil {
		return err
	}
	if r == 0 || r == ncclInProgress {
		return nil
	}
	return n.c.do(func() error { return ncclCheck("NCCL communicator", r) })
}

// Abort stops the communicator's collectives in flight and frees it
// (ncclCommAbort): what a rank does when another has failed, since a
// collective whose peers never come would wait for ever.
func (n *NCCLComm) Abort() error { return n.free("ncclCommAbort", true) }

// Destroy frees the communicator once its collectives are done
// (ncclCommDestroy).
func (n *NCCLComm) Destroy() error { return n.free("ncclCommDestroy", false) }

func (n *NCCLComm) free(what string, abort bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.comm == nil {
		return nil
	}
	comm := n.comm
	n.comm = nil
	return n.c.do(func() error {
		if abort {
			return ncclCheck(what, C.amsp_ncclCommAbort(comm))
		}
		return ncclCheck(what, C.amsp_ncclCommDestroy(comm))
	})
}
