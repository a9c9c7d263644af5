//go:build cgo

package cudalib

import (
	"errors"
	"strings"
	"testing"

	"amspc/engine"
	"amspc/ir"
)

// TestCheckColl: what Collective hands NCCL, checked without a GPU: the
// dtype (int32 only where nothing is summed), the broadcast's root, and
// the buffers, which either do not overlap or overlap exactly as NCCL's
// in-place forms (an all-gather's input at this member's part of its
// output, a reduce-scatter's output at this member's part of its input,
// an all-reduce or broadcast on one buffer).
func TestCheckColl(t *testing.T) {
	const base = uint64(1 << 20)
	for _, c := range []struct {
		name          string
		d             engine.DeviceColl
		members, rank int
		want          DType
		err           string // a substring of the error; "": none
	}{
		{"all-gather", engine.DeviceColl{Kind: ir.AllGather, DType: ir.F32, In: base, Out: base + 4096, Count: 256}, 4, 1, F32, ""},
		{"all-gather in place", engine.DeviceColl{Kind: ir.AllGather, DType: ir.BF16, In: base + 2*256*2, Out: base, Count: 256}, 4, 2, BF16, ""},
		{"all-gather at another member's part", engine.DeviceColl{Kind: ir.AllGather, DType: ir.F32, In: base + 4*256, Out: base, Count: 256}, 4, 2, 0, "in place"},
		{"all-gather just past its output", engine.DeviceColl{Kind: ir.AllGather, DType: ir.F32, In: base + 4*4*256, Out: base, Count: 256}, 4, 3, F32, ""},
		{"all-gather of i32", engine.DeviceColl{Kind: ir.AllGather, DType: ir.I32, In: base, Out: base + 1<<16, Count: 7}, 2, 0, I32, ""},
		{"reduce-scatter", engine.DeviceColl{Kind: ir.ReduceScatter, DType: ir.BF16, In: base, Out: base + 1<<16, Count: 300}, 8, 5, BF16, ""},
		{"reduce-scatter in place", engine.DeviceColl{Kind: ir.ReduceScatter, DType: ir.F32, In: base, Out: base + 3*4*100, Count: 100}, 4, 3, F32, ""},
		{"reduce-scatter off its part", engine.DeviceColl{Kind: ir.ReduceScatter, DType: ir.F32, In: base, Out: base + 4, Count: 100}, 4, 0, 0, "in place"},
		{"reduce-scatter of i32", engine.DeviceColl{Kind: ir.ReduceScatter, DType: ir.I32, In: base, Out: base + 1<<16, Count: 1}, 2, 0, 0, "sum"},
		{"all-reduce in place", engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: base, Out: base, Count: 1000}, 2, 1, F32, ""},
		{"all-reduce shifted", engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: base, Out: base + 4, Count: 1000}, 2, 1, 0, "overlap"},
		{"all-reduce of i32", engine.DeviceColl{Kind: ir.AllReduce, DType: ir.I32, In: base, Out: base, Count: 1}, 2, 1, 0, "sum"},
		{"broadcast", engine.DeviceColl{Kind: ir.Broadcast, DType: ir.I32, Root: 2, In: base, Out: base, Count: 10}, 3, 0, I32, ""},
		{"broadcast from outside", engine.DeviceColl{Kind: ir.Broadcast, DType: ir.F32, Root: 3, In: base, Out: base, Count: 10}, 3, 0, 0, "member 3 of 3"},
		{"f16", engine.DeviceColl{Kind: ir.AllGather, DType: ir.F16, In: base, Out: base + 1<<16, Count: 1}, 2, 0, 0, "f32, bf16 or i32"},
		{"negative count", engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: base, Out: base, Count: -1}, 2, 0, 0, "-1 elements"},
		{"no such kind", engine.DeviceColl{Kind: ir.NumColls, DType: ir.F32, In: base, Out: base, Count: 1}, 2, 0, 0, "no NCCL collective"},
		{"empty", engine.DeviceColl{Kind: ir.ReduceScatter, DType: ir.F32, In: base, Out: base + 4, Count: 0}, 2, 1, F32, ""},
	} {
		got, err := checkColl(&c.d, c.members, c.rank)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.err == "" && got != c.want:
			t.Errorf("%s: dtype %v, want %v", c.name, got, c.want)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: error %v, want one saying %q", c.name, err, c.err)
		}
	}
	if v, err := ncclType(I32); err != nil || v != 2 {
		t.Errorf("i32 is NCCL type %d (%v), want ncclInt32 = 2", v, err)
	}
}

// TestDeviceCollectivesState: without a GPU, what Split and Collective
// refuse before calling NCCL: a GPU that joined no world, a group that
// leaves its rank out or repeats one, a communicator never split, and
// every call after Abort, which says why.
func TestDeviceCollectivesState(t *testing.T) {
	g := &GPU{ctx: &Context{Device: Device{Name: "test GPU"}}}
	if _, err := g.Split([]int{0}); err == nil || !strings.Contains(err.Error(), "--collectives ordered") {
		t.Errorf("Split on a GPU without a world: %v", err)
	}
	g.Abort(errors.New("no world")) // nothing to abort
	if err := g.joinWorld(4, 1, NCCLID{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.closeCollectives() })
	if err := g.joinWorld(4, 1, NCCLID{}); err == nil {
		t.Error("a GPU joined two worlds")
	}
	for _, members := range [][]int{{0, 2}, {1, 1}, {1, 4}, {}} {
		if _, err := g.Split(members); err == nil {
			t.Errorf("rank 1 split %v", members)
		}
	}
	d := &engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, Comm: 0, In: 1 << 20, Out: 1 << 20, Count: 4}
	if err := g.Collective(1, d); err == nil || !strings.Contains(err.Error(), "communicator 0") {
		t.Errorf("a collective on a communicator never split: %v", err)
	}
	g.Abort(errors.New("rank 3 failed"))
	g.Abort(errors.New("a second abort"))
	for what, err := range map[string]error{"Split": func() error { _, err := g.Split([]int{0, 1}); return err }(), "Collective": g.Collective(1, d)} {
		if err == nil || !strings.Contains(err.Error(), "aborted") || !strings.Contains(err.Error(), "rank 3 failed") {
			t.Errorf("%s after Abort: %v", what, err)
		}
	}
}
