//go:build cgo

package cudalib

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// TestNCCLVersion: NCCL_VERSION_CODE's two spellings (nccl.h's
// NCCL_VERSION: X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z since 2.9),
// and the data types the collectives take.
func TestNCCLVersion(t *testing.T) {
	for code, want := range map[int]string{2804: "2.8.4", 21805: "2.18.5", 23007: "2.30.7", 20903: "2.9.3"} {
		if got := ncclVersion(code); got != want {
			t.Errorf("ncclVersion(%d) = %s, want %s", code, got, want)
		}
	}
	if v, err := ncclType(F32); err != nil || v != 7 {
		t.Errorf("fp32 is NCCL type %d (%v), want ncclFloat32 = 7", v, err)
	}
	if v, err := ncclType(BF16); err != nil || v != 9 {
		t.Errorf("bf16 is NCCL type %d (%v), want ncclBfloat16 = 9", v, err)
	}
	if _, err := ncclType(DType(2)); err == nil {
		t.Error("NCCL took cudaDataType 2 (fp16)")
	}
}

// ncclCase is one collective over count elements of a dtype, out of
// place or in place: with one rank each is a copy of send into recv.
type ncclCase struct {
	kind    string
	dt      DType
	inPlace bool
}

// run enqueues the case's collective on s.
func (c ncclCase) run(n *NCCLComm, s Stream, send, recv Ptr, count int64) error {
	switch c.kind {
	case "all-gather":
		return n.AllGather(s, send, recv, count, c.dt)
	case "reduce-scatter":
		return n.ReduceScatter(s, send, recv, count, c.dt)
	case "all-reduce":
		return n.AllReduce(s, send, recv, count, c.dt)
	case "broadcast":
		return n.Broadcast(s, send, recv, count, c.dt, 0)
	}
	return fmt.Errorf("no collective %s", c.kind)
}

func elemSize(dt DType) int {
	if dt == BF16 {
		return 2
	}
	return 4
}

// randomElems is count random normal values of dt (bf16: the top half of
// an fp32 with 8 significant bits, so exactly a bf16), little-endian.
func randomElems(rng *rand.Rand, dt DType, count int) []byte {
	raw := make([]byte, count*elemSize(dt))
	for i := range count {
		v := float32(rng.NormFloat64())
		if v == 0 {
			v = 1
		}
		if dt == BF16 {
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(math.Float32bits(v)>>16))
		} else {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
	}
	return raw
}

// guardBytes follow every buffer's elements, holding guardByte: a
// collective that writes past its count changes them.
const (
	guardBytes = 256
	guardByte  = 0xa5
)

// guardedBuf is device memory holding data, then the guard.
func guardedBuf(t *testing.T, g *GPU, data []byte) uint64 {
	t.Helper()
	a := gpuBuf(t, g, int64(len(data)+guardBytes))
	if err := g.Upload(a, append(append([]byte(nil), data...), bytes.Repeat([]byte{guardByte}, guardBytes)...)); err != nil {
		t.Fatal(err)
	}
	return a
}

// expectGuarded checks that a holds want, then the guard untouched.
func expectGuarded(t *testing.T, g *GPU, what string, a uint64, want []byte) {
	t.Helper()
	got := make([]byte, len(want)+guardBytes)
	if err := g.Download(got, a); err != nil {
		t.Fatal(err)
	}
	if i := firstDiff(got[:len(want)], want); i >= 0 {
		t.Errorf("%s: byte %d of %d differs (%#x, want %#x)", what, i, len(want), got[i], want[i])
	}
	if i := firstDiff(got[len(want):], bytes.Repeat([]byte{guardByte}, guardBytes)); i >= 0 {
		t.Errorf("%s: wrote %d bytes past its %d", what, i+1, len(want))
	}
}

