package cost

import (
	"amspc/internal/testjob"
	"math"
	"strings"
	"testing"

	"amspc/ir"
)

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-9*math.Max(1, math.Abs(want)) {
		t.Errorf("%s = %.12g, want %.12g", what, got, want)
	}
}

// TestModelStatesPerStrategy pins P/G/OS bytes of tiny (fp32: 4+4+8 B per
// param; groups of 16384, 99072 and 16448 params padded to even shards).
func TestModelStatesPerStrategy(t *testing.T) {
	m, err := NewModel(testjob.Load(t, "tiny"), DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	if m.GroupParams != [NumGroups]int64{16384, 99072, 16448} {
		t.Fatalf("group params %v", m.GroupParams)
	}
	one, four, eight := ir.Factor{S0: 1, S1: 1}, ir.Factor{S0: 4, S1: 1}, ir.Factor{S0: 4, S1: 2}
	cases := []struct {
		name    string
		f       Factors
		p, g, o float64
	}{
		{"ddp", Factors{P: one, G: one, OS: one}, 527616, 527616, 1055232},
		{"zero1", Factors{P: one, G: one, OS: eight}, 527616, 527616, (2048 + 12384 + 2056) * 8},
		{"zero2", Factors{P: one, G: eight, OS: eight}, 527616, (2048 + 12384 + 2056) * 4, (2048 + 12384 + 2056) * 8},
		{"zero3", Factors{P: eight, G: eight, OS: eight}, 65952, 65952, 131904},
		{"mics4", Factors{P: four, G: four, OS: four}, 131904, 131904, 263808},
		{"hpz4", Factors{P: eight, G: eight, OS: eight, Secondary: four}, 65952 + 131904, 65952, 131904},
	}
	for _, c := range cases {
		e := m.Evaluate(Uniform(c.name, c.f, ir.RecomputeNone, 2))
		near(t, c.name+" params", e.Mem.Params, c.p)
		near(t, c.name+" grads", e.Mem.Grads, c.g)
		near(t, c.name+" optim", e.Mem.Optim, c.o)
		near(t, c.name+" total", e.Mem.Total, e.Mem.Params+e.Mem.Grads+e.Mem.Optim+e.Mem.Activations+e.Mem.Buffers)
	}
}

// TestActivationsFromIR pins tiny's activation count: per block, the saved
// values of its ops (rmsnorm inputs, matmul inputs, attention q/k/v/out,
// swiglu's inputs, its product) at fp32, batch 2 x seq 64; unfused
// (Config.Unfused, -d=fuse/off), silu's output too.
func TestActivationsFromIR(t *testing.T) {
	unfused := DefaultConfig
	unfused.Unfused = true
	u, err := NewModel(testjob.Load(t, "tiny"), unfused)
	if err != nil {
		t.Fatal(err)
	}
	m, err := NewModel(testjob.Load(t, "tiny"), DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	const tok = 2 * 64
	// x, h, q, k, v, attn out (=wo input), x', h' (8 of width 64), w1
	// out (silu's input), w3 out, the product (w2's input): 3 of width
	// 172; and silu's output when unfused.
	d, f := int64(tok*64*4), int64(tok*172*4)
	for _, s := range u.Stages {
		if s.Group == Blocks && s.Saved != 8*d+4*f {
			t.Errorf("unfused: %s saves %d bytes, want %d", s.Name, s.Saved, 8*d+4*f)
		}
	}
	wantBlock := 8*d + 3*f
	for _, s := range m.Stages {
		if s.Group == Blocks && s.Saved != wantBlock {
			t.Errorf("%s saves %d bytes, want %d", s.Name, s.Saved, wantBlock)
		}
		if s.Group == Blocks && s.Boundary != d {
			t.Errorf("%s boundary %d bytes, want %d (the residual stream)", s.Name, s.Boundary, d)
		}
	}
	full := m.Activations(ir.RecomputeFull, 1)
	none := m.Activations(ir.RecomputeNone, 1)
	if !(full < none) {
		t.Errorf("recompute must save memory: full %g >= none %g", full, none)
	}
	near(t, "double micro-batch", m.Activations(ir.RecomputeNone, 2), 2*none)
}

// TestMoreShardingNeverMoreState: along any nesting chain of factors,
// model-state memory does not grow.
func TestMoreShardingNeverMoreState(t *testing.T) {
	m, err := NewModel(testjob.Load(t, "llama-7b"), DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	fs := []ir.Factor{{S0: 1, S1: 1}, {S0: 2, S1: 1}, {S0: 4, S1: 1}, {S0: 8, S1: 1}, {S0: 8, S1: 2}, {S0: 8, S1: 16}, {S0: 8, S1: 128}}
	state := func(f Factors) float64 {
		var t float64
		for g := Group(0); g < NumGroups; g++ {
			p, gr, o := m.GroupState(g, f)
			t += p + gr + o
		}
		return t
	}
	for i := range fs {
		for j := i; j < len(fs); j++ {
			for k := j; k < len(fs); k++ {
				base := state(Factors{P: fs[i], G: fs[j], OS: fs[k]})
				for _, more := range []Factors{
					{P: fs[min(i+1, j)], G: fs[j], OS: fs[k]},
					{P: fs[i], G: fs[min(j+1, k)], OS: fs[k]},
					{P: fs[i], G: fs[j], OS: fs[min(k+1, len(fs)-1)]},
				} {
					if s := state(more); s > base {
						t.Errorf("%v holds %g B, more than %v at %g B", more, s, Factors{P: fs[i], G: fs[j], OS: fs[k]}, base)
					}
				}
			}
		}
	}
}

// TestPaperTerms checks T_comm's terms against the paper's formulas
// written out here for ZeRO-1 on tiny (s_p = s_g = 1, s_os = 4x2, M = 2):
// T_p = T_g = 0, T_os0 = 2Φ/U x t(AR, U, 4x2), T_os1 = 8 x t(BC, 2Φ/8, 4x2),
// summed over the three groups.
func TestPaperTerms(t *testing.T) {
	m, err := NewModel(testjob.Load(t, "tiny"), DefaultConfig)
	if err != nil {
		t.Fatal(err)
	}
	dp := ir.Factor{S0: 4, S1: 2}
	e := m.Evaluate(Uniform("zero1", Factors{P: ir.Factor{S0: 1, S1: 1}, G: ir.Factor{S0: 1, S1: 1}, OS: dp}, ir.RecomputeNone, 2))
	U := DefaultConfig.BucketBytes
	var os0, os1 float64
	for _, n := range m.GroupParams {
		os0 += float64(n) * 4 / U * m.Topo.Collective(AllReduce, U, dp).Time
		os1 += 8 * m.Topo.Collective(Broadcast, float64(n)*4/8, dp).Time
	}
	near(t, "T_p", e.Tp, 0)
	near(t, "T_g", e.Tg, 0)
	near(t, "T_os0", e.Tos0, os0)
	near(t, "T_os1", e.Tos1, os1)
	near(t, "T_comm", e.PaperComm, os0+os1)
}

func TestProfile(t *testing.T) {
	csv := "collective,s0,s1,bytes,effective_gbps\n" +
		"all_gather,8,1,1000000,10\n" +
		"all_gather,8,1,100000000,100\n"
	p, err := ParseProfile("p.csv", strings.NewReader(csv))
	if err != nil {
		t.Fatal(err)
	}
	g := ir.Factor{S0: 8, S1: 1}
	bw, ok := p.Bandwidth(AllGather, g, 1e7) // halfway in log space
	if !ok {
		t.Fatal("profiled group not found")
	}
	near(t, "interpolated", bw, math.Sqrt(10e9*100e9))
	bw, _ = p.Bandwidth(AllGather, g, 1)
	near(t, "below the range (the first measurement)", bw, 10e9)
	if _, ok := p.Bandwidth(AllReduce, g, 1e7); ok {
		t.Error("an unprofiled collective must fall back to the analytic model")
	}
	topo := *testTopo
	topo.Profile = p
	near(t, "profiled time", topo.Collective(AllGather, 1e8, g).Time, 1e8/100e9)
	for _, bad := range []string{
		"collective,s0,s1,bytes\n",
		"collective,s0,s1,bytes,effective_gbps\nall_gather,8,1,100\n",
		"collective,s0,s1,bytes,effective_gbps\nall_scatter,8,1,100,1\n",
		"collective,s0,s1,bytes,effective_gbps\nall_gather,0,1,100,1\n",
		"collective,s0,s1,bytes,effective_gbps\nall_gather,8,1,-5,1\n",
		"collective,s0,s1,bytes,effective_gbps\nall_gather,8,1,5,1\nall_gather,8,1,5,2\n",
		"collective,s0,s1,bytes,effective_gbps\n",
	} {
		if _, err := ParseProfile("p.csv", strings.NewReader(bad)); err == nil || !strings.HasPrefix(err.Error(), "p.csv") {
			t.Errorf("profile %q: error %v, want one naming p.csv", bad, err)
		}
	}
}

// TestLayerActivationsFormula: the cost model's count of what a block of
// LLaMA-7B and of LLaMA-2-70B (grouped-query attention) keeps in bf16,
// and of what full and selective recompute keep, is the formula's
// (LayerActivations) at one rank.
func TestLayerActivationsFormula(t *testing.T) {
	for _, c := range []struct {
		name string
		blk  Block
	}{{"llama-7b", Block{H: 4096, KV: 4096, F: 11008}}, {"llama2-70b-gqa", Block{H: 8192, KV: 1024, F: 28672}}} {
		m, err := NewModel(testjob.Load(t, c.name), DefaultConfig)
		if err != nil {
			t.Fatal(err)
		}
		tr := m.Job.Train
		for _, s := range m.Stages {
			if s.Group != Blocks {
				continue
			}
			for _, x := range []struct {
				rc  ir.Recompute
				got int64
			}{{ir.RecomputeNone, s.Saved}, {ir.RecomputeSelective, s.Saved - s.Selective}, {ir.RecomputeFull, s.Boundary}} {
				if want := LayerActivations(c.blk, tr.SeqLen, tr.MicroBatch, 2, 1, false, x.rc); x.got != want {
					t.Errorf("%s %s recompute %v: keeps %d bytes, the formula %d", c.name, s.Name, x.rc, x.got, want)
				}
			}
		}
	}
}
