//go:build cgo

package hostc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"amspc/engine"
	"amspc/ir"
	"amspc/kernels"
)

// The device collectives are checked against the engine's host Comm (a
// LocalWorld) on the same inputs, staged as memComm stages a device's:
// bf16 widened exactly before, the result rounded to nearest even
// after, i32 passed as float32 bits.

// collElems is n random elements of dt, stored: values of many
// magnitudes (so that the order of a sum shows in its bits), or any
// bits for i32.
func collElems(rng *rand.Rand, dt ir.DType, n int) []byte {
	b := make([]byte, n*int(dt.Size()))
	for i := range n {
		v := float32(rng.NormFloat64() * math.Ldexp(1, rng.IntN(24)-12))
		switch dt {
		case ir.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		case ir.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], bf16Bits(v))
		case ir.I32:
			binary.LittleEndian.PutUint32(b[4*i:], rng.Uint32())
		}
	}
	return b
}

// widen is memComm's Read: the stored elements as float32.
func widen(dt ir.DType, b []byte) []float32 {
	x := make([]float32, len(b)/int(dt.Size()))
	for i := range x {
		if dt == ir.BF16 {
			x[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		} else {
			x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return x
}

// narrow is memComm's Write: x stored as dt (bf16 rounded to nearest
// even, a NaN staying one).
func narrow(dt ir.DType, x []float32) []byte {
	b := make([]byte, len(x)*int(dt.Size()))
	for i, v := range x {
		if dt == ir.BF16 {
			u := math.Float32bits(kernels.RoundBF16(v))
			if v != v {
				u |= 0x00400000
			}
			binary.LittleEndian.PutUint16(b[2*i:], uint16(u>>16))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	return b
}

// collCase is one collective of the comparison.
type collCase struct {
	kind    ir.Coll
	dt      ir.DType
	inPlace bool // all-gather, reduce-scatter (all-reduce and broadcast always are)
}

func (c collCase) String() string {
	s := fmt.Sprintf("%s %v", c.kind, c.dt)
	if c.inPlace {
		s += " in place"
	}
	return s
}

func collCases() []collCase {
	var cs []collCase
	for _, in := range []bool{false, true} {
		for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.I32} {
			cs = append(cs, collCase{ir.AllGather, dt, in})
		}
		for _, dt := range []ir.DType{ir.F32, ir.BF16} {
			cs = append(cs, collCase{ir.ReduceScatter, dt, in})
		}
	}
	for _, dt := range []ir.DType{ir.F32, ir.BF16} {
		cs = append(cs, collCase{ir.AllReduce, dt, true})
	}
	for _, dt := range []ir.DType{ir.F32, ir.BF16, ir.I32} {
		cs = append(cs, collCase{ir.Broadcast, dt, true})
	}
	return cs
}

// inElems is how many elements rank's input has for count.
func (c collCase) inElems(n, count int) int {
	if c.kind == ir.ReduceScatter {
		return n * count
	}
	return count
}

// hostColl is what the engine's host Comm gives each rank (by rank) for
// c over g (root: an index into g) on ins (by rank).
func hostColl(t *testing.T, c collCase, g []int, root, count int, ins [][]byte) [][]byte {
	t.Helper()
	n := len(ins)
	w := engine.NewLocalWorld(n)
	outs := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for _, r := range g {
		wg.Go(func() {
			cm := w.Comm(r)
			in := widen(c.dt, ins[r])
			var out []float32
			switch c.kind {
			case ir.AllGather:
				out = make([]float32, len(g)*count)
				errs[r] = cm.AllGather(1, g, in, out)
			case ir.ReduceScatter:
				out = make([]float32, count)
				errs[r] = cm.ReduceScatter(1, g, in, out)
			case ir.AllReduce:
				out = in
				errs[r] = cm.AllReduce(1, g, out)
			case ir.Broadcast:
				out = in
				errs[r] = cm.Broadcast(1, g, g[root], out)
			}
			outs[r] = narrow(c.dt, out)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return outs
}

// runDevColl runs c over g on devs, each rank from its own goroutine, and
// gives each rank's result (by rank): its output, read back.
func runDevColl(t *testing.T, devs []*Device, c collCase, g []int, root, count int, ins [][]byte, rng *rand.Rand) [][]byte {
	t.Helper()
	n := len(g)
	e := int(c.dt.Size())
	// Outputs start as garbage, so that an element not written shows.
	garbage := make([][]byte, len(devs))
	for r := range garbage {
		garbage[r] = collElems(rng, ir.F32, n*count)[:n*count*e]
	}
	outs := make([][]byte, len(devs))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for idx, r := range g {
		wg.Go(func() {
			errs[r] = func() error {
				d := devs[r]
				k, err := d.Split(g)
				if err != nil {
					return err
				}
				var allocs []uint64
				alloc := func(b []byte) (uint64, error) {
					a, err := d.Alloc(int64(len(b)))
					if err != nil {
						return 0, err
					}
					allocs = append(allocs, a)
					return a, d.Upload(a, b)
				}
				defer func() {
					for _, a := range allocs {
						d.Free(a)
					}
				}()
				dc := engine.DeviceColl{Kind: c.kind, Comm: k, DType: c.dt, Count: int64(count)}
				var res uint64
				resBytes := count * e
				switch c.kind {
				case ir.AllGather:
					resBytes = n * count * e
					if dc.Out, err = alloc(garbage[r][:resBytes]); err != nil {
						return err
					}
					if c.inPlace {
						dc.In = dc.Out + uint64(idx*count*e)
						err = d.Upload(dc.In, ins[r])
					} else {
						dc.In, err = alloc(ins[r])
					}
					res = dc.Out
				case ir.ReduceScatter:
					if dc.In, err = alloc(ins[r]); err != nil {
						return err
					}
					if c.inPlace {
						dc.Out = dc.In + uint64(idx*count*e)
					} else {
						dc.Out, err = alloc(garbage[r][:resBytes])
					}
					res = dc.Out
				case ir.AllReduce:
					dc.Out, err = alloc(ins[r])
					dc.In, res = dc.Out, dc.Out
				case ir.Broadcast:
					dc.Out, err = alloc(ins[r]) // In left 0: in place too
					dc.Root, res = root, dc.Out
				}
				if err != nil {
					return err
				}
				if err := d.Collective(1, &dc); err != nil {
					return err
				}
				outs[r] = make([]byte, resBytes)
				// A world's comm streams are non-blocking: a transfer
				// waits for them only after a Sync.
				if err := d.Sync(); err != nil {
					return err
				}
				return d.Download(outs[r], res)
			}()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return outs
}

// TestCollMatchesHostComm: with 4 and 3 ranks in one world (their
// groups in an order that is not the ranks'), every collective, fp32,
// bf16 and i32, in place and not, on random data, leaves in every
// member's memory the bits the engine's host Comm gives, in every mode
// (so the modes give the same bits). The counts cross the folds'
// chunks, and the data is such that summing in another order changes
// the bits.
func TestCollMatchesHostComm(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	for _, g := range [][]int{{2, 0, 3, 1}, {1, 2, 0}} {
		n := len(g)
		for _, c := range collCases() {
			count := collChunk + 123
			if c.kind == ir.AllGather || c.kind == ir.ReduceScatter {
				count = 1001
			}
			root := n - 2
			ins := make([][]byte, n)
			for r := range ins {
				ins[r] = collElems(rng, c.dt, c.inElems(n, count))
			}
			want := hostColl(t, c, g, root, count, ins)
			if c.kind == ir.AllReduce && c.dt == ir.F32 {
				// The sums depend on their order: a fold in rank order
				// gives other bits.
				parts := make([][]float32, n)
				for r := range parts {
					parts[r] = widen(c.dt, ins[r])
				}
				other := make([]float32, count)
				kernels.Fold(other, parts)
				if slices.Equal(narrow(c.dt, other), want[0]) {
					t.Fatalf("%d ranks: the data does not tell the order of a sum", n)
				}
			}
			for _, m := range modes {
				devs := NewWorld(n, m.opts...)
				got := runDevColl(t, devs, c, g, root, count, ins, rng)
				for r := range got {
					if i := firstDiff(got[r], want[r]); i >= 0 {
						t.Errorf("%d ranks, %s, %s: rank %d's result differs from the host Comm's from byte %d of %d", n, c, m.name, r, i, len(want[r]))
					}
				}
				for _, d := range devs {
					if d.Live() != 0 {
						t.Errorf("%s: %d allocations live", m.name, d.Live())
					}
				}
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}

// TestCollTwoCommunicators: two communicators of different groups, the
// world (in a permuted order) on stream 1 and pairs on stream 2, used at
// once, each stream issued from its own goroutine, two dependent
// collectives on each: every result is the host Comm's, in every mode.
func TestCollTwoCommunicators(t *testing.T) {
	const n, na, nb = 4, 3000, 700
	world := []int{3, 1, 0, 2}
	pair := func(r int) []int { return []int{r | 1, r &^ 1} } // {1,0}, {3,2}
	rng := rand.New(rand.NewPCG(29, 2))
	xa := make([][]byte, n) // stream 1: all_reduce f32 of a, then all_gather of its first nb elements
	xb := make([][]byte, n) // stream 2: reduce_scatter bf16 of b into c, then all_reduce of c
	for r := range n {
		xa[r] = collElems(rng, ir.F32, na)
		xb[r] = collElems(rng, ir.BF16, 2*nb)
	}

	// The host Comm's results, as memComm stages them.
	type result struct{ a, g, c []byte }
	want := make([]result, n)
	lw := engine.NewLocalWorld(n)
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for r := range n {
		cm := lw.Comm(r)
		wg.Go(func() {
			a := widen(ir.F32, xa[r])
			g := make([]float32, n*nb)
			errs <- cm.AllReduce(1, world, a)
			errs <- cm.AllGather(1, world, slices.Clone(a[:nb]), g)
			want[r].a, want[r].g = narrow(ir.F32, a), narrow(ir.F32, g)
		})
		wg.Go(func() {
			c := make([]float32, nb)
			errs <- cm.ReduceScatter(2, pair(r), widen(ir.BF16, xb[r]), c)
			c = widen(ir.BF16, narrow(ir.BF16, c)) // memComm's Write, then Read
			errs <- cm.AllReduce(2, pair(r), c)
			want[r].c = narrow(ir.BF16, c)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	for _, m := range modes {
		devs := NewWorld(n, m.opts...)
		got := make([]result, n)
		errs := make(chan error, 16*n)
		for r, d := range devs {
			wg.Go(func() {
				ka, err := d.Split(world)
				errs <- err
				kb, err := d.Split(pair(r))
				errs <- err
				a := buf(t, d, na, widen(ir.F32, xa[r]))
				g := buf(t, d, n*nb, nil)
				b, err := d.Alloc(int64(len(xb[r])))
				errs <- err
				errs <- d.Upload(b, xb[r])
				c, err := d.Alloc(2 * nb)
				errs <- err
				var in sync.WaitGroup
				in.Go(func() {
					errs <- d.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: ka, DType: ir.F32, In: a, Out: a, Count: na})
					errs <- d.Collective(1, &engine.DeviceColl{Kind: ir.AllGather, Comm: ka, DType: ir.F32, In: a, Out: g, Count: nb})
				})
				in.Go(func() {
					errs <- d.Collective(2, &engine.DeviceColl{Kind: ir.ReduceScatter, Comm: kb, DType: ir.BF16, In: b, Out: c, Count: nb})
					errs <- d.Collective(2, &engine.DeviceColl{Kind: ir.AllReduce, Comm: kb, DType: ir.BF16, In: c, Out: c, Count: nb})
				})
				in.Wait()
				got[r].a, got[r].g, got[r].c = make([]byte, 4*na), make([]byte, 4*n*nb), make([]byte, 2*nb)
				errs <- d.Sync() // the comm streams are non-blocking
				errs <- d.Download(got[r].a, a)
				errs <- d.Download(got[r].g, g)
				errs <- d.Download(got[r].c, c)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("%s: %v", m.name, err)
			}
		}
		for r := range n {
			for _, x := range []struct {
				what      string
				got, want []byte
			}{{"all_reduce f32", got[r].a, want[r].a}, {"all_gather f32", got[r].g, want[r].g}, {"reduce_scatter + all_reduce bf16", got[r].c, want[r].c}} {
				if i := firstDiff(x.got, x.want); i >= 0 {
					t.Errorf("%s: rank %d: %s differs from the host Comm's from byte %d", m.name, r, x.what, i)
				}
			}
		}
	}
}

// collCall issues one collective on every device of devs over all of
// them, each from its own goroutine (a Sequential device's call blocks),
// call(r) giving rank r's, and returns each rank's Collective error and
// its Sync's.
func collCall(devs []*Device, call func(r int, d *Device, k int) engine.DeviceColl) (coll, sync_ []error) {
	n := len(devs)
	g := make([]int, n)
	for r := range g {
		g[r] = r
	}
	coll, sync_ = make([]error, n), make([]error, n)
	var wg sync.WaitGroup
	for r, d := range devs {
		wg.Go(func() {
			k, err := d.Split(g)
			if err != nil {
				coll[r] = err
				return
			}
			c := call(r, d, k)
			coll[r] = d.Collective(1, &c)
			sync_[r] = d.Sync()
		})
	}
	wg.Wait()
	return coll, sync_
}

// TestCollMismatch: members that disagree (a count, or an i32 sum) fail,
// every one of them, with an error that names what they called; their
// memory is untouched, and the error sticks to the stream.
func TestCollMismatch(t *testing.T) {
	const n = 3
	for _, m := range modes {
		for _, bad := range []struct {
			name string
			edit func(r int, c *engine.DeviceColl)
			is   error
			says []string
		}{
			{"count", func(r int, c *engine.DeviceColl) {
				if r == 2 {
					c.Count++
				}
			}, engine.ErrCommMismatch, []string{"all_reduce(99 f32)", "all_reduce(100 f32)"}},
			{"i32 sum", func(r int, c *engine.DeviceColl) { c.DType = ir.I32 }, engine.ErrCommInvalid, []string{"all_reduce(99 i32)", "sums are of f32 or bf16"}},
		} {
			devs := NewWorld(n, m.opts...)
			x := ramp(100, 1)
			addrs := make([]uint64, n)
			for r, d := range devs {
				addrs[r] = buf(t, d, 100, x)
			}
			coll, syncs := collCall(devs, func(r int, d *Device, k int) engine.DeviceColl {
				c := engine.DeviceColl{Kind: ir.AllReduce, Comm: k, DType: ir.F32, In: addrs[r], Out: addrs[r], Count: 99}
				bad.edit(r, &c)
				return c
			})
			for r, d := range devs {
				err := syncs[r]
				if m.name == "sequential" {
					err = coll[r]
				} else if coll[r] != nil {
					t.Fatalf("%s, %s: rank %d: Collective: %v", m.name, bad.name, r, coll[r])
				}
				if !errors.Is(err, bad.is) {
					t.Fatalf("%s, %s: rank %d: %v, want %v", m.name, bad.name, r, err, bad.is)
				}
				var ce *engine.CommError
				if !errors.As(err, &ce) || ce.Rank != r {
					t.Errorf("%s, %s: rank %d: %v is not rank %d's CommError", m.name, bad.name, r, err, r)
				}
				for _, s := range bad.says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s, %s: rank %d: %q does not say %q", m.name, bad.name, r, err, s)
					}
				}
				raw := make([]byte, 400)
				d.Sync() // the failure itself is what the test checked above
				d.Download(raw, addrs[r])
				if got := widen(ir.F32, raw); !equal(got, x) {
					t.Errorf("%s, %s: rank %d's buffer changed: %v...", m.name, bad.name, r, got[:3])
				}
				if m.name != "sequential" {
					if e := d.Copy(1, addrs[r], addrs[r], 4); e != err {
						t.Errorf("%s, %s: rank %d: a copy on the failed stream: %v", m.name, bad.name, r, e)
					}
				}
			}
		}
	}
}

// TestCollAbort: a member waiting for one that never comes is freed by
// Abort (from any member) with an error wrapping ErrCommAborted, as is
// every later call; Split fails after it too.
func TestCollAbort(t *testing.T) {
	for _, m := range modes {
		devs := NewWorld(2, m.opts...)
		d := devs[0]
		k, err := d.Split([]int{0, 1})
		check(t, err)
		a := buf(t, d, 10, ramp(10, 1))
		done := make(chan error, 1)
		go func() {
			if err := d.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k, DType: ir.F32, In: a, Out: a, Count: 10}); err != nil {
				done <- err
				return
			}
			done <- d.Sync()
		}()
		select {
		case err := <-done:
			t.Fatalf("%s: rank 0 did not wait for rank 1: %v", m.name, err)
		case <-time.After(50 * time.Millisecond):
		}
		devs[1].Abort(errors.New("rank 1 stopped"))
		select {
		case err := <-done:
			if !errors.Is(err, engine.ErrCommAborted) || !strings.Contains(err.Error(), "rank 1 stopped") {
				t.Errorf("%s: %v, want the abort", m.name, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: Abort did not free rank 0", m.name)
		}
		k1, err := devs[1].Split([]int{0, 1})
		if !errors.Is(err, engine.ErrCommAborted) {
			t.Errorf("%s: Split after Abort: %v", m.name, err)
		}
		b := buf(t, devs[1], 10, nil)
		err = devs[1].Collective(0, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k1 + 1, DType: ir.F32, In: b, Out: b, Count: 10})
		if !errors.Is(err, engine.ErrCommAborted) {
			t.Errorf("%s: a call after Abort: %v", m.name, err)
		}
	}
}

// TestCollStreamsGoOn: while a stream waits at a rendezvous, the
// device's other streams run (streams at once), a transfer passes it
// (the comm streams are non-blocking), and a transfer or Sync
// of another member goes on (held back: a drain waiting for a member's
// call lets that member's host run).
func TestCollStreamsGoOn(t *testing.T) {
	const n = 64
	x := ramp(n, 1)
	for _, m := range modes[1:] {
		devs := NewWorld(2, m.opts...)
		d0, d1 := devs[0], devs[1]
		k0, err := d0.Split([]int{0, 1})
		check(t, err)
		k1, err := d1.Split([]int{0, 1})
		check(t, err)
		a0, y0, a1 := buf(t, d0, n, x), buf(t, d0, n, nil), buf(t, d1, n, nil)
		check(t, d0.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k0, DType: ir.F32, In: a0, Out: a0, Count: n}))
		add(t, d0, 0, y0, a0, a0, n)
		synced := make(chan error, 1)
		if m.name == "concurrent" {
			// Stream 0 empties while stream 1 waits for rank 1.
			deadline := time.Now().Add(10 * time.Second)
			for {
				d0.q.Lock()
				idle, waiting := len(d0.streams[0].items) == 0, len(d0.streams[1].items) == 1
				d0.q.Unlock()
				if idle && waiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("concurrent: stream 0 did not run while stream 1 waited")
				}
				time.Sleep(time.Millisecond)
			}
			// A world's comm streams are non-blocking: a transfer
			// passes the collective still waiting for rank 1 (as the
			// engine's mid-step transfers must, or ranks whose
			// collectives cross them wait for one another).
			if got := read(t, d0, y0, n); !equal(got, ramp(n, 2)) {
				t.Errorf("concurrent: y read past the waiting collective: %v...", got[:3])
			}
		} else {
			// Rank 0's Sync waits for rank 1's call, and rank 1's host
			// uploads meanwhile.
			go func() { synced <- d0.Sync() }()
			time.Sleep(20 * time.Millisecond)
		}
		check(t, d1.Upload(a1, bytesOf(ramp(n, 2))))
		check(t, d1.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k1, DType: ir.F32, In: a1, Out: a1, Count: n}))
		if m.name != "concurrent" {
			check(t, <-synced)
		} else {
			check(t, d0.Sync())
			check(t, d1.Sync())
		}
		// Held back, rank 1's call ran when rank 0's Sync needed it.
		if got := read(t, d0, a0, n); !equal(got, ramp(n, 3)) {
			t.Errorf("%s: rank 0: %v..., want %v...", m.name, got[:3], ramp(3, 3))
		}
		if got := read(t, d1, a1, n); !equal(got, ramp(n, 3)) {
			t.Errorf("%s: rank 1: %v..., want %v...", m.name, got[:3], ramp(3, 3))
		}
		if got := read(t, d0, y0, n); m.name == "concurrent" && !equal(got, ramp(n, 2)) || m.name != "concurrent" && !equal(got, ramp(n, 2)) && !equal(got, ramp(n, 6)) {
			t.Errorf("%s: y %v...", m.name, got[:3])
		}
		check(t, d0.Sync())
		check(t, d1.Sync())
	}
}

// TestCollHeldBackForced: held back, one rank's transfer runs the
// collective of every member, with the work each member's events order
// before it (enqueued from one goroutine: no call blocks); and with the
// waits dropped, the collective runs before the work it should wait for,
// and Reordered says so.
func TestCollHeldBackForced(t *testing.T) {
	const n, ranks = 100, 3
	for _, drop := range []bool{false, true} {
		opts := []Option{HoldBack}
		if drop {
			opts = append(opts, DropWaits)
		}
		devs := NewWorld(ranks, opts...)
		ys := make([]uint64, ranks)
		for r, d := range devs {
			k, err := d.Split([]int{0, 1, 2})
			check(t, err)
			x := buf(t, d, n, ramp(n, float32(r+1)))
			ys[r] = buf(t, d, n, nil)
			add(t, d, 0, ys[r], x, x, n) // y = 2x
			check(t, d.Record(0, 0))
			check(t, d.Wait(1, 0))
			check(t, d.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k, DType: ir.F32, In: ys[r], Out: ys[r], Count: n}))
		}
		got := read(t, devs[0], ys[0], n) // runs every rank's items
		want := ramp(n, 12)               // 2x + 4x + 6x
		reordered := 0
		for _, d := range devs {
			reordered += d.Reordered()
			d.q.Lock()
			for s, st := range d.streams {
				if len(st.items) > 0 && st.items[0].seq < d.fence {
					t.Errorf("rank %d stream %d has work left", d.Rank(), s)
				}
			}
			d.q.Unlock()
		}
		switch {
		case !drop && !equal(got, want):
			t.Errorf("held back: %v..., want %v...", got[:3], want[:3])
		case drop && (equal(got, want) || reordered == 0):
			t.Errorf("held back, waits dropped: %v... with %d reordered: the collective waited", got[:3], reordered)
		}
		for r, d := range devs[1:] {
			if y := read(t, d, ys[r+1], n); !drop && !equal(y, want) {
				t.Errorf("held back: rank %d: %v...", r+1, y[:3])
			}
		}
	}
}

// TestCollSplit: a device outside a world has no collectives; ranks
// whose k-th groups name each other differently fail, and so does a call
// on such a communicator.
func TestCollSplit(t *testing.T) {
	d := NewDevice()
	if _, err := d.Split([]int{0}); err == nil || !strings.Contains(err.Error(), "no world") {
		t.Errorf("Split outside a world: %v", err)
	}
	if err := d.Collective(0, &engine.DeviceColl{Kind: ir.AllReduce, DType: ir.F32}); err == nil || !strings.Contains(err.Error(), "no world") {
		t.Errorf("Collective outside a world: %v", err)
	}
	devs := NewWorld(3)
	if _, err := devs[0].Split([]int{1, 2}); !errors.Is(err, engine.ErrCommInvalid) {
		t.Errorf("Split without the device's rank: %v", err)
	}
	k0, err := devs[0].Split([]int{0, 1})
	check(t, err)
	a := buf(t, devs[0], 4, nil)
	check(t, devs[0].Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k0, DType: ir.F32, In: a, Out: a, Count: 4}))
	if _, err := devs[1].Split([]int{1, 0}); err != nil { // rank 1's first
		t.Errorf("rank 1's first Split: %v", err)
	}
	if _, err := devs[1].Split([]int{1, 0}); !errors.Is(err, engine.ErrCommMismatch) {
		t.Errorf("rank 1 gave another order: %v", err)
	}
	if err := devs[0].Sync(); !errors.Is(err, engine.ErrCommMismatch) {
		t.Errorf("a call on the communicator: %v", err)
	}
}

// TestCollOpen: the kind "sim" opened with --collectives device gives
// the ranks devices of one world (a rank asked for again starts the next
// run's); ordered gives devices outside any; ranks in several processes
// are refused in one sentence.
func TestCollOpen(t *testing.T) {
	forRank, err := open(engine.DeviceOptions{})
	check(t, err)
	dev, err := forRank(0)
	check(t, err)
	if _, err := dev.(engine.DeviceCollectives).Split([]int{0}); err == nil {
		t.Error("ordered: a device with collectives")
	}
	for _, w := range []engine.DeviceWorld{
		{Size: 2, Local: []int{0}, Bootstrap: func(int, []byte) ([]byte, error) { return nil, nil }},
		{Size: 2, Local: []int{1}},
	} {
		_, err := open(engine.DeviceOptions{Collectives: engine.CollectivesDevice, World: w})
		if err == nil || err.Error() != "the simulated GPU's collectives need every rank in one process (use --collectives ordered under mpirun)" {
			t.Errorf("ranks in several processes: %v", err)
		}
	}
	forRank, err = open(engine.DeviceOptions{Collectives: engine.CollectivesDevice, World: engine.DeviceWorld{Size: 2, Local: []int{0, 1}}})
	check(t, err)
	for run := range 2 {
		devs := make([]*Device, 2)
		for r := range devs {
			dev, err := forRank(r)
			check(t, err)
			devs[r] = dev.(*Device)
			if devs[r].Rank() != r {
				t.Fatalf("run %d: rank %d's device is rank %d's", run, r, devs[r].Rank())
			}
		}
		addrs := make([]uint64, 2)
		for r, d := range devs {
			addrs[r] = buf(t, d, 8, ramp(8, float32(r+1)))
		}
		coll, syncs := collCall(devs, func(r int, d *Device, k int) engine.DeviceColl {
			return engine.DeviceColl{Kind: ir.AllReduce, Comm: k, DType: ir.F32, In: addrs[r], Out: addrs[r], Count: 8}
		})
		check(t, errors.Join(append(coll, syncs...)...))
		for r, d := range devs {
			if got := read(t, d, addrs[r], 8); !equal(got, ramp(8, 3)) {
				t.Errorf("run %d: rank %d: %v", run, r, got)
			}
		}
	}
	if _, err := forRank(2); err == nil {
		t.Error("rank 2 of a world of 2")
	}
}

// TestCollHeldBackCrossedOrder: ranks that issue two collectives on one
// stream in different orders wait on one another (a GPU would hang);
// held back, the drain that finds nothing to run and nothing to wait for
// fails them, on every rank, instead of hanging.
func TestCollHeldBackCrossedOrder(t *testing.T) {
	devs := NewWorld(2, HoldBack)
	addrs := make([]uint64, 2)
	for r, d := range devs {
		ka, err := d.Split([]int{0, 1})
		check(t, err)
		kb, err := d.Split([]int{1, 0})
		check(t, err)
		addrs[r] = buf(t, d, 8, ramp(8, 1))
		order := []int{ka, kb}
		if r == 1 {
			order = []int{kb, ka}
		}
		for _, k := range order {
			check(t, d.Collective(1, &engine.DeviceColl{Kind: ir.AllReduce, Comm: k, DType: ir.F32, In: addrs[r], Out: addrs[r], Count: 8}))
		}
	}
	for r, d := range devs {
		if err := d.Sync(); !errors.Is(err, engine.ErrCommInvalid) || !strings.Contains(err.Error(), "wait on one another") {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}
