//go:build cgo

package cudalib

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"amspc/engine"
	"amspc/ir"
)

// TestGPUDeviceCollectives: the GPU's engine.DeviceCollectives (NCCL) at
// one rank, the GPU opened as amspc run opens it with --collectives
// device and a world of one rank (World{Size: 1, Local: [0]}, no
// bootstrap: the opener makes NCCL's id). Split([0]) makes communicator
// 0 (the world made on the way), a second Split communicator 1; through
// Collective on stream 1 every kind (all-gather, reduce-scatter,
// all-reduce, broadcast) in fp32 and bf16, and all-gather and broadcast
// in int32, out of place and in place, leaves exactly its input in its
// output (at one rank a sum or a gather is a copy) and not a byte past
// it, and leaves an out-of-place input as it was; sums of int32, an
// unknown communicator and a stream out of range are refused; a
// collective of no elements does nothing. After Abort, Collective and
// Split fail, saying why.
func TestGPUDeviceCollectives(t *testing.T) {
	l, _ := openGPU(t)
	forRank, err := openGPUs(engine.DeviceOptions{
		Collectives: engine.CollectivesDevice,
		World:       engine.DeviceWorld{Size: 1, Local: []int{0}},
	})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := forRank(0)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := dev.(*GPU)
	if !ok {
		t.Fatalf("rank 0's device is a %T", dev)
	}
	t.Cleanup(func() {
		if err := g.closeCollectives(); err != nil {
			t.Error(err)
		}
		if err := g.Close(); err != nil {
			t.Error(err)
		}
	})
	var dc engine.DeviceCollectives = g
	t.Logf("%v, NCCL %s", l, ncclVersion(l.NCCL))
	for want := range 2 {
		c, err := dc.Split([]int{0})
		if err != nil {
			t.Fatal(err)
		}
		if c != want {
			t.Fatalf("Split number %d gave communicator %d", want+1, c)
		}
	}

	rng := rand.New(rand.NewPCG(29, 3))
	const count = 100003 // odd: no dtype's vector width divides it
	buf := func(data []byte) uint64 { return guardedBuf(t, g, data) }
	expect := func(what string, a uint64, want []byte) { t.Helper(); expectGuarded(t, g, what, a, want) }

	kinds := []ir.Coll{ir.AllGather, ir.ReduceScatter, ir.AllReduce, ir.Broadcast}
	ran := 0
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.I32} {
		for _, kind := range kinds {
			for _, inPlace := range []bool{false, true} {
				what := fmt.Sprintf("%v %v", kind, dt)
				if inPlace {
					what += " in place"
				}
				// Random fp32 bits are as good int32s as any.
				data := randomElems(rng, map[ir.DType]DType{ir.F32: F32, ir.BF16: BF16, ir.I32: F32}[dt], count)
				send := buf(data)
				recv := send
				if !inPlace {
					recv = buf(make([]byte, len(data)))
				}
				d := &engine.DeviceColl{Kind: kind, Comm: ran % 2, DType: dt, In: send, Out: recv, Count: count}
				err := dc.Collective(1, d)
				if dt == ir.I32 && (kind == ir.ReduceScatter || kind == ir.AllReduce) {
					if err == nil {
						t.Errorf("%s: taken", what)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				if err := g.Sync(); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				expect(what, recv, data)
				if !inPlace {
					expect(what+" (its input)", send, data)
				}
				ran++
			}
		}
	}
	if ran != 2*(4+4+2) {
		t.Errorf("%d collectives ran", ran)
	}

	// Nothing to do, and what is refused.
	x := buf(make([]byte, 8))
	if err := dc.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: x, Out: x}); err != nil {
		t.Errorf("a collective of no elements: %v", err)
	}
	for what, d := range map[string]struct {
		s int
		c engine.DeviceColl
	}{
		"communicator 2":    {1, engine.DeviceColl{Kind: ir.AllReduce, Comm: 2, DType: ir.F32, In: x, Out: x, Count: 2}},
		"stream 99":         {99, engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: x, Out: x, Count: 2}},
		"broadcast root 1":  {1, engine.DeviceColl{Kind: ir.Broadcast, Root: 1, DType: ir.F32, In: x, Out: x, Count: 2}},
		"f16 all-gather":    {1, engine.DeviceColl{Kind: ir.AllGather, DType: ir.F16, In: x, Out: x, Count: 2}},
		"overlap, shifted":  {1, engine.DeviceColl{Kind: ir.AllReduce, DType: ir.BF16, In: x, Out: x + 2, Count: 2}},
		"negative elements": {1, engine.DeviceColl{Kind: ir.AllGather, DType: ir.F32, In: x, Out: x, Count: -2}},
	} {
		if err := dc.Collective(d.s, &d.c); err == nil {
			t.Errorf("%s: taken", what)
		}
	}
	expect("the refused collectives' buffer", x, make([]byte, 8))

	dc.Abort(errors.New("a test abort"))
	in := buf(make([]byte, 4*count))
	err = dc.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32, In: in, Out: in, Count: count})
	if err == nil || !strings.Contains(err.Error(), "a test abort") {
		t.Errorf("a collective after Abort: %v", err)
	}
	if _, err := dc.Split([]int{0}); err == nil {
		t.Error("Split after Abort succeeded")
	}
	if err := g.Sync(); err != nil {
		t.Errorf("the GPU after Abort: %v", err)
	}
}
