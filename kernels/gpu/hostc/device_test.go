//go:build cgo

package hostc

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"amspc/kernels/gpu"
)

// modes are the ways a Device runs its streams, by name.
var modes = []struct {
	name string
	opts []Option
}{{"sequential", []Option{Sequential}}, {"concurrent", nil}, {"held back", []Option{HoldBack}}}

// buf is n float32s of device memory holding x (zeros when x is nil).
func buf(t *testing.T, d *Device, n int, x []float32) uint64 {
	t.Helper()
	a, err := d.Alloc(4 * int64(n))
	if err != nil {
		t.Fatal(err)
	}
	if x != nil {
		if err := d.Upload(a, bytesOf(x)); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func bytesOf(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

// read is n float32s at a, once the device is done with them.
func read(t *testing.T, d *Device, a uint64, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	if err := d.Download(b, a); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, n)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// add enqueues out = a + b (n elements) on stream s.
func add(t *testing.T, d *Device, s int, out, a, b uint64, n int) {
	t.Helper()
	ptr := gpu.Arg{Kind: gpu.Operand}
	l := gpu.Launch{Kernel: "add_f32", Grid: [3]int{gpu.Grid1D(int64(n), 1, maxGrid), 1, 1}, Block: 1,
		Args: []gpu.Arg{ptr, ptr, ptr, {Kind: gpu.Int, I: int64(n)}, {Kind: gpu.Int, I: int64(n)}}}
	addrs := []uint64{out, a, b, 0, 0}
	if err := d.Launch(s, &l, addrs); err != nil {
		t.Fatal(err)
	}
	// The device keeps neither: a caller may reuse them at once.
	l.Args[0], addrs[0] = gpu.Arg{Kind: gpu.Null}, 0
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ramp(n int, scale float32) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = scale * float32(i+1)
	}
	return x
}

func equal(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// chain runs three streams ordered only by events: stream 0 makes
// y = 2x; stream 1, after it, copies y into z; stream 2, after that,
// makes w = z + x, while stream 0, once stream 1 has read y, zeroes it.
// It returns w, z and y (3x, 2x and 0 when the events order them).
func chain(t *testing.T, d *Device, n int) (w, z, y []float32) {
	x := ramp(n, 1)
	xa, ya, za, wa := buf(t, d, n, x), buf(t, d, n, nil), buf(t, d, n, nil), buf(t, d, n, nil)
	add(t, d, 0, ya, xa, xa, n)
	check(t, d.Record(0, 0))
	check(t, d.Wait(1, 0))
	check(t, d.Copy(1, za, ya, 4*int64(n)))
	check(t, d.Record(1, 1))
	check(t, d.Wait(2, 1))
	add(t, d, 2, wa, za, xa, n)
	check(t, d.Wait(0, 1))
	check(t, d.Zero(0, ya, 4*int64(n)))
	w, z, y = read(t, d, wa, n), read(t, d, za, n), read(t, d, ya, n)
	check(t, d.Sync())
	for _, a := range []uint64{xa, ya, za, wa} {
		d.Free(a)
	}
	if d.Live() != 0 {
		t.Errorf("%d allocations live", d.Live())
	}
	return w, z, y
}

// TestDeviceStreams: work on three streams ordered only by Record and
// Wait gives the same results sequentially, with the streams running at
// once, and held back (the most recently enqueued work first wherever
// the events allow), every time.
func TestDeviceStreams(t *testing.T) {
	const n = 1000
	for _, m := range modes {
		for range 20 {
			w, z, y := chain(t, NewDevice(m.opts...), n)
			if !equal(w, ramp(n, 3)) || !equal(z, ramp(n, 2)) || !equal(y, make([]float32, n)) {
				t.Fatalf("%s: w[:3] %v z[:3] %v y[:3] %v, want %v %v 0", m.name, w[:3], z[:3], y[:3], ramp(3, 3), ramp(3, 2))
			}
		}
	}
}

// TestDeviceDroppedWaits is the mutation the engine's stream tests rely
// on: with its Waits dropped, the held-back device runs the chain's
// later work first, every time, and says it did.
func TestDeviceDroppedWaits(t *testing.T) {
	const n = 1000
	for range 20 {
		d := NewDevice(HoldBack, DropWaits)
		w, z, y := chain(t, d, n)
		if equal(w, ramp(n, 3)) || equal(z, ramp(n, 2)) || !equal(y, make([]float32, n)) {
			t.Fatalf("dropped waits: w[:3] %v z[:3] %v y[:3] %v: the streams ran in order", w[:3], z[:3], y[:3])
		}
		// w ran before z was written, z before y was.
		if !equal(w, ramp(n, 1)) || !equal(z, make([]float32, n)) {
			t.Fatalf("dropped waits: w[:3] %v z[:3] %v, want x and 0 (the latest work first)", w[:3], z[:3])
		}
		if r := d.Reordered(); r != 2 {
			t.Fatalf("Reordered %d, want 2 (z's copy and w's add)", r)
		}
	}
	if r := NewDevice(HoldBack).Reordered(); r != 0 {
		t.Errorf("Reordered %d without DropWaits", r)
	}
}

// TestDeviceWaitGeneration: a Wait waits for the generation of the
// event recorded last before it, not for a later Record of the same
// event (cuStreamWaitEvent); a Wait on an event never recorded, or on
// a Record of an idle stream, waits for nothing.
func TestDeviceWaitGeneration(t *testing.T) {
	const n = 64
	for _, m := range modes {
		d := NewDevice(m.opts...)
		x, y := ramp(n, 1), ramp(n, 2)
		xa, ya, aa, ba := buf(t, d, n, x), buf(t, d, n, y), buf(t, d, n, nil), buf(t, d, n, nil)
		check(t, d.Copy(0, aa, xa, 4*n))
		check(t, d.Record(0, 7))
		check(t, d.Wait(1, 7)) // the first generation: a = x
		check(t, d.Wait(1, 99))
		check(t, d.Record(2, 8)) // stream 2 is idle
		check(t, d.Wait(1, 8))
		check(t, d.Copy(0, aa, ya, 4*n))
		check(t, d.Record(0, 7))
		check(t, d.Copy(1, ba, aa, 4*n))
		b, a := read(t, d, ba, n), read(t, d, aa, n)
		if !equal(a, y) || !equal(b, x) && !equal(b, y) {
			t.Fatalf("%s: a[:3] %v b[:3] %v", m.name, a[:3], b[:3])
		}
		// Held back, the copy into b runs as soon as the first
		// generation allows: before the second copy into a.
		if m.name == "held back" && !equal(b, x) {
			t.Errorf("held back: b[:3] %v, want x: the wait took the newer generation", b[:3])
		}
		check(t, d.Sync())
	}
}

// TestDeviceTransfers: an upload starts after the work enqueued before
// it and ends before the work enqueued after it starts; a download sees
// all the work before it.
func TestDeviceTransfers(t *testing.T) {
	const n = 500
	for _, m := range modes {
		d := NewDevice(m.opts...)
		x, u := ramp(n, 1), ramp(n, 5)
		xa, aa, ba := buf(t, d, n, x), buf(t, d, n, nil), buf(t, d, n, nil)
		add(t, d, 0, aa, xa, xa, n) // a = 2x, then overwritten
		check(t, d.Upload(aa, bytesOf(u)))
		check(t, d.Copy(1, ba, aa, 4*n))
		add(t, d, 2, xa, aa, aa, n) // x = 2u
		if got := read(t, d, ba, n); !equal(got, u) {
			t.Errorf("%s: b[:3] %v, want the upload's %v", m.name, got[:3], u[:3])
		}
		if got := read(t, d, xa, n); !equal(got, ramp(n, 10)) {
			t.Errorf("%s: x[:3] %v, want %v", m.name, got[:3], ramp(3, 10))
		}
	}
}

// TestDeviceErrors: a launch that fails on its stream (a block too big
// for the shim) comes back from Sync and from transfers, and from every
// later call on that stream, whose later work is skipped; the other
// streams go on. A sequential device returns it from the launch.
func TestDeviceErrors(t *testing.T) {
	const n = 100
	for _, m := range modes {
		d := NewDevice(m.opts...)
		ptr, i := gpu.Arg{Kind: gpu.Operand}, gpu.Arg{Kind: gpu.Int}
		bad := gpu.Launch{Kernel: "attention_f32", Grid: [3]int{1, 1, 1}, Block: 2000, Args: []gpu.Arg{ptr, ptr, ptr, ptr, ptr, i, i, i, i, i, i, i, i}}
		xa, ya, za := buf(t, d, n, ramp(n, 1)), buf(t, d, n, nil), buf(t, d, n, nil)
		err := d.Launch(1, &bad, make([]uint64, len(bad.Args)))
		if m.name == "sequential" {
			if err == nil || !strings.Contains(err.Error(), "block of 2000 threads") {
				t.Errorf("sequential: %v", err)
			}
			continue
		}
		check(t, err)
		after := d.Copy(1, ya, xa, 4*n) // skipped, or refused once the failure is known
		add(t, d, 0, za, xa, xa, n)
		err = d.Sync()
		if err == nil || !strings.Contains(err.Error(), "block of 2000 threads") {
			t.Fatalf("%s: Sync: %v", m.name, err)
		}
		if after != nil && after != err {
			t.Errorf("%s: the copy after the failure: %v", m.name, after)
		}
		if e := d.Copy(1, ya, xa, 4*n); e != err {
			t.Errorf("%s: a copy on the failed stream: %v", m.name, e)
		}
		if e := d.Sync(); e != err {
			t.Errorf("%s: Sync again: %v", m.name, e)
		}
		add(t, d, 0, za, za, xa, n)
		// A transfer that returns the error still copies.
		raw := make([]byte, 8*n)
		if e := d.Download(raw[:4*n], ya); e != err {
			t.Errorf("%s: Download: %v", m.name, e)
		}
		if e := d.Download(raw[4*n:], za); e != err {
			t.Errorf("%s: Download: %v", m.name, e)
		}
		for i := range n {
			y, z := math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:])), math.Float32frombits(binary.LittleEndian.Uint32(raw[4*(n+i):]))
			if y != 0 {
				t.Fatalf("%s: the failed stream's later copy ran: y[%d] = %g", m.name, i, y)
			}
			if z != 3*float32(i+1) {
				t.Fatalf("%s: stream 0 after the failure: z[%d] = %g, want %d", m.name, i, z, 3*(i+1))
			}
		}
	}
}