// TestGPUNCCLOneRank: NCCL with one rank (NCCL refuses two ranks of one
// communicator on one GPU), its collectives enqueued on the GPU's stream
// 1. Every kind (all-gather, reduce-scatter, all-reduce, broadcast) in
// fp32 and bf16, out of place and in place, leaves exactly the input in
// the output (one rank's sum or gather is its own data) and not a byte
// past the count; a collective enqueued on stream 1 behind a Wait for a
// long kernel on stream 0 sees that kernel's result; two collectives in
// one NCCL group both land; a split of the world with one color is a
// working one-rank communicator, and with NCCLNoColor none.
func TestGPUNCCLOneRank(t *testing.T) {
	l, g, fns := openStreamGPU(t)
	id, err := l.NCCLUniqueID()
	if err != nil {
		t.Fatal(err)
	}
	world, err := g.Context().NCCLInit(1, 0, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := world.Destroy(); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%v: NCCL world of %d", l, world.Ranks())
	st, err := g.Stream(1)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(29, 1))
	const count = 100003 // odd: no dtype's vector width divides it

	buf := func(data []byte) uint64 { return guardedBuf(t, g, data) }
	expect := func(what string, a uint64, want []byte) { t.Helper(); expectGuarded(t, g, what, a, want) }

	world1 := func(comm *NCCLComm, label string) {
		for _, dt := range []DType{F32, BF16} {
			for _, kind := range []string{"all-gather", "reduce-scatter", "all-reduce", "broadcast"} {
				for _, inPlace := range []bool{false, true} {
					c := ncclCase{kind, dt, inPlace}
					what := fmt.Sprintf("%s%s %v", label, kind, dt)
					if inPlace {
						what += " in place"
					}
					data := randomElems(rng, dt, count)
					send := buf(data)
					recv := send
					if !inPlace {
						recv = buf(make([]byte, len(data)))
					}
					if err := c.run(comm, st, Ptr(send), Ptr(recv), count); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					if err := g.Sync(); err != nil {
						t.Fatalf("%s: %v", what, err)
					}
					expect(what, recv, data)
					if !inPlace {
						expect(what+" (its input)", send, data)
					}
				}
			}
		}
		if err := comm.AsyncError(); err != nil {
			t.Errorf("%s: %v", label, err)
		}
	}
	world1(world, "")

	// Behind a wait for stream 0's long kernel on stream 1: the
	// all-reduce reads what the kernel wrote.
	{
		n := int64(1 << 20)
		src, dst := gpuBuf(t, g, 4*n), gpuBuf(t, g, 4*n)
		setFloats(t, g, src, make([]float32, n))
		setFloats(t, g, dst, filled(int(n), -1))
		launchOn(t, g, 0, fns["spin_fill"], Ptr(src), n, float32(5), spinCycles)
		if err := g.Record(0, 1); err != nil {
			t.Fatal(err)
		}
		if err := g.Wait(1, 1); err != nil {
			t.Fatal(err)
		}
		if err := world.AllReduce(st, Ptr(src), Ptr(dst), n, F32); err != nil {
			t.Fatal(err)
		}
		if err := g.Sync(); err != nil {
			t.Fatal(err)
		}
		allEqual(t, "all-reduce behind a wait", gpuFloats(t, g, dst, int(n)), 5)
	}

	// Two collectives of two dtypes in one group.
	{
		d1, d2 := randomElems(rng, F32, count), randomElems(rng, BF16, count)
		s1, s2 := buf(d1), buf(d2)
		r1, r2 := buf(make([]byte, len(d1))), buf(make([]byte, len(d2)))
		err := l.NCCLGroup(func() error {
			if err := world.AllReduce(st, Ptr(s1), Ptr(r1), count, F32); err != nil {
				return err
			}
			return world.AllGather(st, Ptr(s2), Ptr(r2), count, BF16)
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Sync(); err != nil {
			t.Fatal(err)
		}
		expect("grouped all-reduce fp32", r1, d1)
		expect("grouped all-gather bf16", r2, d2)
	}

	sub, err := world.Split(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if sub == nil || sub.Ranks() != 1 || sub.Rank() != 0 {
		t.Fatalf("split of one color: %+v", sub)
	}
	world1(sub, "split: ")
	if err := sub.Abort(); err != nil {
		t.Error(err)
	}
	if err := sub.AllReduce(st, 0, 0, 1, F32); err == nil {
		t.Error("an aborted communicator took an all-reduce")
	}
	none, err := world.Split(NCCLNoColor, 0)
	if err != nil || none != nil {
		t.Errorf("split with no color: %v, %v; want no communicator", none, err)
	}
}

// firstDiff is the first index where a and b (of one length) differ,
// or -1.
func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
