//go:build cgo

package hostc

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"amspc/ir"
	"amspc/kernels"
	"amspc/kernels/gpu"
)

// embedGradCall is EmbedGrad's OpCall for n ids into a [vocab, d] table
// (an OpCall carries no operand values: the lists are built on the
// device).
func embedGradCall(n, vocab, d int) *gpu.OpCall {
	return planCall(ir.EmbedGrad, [][]int64{{int64(n)}, {int64(n), int64(d)}}, []ir.DType{ir.I32, ir.F32},
		[][]int64{{int64(vocab), int64(d)}}, []ir.DType{ir.F32})
}

// idsBuf passes ids as an operand (runPlan takes 4-byte elements).
func idsBuf(ids []int32) planBuf {
	return planBuf{f: unsafe.Slice((*float32)(unsafe.Pointer(&ids[0])), len(ids))}
}

// embedLists runs c's plan on ids (dy zero) and returns the lists its
// embed_grad_f32 reads: the scratch buffers of its start and pos.
func embedLists(t *testing.T, c *gpu.OpCall, ids []int32) (start, pos []int32) {
	t.Helper()
	p, err := gpu.PlanOp(c)
	if err != nil {
		t.Fatal(err)
	}
	last := p.Launches[len(p.Launches)-1]
	if last.Kernel != "embed_grad_f32" {
		t.Fatalf("the plan ends with %s, want embed_grad_f32", last.Kernel)
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	scratch := make([][]int32, len(p.Scratch))
	for i, sb := range p.Scratch {
		scratch[i] = make([]int32, (sb.Bytes+3)/4+1)
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&scratch[i][0])), 4*len(scratch[i])), sb.Content())
		pin.Pin(&scratch[i][0])
	}
	vocab, d := int(c.OutShapes[0][0]), int(c.OutShapes[0][1])
	dy, dtable := make([]float32, len(ids)*d), make([]float32, vocab*d)
	bufs := map[gpu.ArgKind][]unsafe.Pointer{gpu.Operand: {unsafe.Pointer(&ids[0]), unsafe.Pointer(&dy[0])}, gpu.Result: {unsafe.Pointer(&dtable[0])}}
	for _, q := range append(bufs[gpu.Operand], bufs[gpu.Result]...) {
		pin.Pin(q)
	}
	for li := range p.Launches {
		l := p.Launches[li]
		addrs := make([]uint64, len(l.Args))
		for i, a := range l.Args {
			switch a.Kind {
			case gpu.Operand, gpu.Result:
				addrs[i] = uint64(uintptr(bufs[a.Kind][a.N])) + uint64(a.I)
			case gpu.Scratch:
				addrs[i] = uint64(uintptr(unsafe.Pointer(&scratch[a.N][0]))) + uint64(a.I)
			}
		}
		if err := l.CheckArgs(); err != nil {
			t.Fatal(err)
		}
		if err := launch(&l, addrs); err != nil {
			t.Fatal(err)
		}
	}
	return scratch[last.Args[1].N][:vocab+1], scratch[last.Args[2].N][:len(ids)]
}

// embedIDs are n ids in [0, vocab) spread as kind says.
func embedIDs(rng *rand.Rand, kind string, n, vocab int) []int32 {
	ids := make([]int32, n)
	hot := []int32{int32(vocab - 1), int32(vocab / 2), 0}
	for i := range ids {
		switch kind {
		case "uniform":
			ids[i] = int32(rng.IntN(vocab))
		case "one": // every position in one list: the longest chains of ranks
			ids[i] = int32(vocab - 1)
		case "hot": // most positions on a few ids, the rest spread
			if rng.IntN(10) < 9 {
				ids[i] = hot[rng.IntN(len(hot))]
			} else {
				ids[i] = int32(rng.IntN(vocab))
			}
		}
	}
	return ids
}

// embedDY is n rows of d values of exponents far apart, so a sum taken
// in another order shows in its bits.
func embedDY(rng *rand.Rand, n, d int) []float32 {
	dy := make([]float32, n*d)
	for i := range dy {
		dy[i] = float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(24)-12))
	}
	return dy
}

// TestEmbedGradPlan: EmbedGrad's plan, which lists each id's positions
// on the device (embed_count to embed_place) without reading the ids on
// the host, gives gpu.Positions' lists exactly and the Go kernel's bits,
// for vocabularies and position counts around the chunk (256), and ids
// spread evenly, all one id, or mostly a few hot ones.
func TestEmbedGradPlan(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	const d = 3
	for _, vocab := range []int{1, 7, 300, 5000} {
		for _, n := range []int{1, 255, 256, 257, 1000, 8192} {
			for _, kind := range []string{"uniform", "one", "hot"} {
				what := fmt.Sprintf("vocab %d, %d %s ids", vocab, n, kind)
				ids, dy := embedIDs(rng, kind, n, vocab), embedDY(rng, n, d)
				c := embedGradCall(n, vocab, d)
				start, pos := embedLists(t, c, ids)
				wstart, wpos := gpu.Positions(ids, vocab)
				if !slices.Equal(start, wstart) {
					t.Errorf("%s: start differs from gpu.Positions' at %d", what, firstDiff32(start, wstart))
				}
				if !slices.Equal(pos, wpos) {
					t.Errorf("%s: pos differs from gpu.Positions' at %d", what, firstDiff32(pos, wpos))
				}
				got := fresh(vocab*d, ir.F32)
				runPlan(t, c, []planBuf{idsBuf(ids), {f: dy}}, []planBuf{got})
				want := make([]float32, vocab*d)
				kernels.EmbedGrad(want, ids, dy, vocab, d)
				if i := firstDiffBits(got.f, want); i >= 0 {
					t.Errorf("%s: dtable element %d is %#x, the Go kernel's %#x", what, i, math.Float32bits(got.f[i]), math.Float32bits(want[i]))
				}
			}
		}
	}
}

// TestEmbedGradPlanBadIDs: an id outside [0, vocab) (embed_f32 reports
// it first) is skipped, its row in no sum, and nothing is written out of
// bounds.
func TestEmbedGradPlanBadIDs(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	const vocab, d, n = 40, 5, 700
	ids, dy := embedIDs(rng, "hot", n, vocab), embedDY(rng, n, d)
	bad := []int32{-1, vocab, math.MaxInt32, math.MinInt32, vocab + 1}
	for k, i := range []int{0, 255, 256, 300, 699} {
		ids[i] = bad[k]
	}
	var okIDs []int32
	var okDY []float32
	for i, id := range ids {
		if id >= 0 && id < vocab {
			okIDs, okDY = append(okIDs, id), append(okDY, dy[i*d:(i+1)*d]...)
		}
	}
	got := fresh(vocab*d, ir.F32)
	runPlan(t, embedGradCall(n, vocab, d), []planBuf{idsBuf(ids), {f: dy}}, []planBuf{got})
	want := make([]float32, vocab*d)
	kernels.EmbedGrad(want, okIDs, okDY, vocab, d)
	if i := firstDiffBits(got.f, want); i >= 0 {
		t.Errorf("dtable element %d is %#x, the Go kernel's over the ids in range %#x", i, math.Float32bits(got.f[i]), math.Float32bits(want[i]))
	}
}

func firstDiff32(a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func firstDiffBits(a, b []float32) int {
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}
