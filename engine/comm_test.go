package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"amspc/ir"
)

// commTopo is 2 nodes x 4 GPUs.
var commTopo = ir.Topology{GPUsPerNode: 4, Nodes: 2}

// commGroups are group shapes of commTopo: the world, replicas of a 2x1
// shard across both nodes, GPU pairs, a node, and the same GPU on both
// nodes.
var commGroups = []ir.Group{
	{Outer: ir.Factor{S0: 4, S1: 2}, Inner: ir.Factor{S0: 1, S1: 1}},
	{Outer: ir.Factor{S0: 4, S1: 2}, Inner: ir.Factor{S0: 2, S1: 1}},
	{Outer: ir.Factor{S0: 2, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}},
	{Outer: ir.Factor{S0: 4, S1: 1}, Inner: ir.Factor{S0: 1, S1: 1}},
	{Outer: ir.Factor{S0: 4, S1: 2}, Inner: ir.Factor{S0: 4, S1: 1}},
}

// commRun runs f on every rank of w, each in its own goroutine, and
// returns their errors. A hang aborts the world and fails the test.
func commRun(t *testing.T, w *LocalWorld, f func(c Comm) error) []error {
	t.Helper()
	errs := make([]error, w.Size())
	var wg sync.WaitGroup
	for r := range w.Size() {
		wg.Go(func() { errs[r] = f(w.Comm(r)) })
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		w.Abort(errors.New("test timeout"))
		<-done
		t.Fatalf("ranks hung: %v", errs)
	}
	return errs
}

func commNoErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// commCheck compares got with want exactly.
func commCheck(what string, got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: len %d, want %d", what, len(got), len(want))
	}
	for k := range got {
		if math.Float32bits(got[k]) != math.Float32bits(want[k]) {
			return fmt.Errorf("%s[%d] = %v, want %v", what, k, got[k], want[k])
		}
	}
	return nil
}

// TestCommCollectives runs each collective on every group shape against
// hand-computed results (small integers, so sums are exact).
func TestCommCollectives(t *testing.T) {
	const m = 5
	for _, grp := range commGroups {
		t.Run(grp.String(), func(t *testing.T) {
			w := NewLocalWorld(commTopo.Ranks())
			errs := commRun(t, w, func(c Comm) error {
				r := c.Rank()
				g := grp.Ranks(commTopo, r)
				n, idx := len(g), grp.Index(commTopo, r)
				if len(g) != grp.Size() || g[idx] != r {
					return fmt.Errorf("group %v, index %d", g, idx)
				}
				const s = ir.CommGather

				// all-gather: out[i*m+k] = 100*g[i] + k
				in := make([]float32, m)
				for k := range in {
					in[k] = float32(100*r + k)
				}
				out := make([]float32, n*m)
				want := make([]float32, n*m)
				for i, q := range g {
					for k := range m {
						want[i*m+k] = float32(100*q + k)
					}
				}
				if err := c.AllGather(s, g, in, out); err != nil {
					return err
				}
				if err := commCheck("all_gather", out, want); err != nil {
					return err
				}

				// in-place all-gather: in is out's own part
				out = make([]float32, n*m)
				copy(out[idx*m:], in)
				if err := c.AllGather(s, g, out[idx*m:(idx+1)*m], out); err != nil {
					return err
				}
				if err := commCheck("in-place all_gather", out, want); err != nil {
					return err
				}

				// reduce-scatter: in[j] = 1000*r + j
				rin := make([]float32, n*m)
				for j := range rin {
					rin[j] = float32(1000*r + j)
				}
				rout := make([]float32, m)
				rwant := make([]float32, m)
				for k := range m {
					for _, q := range g {
						rwant[k] += float32(1000*q + idx*m + k)
					}
				}
				if err := c.ReduceScatter(s, g, rin, rout); err != nil {
					return err
				}
				if err := commCheck("reduce_scatter", rout, rwant); err != nil {
					return err
				}
				// in place: out is in's own part
				if err := c.ReduceScatter(s, g, rin, rin[idx*m:(idx+1)*m]); err != nil {
					return err
				}
				if err := commCheck("in-place reduce_scatter", rin[idx*m:(idx+1)*m], rwant); err != nil {
					return err
				}

				// all-reduce over a length that does not divide by n
				buf := make([]float32, 2*n+1)
				awant := make([]float32, len(buf))
				for k := range buf {
					buf[k] = float32(r*10 + k)
					for _, q := range g {
						awant[k] += float32(q*10 + k)
					}
				}
				if err := c.AllReduce(s, g, buf); err != nil {
					return err
				}
				if err := commCheck("all_reduce", buf, awant); err != nil {
					return err
				}

				// broadcast from the last member
				root := g[n-1]
				bbuf := make([]float32, m)
				bwant := make([]float32, m)
				for k := range m {
					bwant[k] = float32(7*root + k)
				}
				if r == root {
					copy(bbuf, bwant)
				}
				if err := c.Broadcast(s, g, root, bbuf); err != nil {
					return err
				}
				return commCheck("broadcast", bbuf, bwant)
			})
			commNoErrors(t, errs)
		})
	}
}