// TestShimLaunchesInParallel: the shim's state is per thread, so
// launches on several threads at once (streams of several devices, as
// the engine's ranks run them) give the bits they give alone: attention
// (a block's threads as coroutines, shared memory, shuffles), tensor-core
// attention (mma.cu's kernels, which take turns), a row kernel's
// block-wide reduction, and an elementwise kernel.
func TestShimLaunchesInParallel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	batch, seq, heads, kvHeads, hd := 2, 70, 4, 2, 32
	nq := batch * seq * heads * hd
	nkv := batch * seq * kvHeads * hd
	q, k, v := rnd(rng, nq, 2), rnd(rng, nkv, 2), rnd(rng, nkv, 1)
	bits := func(x []float32) []uint16 {
		h, _ := BF16(x)
		return h
	}
	hq, hk, hv := bits(q), bits(k), bits(v)
	rows, d := 64, 500
	x, w := rnd(rng, rows*d, 3), rnd(rng, d, 1)
	type result struct{ att, lse, mma, mlse, norm, sum []float32 }
	run := func() result {
		r := result{make([]float32, nq), make([]float32, batch*heads*seq), make([]float32, nq), make([]float32, batch*heads*seq), make([]float32, rows*d), make([]float32, rows*d)}
		Attention(r.att, r.lse, q, k, v, batch, seq, heads, kvHeads, hd, true)
		AttentionMMA(r.mma, r.mlse, hq, hk, hv, batch, seq, heads, kvHeads, hd, true)
		RMSNorm(r.norm, x, w, rows, d, 1e-5)
		Add(r.sum, x, w)
		return r
	}
	want := run()
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 6 {
		wg.Go(func() {
			for range 3 {
				got := run()
				for _, c := range []struct {
					what      string
					got, want []float32
				}{{"attention", got.att, want.att}, {"lse", got.lse, want.lse}, {"mma", got.mma, want.mma}, {"mma lse", got.mlse, want.mlse}, {"rmsnorm", got.norm, want.norm}, {"add", got.sum, want.sum}} {
					if !equal(c.got, c.want) {
						errs <- fmt.Sprintf("goroutine %d: %s differs from the same launch alone", g, c.what)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}