// TestCommConcurrent interleaves collectives on several groups and on
// both comm streams of every rank at once.
func TestCommConcurrent(t *testing.T) {
	const iters = 30
	w := NewLocalWorld(commTopo.Ranks())
	streams := []struct {
		stream int
		groups []ir.Group
	}{
		{ir.CommGather, []ir.Group{commGroups[0], commGroups[1], commGroups[2]}},
		{ir.CommReduce, []ir.Group{commGroups[4], commGroups[0], commGroups[3], commGroups[1]}},
	}
	errs := commRun(t, w, func(c Comm) error {
		r := c.Rank()
		errs := make([]error, len(streams))
		var wg sync.WaitGroup
		for si, st := range streams {
			wg.Go(func() {
				errs[si] = func() error {
					for it := range iters {
						for gi, grp := range st.groups {
							g := grp.Ranks(commTopo, r)
							n, idx := len(g), grp.Index(commTopo, r)
							m := 3 + gi + it%4
							v := func(q, k int) float32 { return float32(q*1000 + k*10 + it + 100000*st.stream) }
							switch (it + gi) % 3 {
							case 0:
								buf := make([]float32, m)
								want := make([]float32, m)
								for k := range m {
									buf[k] = v(r, k)
									for _, q := range g {
										want[k] += v(q, k)
									}
								}
								if err := c.AllReduce(st.stream, g, buf); err != nil {
									return err
								}
								if err := commCheck("all_reduce", buf, want); err != nil {
									return err
								}
							case 1:
								in := make([]float32, m)
								for k := range m {
									in[k] = v(r, k)
								}
								out := make([]float32, n*m)
								want := make([]float32, 0, n*m)
								for _, q := range g {
									for k := range m {
										want = append(want, v(q, k))
									}
								}
								if err := c.AllGather(st.stream, g, in, out); err != nil {
									return err
								}
								if err := commCheck("all_gather", out, want); err != nil {
									return err
								}
							case 2:
								in := make([]float32, n*m)
								for k := range in {
									in[k] = v(r, k)
								}
								out := make([]float32, m)
								want := make([]float32, m)
								for k := range m {
									for _, q := range g {
										want[k] += v(q, idx*m+k)
									}
								}
								if err := c.ReduceScatter(st.stream, g, in, out); err != nil {
									return err
								}
								if err := commCheck("reduce_scatter", out, want); err != nil {
									return err
								}
							}
						}
					}
					return nil
				}()
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	commNoErrors(t, errs)
}

// commMixed returns random float32s of magnitudes 1e-4 to 1e4, so that
// the order of a sum changes its bits.
func commMixed(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for k := range x {
		x[k] = (rng.Float32()*2 - 1) * float32(math.Pow(10, float64(rng.Intn(9)-4)))
	}
	return x
}

// TestCommDeterminism checks that sums are the left fold in group order,
// bitwise, on every member and in each of 20 runs.
func TestCommDeterminism(t *testing.T) {
	const elems = 10007 // several fold chunks, not a multiple of any group size
	nr := commTopo.Ranks()
	rng := rand.New(rand.NewSource(1))
	inputs := make([][]float32, nr)
	for r := range inputs {
		inputs[r] = commMixed(rng, elems)
	}
	for _, grp := range []ir.Group{commGroups[0], commGroups[1]} {
		t.Run(grp.String(), func(t *testing.T) {
			// The reference: a sequential left fold in group order.
			fold := func(g []int) []float32 {
				s := slices.Clone(inputs[g[0]])
				for _, q := range g[1:] {
					for k, x := range inputs[q] {
						s[k] += x
					}
				}
				return s
			}
			// The test means something only if another order differs.
			g0 := grp.Ranks(commTopo, 0)
			rev := slices.Clone(g0)
			slices.Reverse(rev)
			if slices.Equal(fold(g0), fold(rev)) {
				t.Fatal("reverse order gives the same sums; inputs do not test order")
			}
			for run := range 20 {
				w := NewLocalWorld(nr)
				errs := commRun(t, w, func(c Comm) error {
					r := c.Rank()
					g := grp.Ranks(commTopo, r)
					n, idx := len(g), grp.Index(commTopo, r)
					want := fold(g)
					buf := slices.Clone(inputs[r])
					if err := c.AllReduce(ir.CommReduce, g, buf); err != nil {
						return err
					}
					if err := commCheck("all_reduce", buf, want); err != nil {
						return err
					}
					m := elems / n
					out := make([]float32, m)
					if err := c.ReduceScatter(ir.CommReduce, g, inputs[r][:n*m], out); err != nil {
						return err
					}
					return commCheck("reduce_scatter", out, want[idx*m:(idx+1)*m])
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("run %d rank %d: %v", run, r, err)
					}
				}
			}
		})
	}
}

var errCommTest = errors.New("test failure")

// TestCommMismatch: a call that differs from the others at the same
// sequence number fails on every member, naming both calls, and the
// group carries on with its next call.
func TestCommMismatch(t *testing.T) {
	world := commGroups[0].Ranks(commTopo, 0)
	cases := []struct {
		name string
		odd  func(c Comm, g []int) error
		want []string
	}{
		{"size", func(c Comm, g []int) error {
			return c.AllReduce(1, g, make([]float32, 9))
		}, []string{"collective mismatch", "all_reduce(9)", "all_reduce(8)", "rank 5 called"}},
		{"kind", func(c Comm, g []int) error {
			return c.Broadcast(1, g, 0, make([]float32, 8))
		}, []string{"collective mismatch", "broadcast(8, root 0)", "all_reduce(8)"}},
		{"invalid", func(c Comm, g []int) error {
			return c.AllGather(1, g, make([]float32, 1), make([]float32, 7))
		}, []string{"invalid collective", "rank 5 called all_gather(in 1, out 7): len(out) must be 8 x 1 = 8"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := NewLocalWorld(commTopo.Ranks())
			errs := commRun(t, w, func(c Comm) error {
				// One good call first, so the failure is call 1.
				if err := c.AllReduce(1, world, make([]float32, 8)); err != nil {
					return err
				}
				var err error
				if c.Rank() == 5 {
					err = tc.odd(c, world)
				} else {
					err = c.AllReduce(1, world, make([]float32, 8))
				}
				if err == nil {
					return fmt.Errorf("%w: no error", errCommTest)
				}
				// The next call on the group must work.
				buf := []float32{float32(c.Rank())}
				if err2 := c.AllReduce(1, world, buf); err2 != nil {
					return fmt.Errorf("%w: after the mismatch: %v", errCommTest, err2)
				}
				if buf[0] != 28 {
					return fmt.Errorf("%w: after the mismatch: sum %v, want 28", errCommTest, buf[0])
				}
				return err
			})
			for r, err := range errs {
				if err == nil || errors.Is(err, errCommTest) {
					t.Errorf("rank %d: %v", r, err)
					continue
				}
				var ce *CommError
				if !errors.As(err, &ce) || ce.Rank != r || ce.Seq != 1 || ce.Stream != 1 || !slices.Equal(ce.Group, world) {
					t.Errorf("rank %d: %#v", r, err)
				}
				msg := err.Error()
				if r == 0 {
					t.Log(msg)
				}
				for _, s := range slices.Concat(tc.want, []string{"group [0 4 1 5 2 6 3 7] call 1"}) {
					if !strings.Contains(msg, s) {
						t.Errorf("rank %d: %q does not say %q", r, msg, s)
					}
				}
			}
		})
	}
}

// TestCommAbort: one rank aborts while the others wait in an all-reduce;
// they all return its error, later calls fail at once, and no goroutine
// is left behind.
func TestCommAbort(t *testing.T) {
	before := runtime.NumGoroutine()
	nr := commTopo.Ranks()
	w := NewLocalWorld(nr)
	boom := errors.New("rank 7 ran out of memory")
	g := commGroups[0].Ranks(commTopo, 0)
	results := make(chan error, nr)
	for r := range nr - 1 {
		go func() { results <- w.Comm(r).AllReduce(ir.CommReduce, g, make([]float32, 1024)) }()
	}
	// Wait until the others are in the rendezvous, so the abort is of
	// waiting calls (not a timing assumption: it polls the state).
	for {
		w.mu.Lock()
		op := w.ops[commOpKey{ir.CommReduce, commGroupKey(g), 0}]
		in := op != nil && op.arrived == nr-1
		w.mu.Unlock()
		if in {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Comm(nr - 1).Abort(boom)
	timeout := time.After(time.Second)
	for range nr - 1 {
		select {
		case err := <-results:
			if !errors.Is(err, boom) || !errors.Is(err, ErrCommAborted) {
				t.Errorf("got %v, want the abort", err)
			}
		case <-timeout:
			t.Fatal("ranks still waiting 1s after the abort")
		}
	}
	if err := w.Comm(nr-1).AllReduce(ir.CommReduce, g, make([]float32, 1024)); !errors.Is(err, boom) {
		t.Errorf("call after abort: %v", err)
	}
	select {
	case <-w.Done():
	default:
		t.Error("Done not closed")
	}
	commNoLeak(t, before)
}

// TestCommAbortUnderLoad aborts in the middle of traffic on two streams
// and several groups: every rank stops with an error, whether its call
// was waiting, matched or not yet issued.
func TestCommAbortUnderLoad(t *testing.T) {
	before := runtime.NumGoroutine()
	w := NewLocalWorld(commTopo.Ranks())
	boom := errors.New("boom")
	errs := commRun(t, w, func(c Comm) error {
		r := c.Rank()
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for s := range 2 {
			wg.Go(func() {
				for it := 0; ; it++ {
					if r == 3 && s == 1 && it == 40 {
						c.Abort(boom)
					}
					grp := commGroups[(it+s)%len(commGroups)]
					g := grp.Ranks(commTopo, r)
					buf := make([]float32, 4096)
					if err := c.AllReduce(ir.CommGather+s, g, buf); err != nil {
						errs[s] = err
						return
					}
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	})
	for r, err := range errs {
		if !errors.Is(err, boom) {
			t.Errorf("rank %d: %v", r, err)
		}
	}
	commNoLeak(t, before)
}

// commNoLeak waits for the goroutine count to fall back to before.
func commNoLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCommBadGroup(t *testing.T) {
	c := NewLocalWorld(4).Comm(1)
	for _, g := range [][]int{nil, {0, 2}, {0, 1, 1}, {1, 4}} {
		err := c.AllReduce(0, g, make([]float32, 2))
		if !errors.Is(err, ErrCommInvalid) {
			t.Errorf("group %v: %v", g, err)
		}
	}
	if err := c.Broadcast(0, []int{1}, 3, nil); !errors.Is(err, ErrCommInvalid) {
		t.Errorf("root outside the group: %v", err)
	}
	in := make([]float32, 4)
	if err := c.AllGather(0, []int{1, 0}, in[1:3], in); !errors.Is(err, ErrCommInvalid) {
		t.Errorf("misaligned in-place all-gather: %v", err)
	}
}

func BenchmarkCommAllReduce(b *testing.B) {
	for _, n := range []int{8, 64} {
		for _, elems := range []int{1 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("ranks=%d/elems=%d", n, elems), func(b *testing.B) {
				w := NewLocalWorld(n)
				g := make([]int, n)
				for r := range g {
					g[r] = r
				}
				b.SetBytes(int64(elems) * 4)
				var wg sync.WaitGroup
				for r := range n {
					wg.Go(func() {
						c := w.Comm(r)
						buf := make([]float32, elems)
						for range b.N {
							if err := c.AllReduce(0, g, buf); err != nil {
								panic(err)
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}
