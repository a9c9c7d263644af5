package profile

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"amspc/ir"
)

const profileV2 = `# amspc profile v2
# backend = local
# ranks = 8 (2 nodes x 4)
collective,s0,s1,bytes,effective_gbps
all_gather,2,1,4096,0.5
all_gather,2,1,65536,2
kernel,shapes,dtype,flops,seconds
matmul,128x64;64x64,f32,1048576,0.001
matmul,128x64;64x256,f32,4194304,0.002
matmul,128x64;64x256,bf16,4194304,0.004
embed,2x64;256x64,f32,0,0.0001
`

// A written profile reads back to the same text: rows sorted, numbers in
// one format, metadata kept.
func TestProfileRoundTrip(t *testing.T) {
	p, err := Parse("p.csv", strings.NewReader(profileV2))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.MetaValue("ranks"); got != "8 (2 nodes x 4)" {
		t.Errorf("meta ranks = %q", got)
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := `# amspc profile v3
# backend = local
# ranks = 8 (2 nodes x 4)
collective,s0,s1,bytes,effective_gbps
all_gather,2,1,4096,0.5
all_gather,2,1,65536,2
kernel,shapes,dtype,flops,seconds
embed,2x64;256x64,f32,0,0.0001
matmul,128x64;64x256,bf16,4194304,0.004
matmul,128x64;64x256,f32,4194304,0.002
matmul,128x64;64x64,f32,1048576,0.001
`
	if b.String() != want {
		t.Errorf("written:\n%s\nwant:\n%s", b.String(), want)
	}
	q, err := Parse("q.csv", &b)
	if err != nil {
		t.Fatal(err)
	}
	var c bytes.Buffer
	q.Write(&c)
	if c.String() != want {
		t.Errorf("second round trip differs:\n%s", c.String())
	}
}

// Shared all-gathers (all_gather_shared) read and write back after the
// plain ones of their kind, and are looked up apart from them: a plain
// gather of the same group and size is another measurement.
func TestProfileSharedGather(t *testing.T) {
	const text = `# amspc profile v3
collective,s0,s1,bytes,effective_gbps
all_gather_shared,2,1,65536,8
all_gather,2,1,65536,2
all_gather_shared,2,1,4096,1
reduce_scatter,2,1,4096,3
`
	p, err := Parse("p.csv", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := `# amspc profile v3
collective,s0,s1,bytes,effective_gbps
all_gather,2,1,65536,2
all_gather_shared,2,1,4096,1
all_gather_shared,2,1,65536,8
reduce_scatter,2,1,4096,3
`
	if b.String() != want {
		t.Errorf("written:\n%s\nwant:\n%s", b.String(), want)
	}
	g := ir.Factor{S0: 2, S1: 1}
	if bw, ok := p.Bandwidth(ir.AllGather, g, 65536); !ok || math.Abs(bw-2e9) > 1 {
		t.Errorf("plain all_gather: %g, %v; want 2e9 (the plain row)", bw, ok)
	}
	if bw, ok := p.SharedBandwidth(g, 65536); !ok || math.Abs(bw-8e9) > 1 {
		t.Errorf("shared all_gather: %g, %v; want 8e9", bw, ok)
	}
	// Halfway in log(size): the geometric mean of 1 and 8 GB/s.
	if bw, ok := p.SharedBandwidth(g, 16384); !ok || math.Abs(bw-math.Sqrt(8)*1e9) > 1 {
		t.Errorf("shared all_gather at 16 KiB: %g, %v; want %g", bw, ok, math.Sqrt(8)*1e9)
	}
	if _, ok := p.SharedBandwidth(ir.Factor{S0: 4, S1: 1}, 65536); ok {
		t.Error("a group shape without shared rows has a shared bandwidth")
	}
	if !p.HasShared() {
		t.Error("HasShared is false")
	}
	// The peak: the fastest row of the kind and group, at any size.
	for _, c := range []struct {
		coll   ir.Coll
		shared bool
		want   float64
	}{{ir.AllGather, true, 8e9}, {ir.AllGather, false, 2e9}, {ir.ReduceScatter, false, 3e9}} {
		if bw, ok := p.PeakBandwidth(c.coll, g, c.shared); !ok || math.Abs(bw-c.want) > 1 {
			t.Errorf("%v (shared %v) peak: %g, %v; want %g", c.coll, c.shared, bw, ok, c.want)
		}
	}
	if _, ok := p.PeakBandwidth(ir.AllReduce, g, false); ok {
		t.Error("all_reduce, never measured, has a peak")
	}
	plain, err := Parse("q.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_gather,2,1,65536,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.HasShared() {
		t.Error("a profile without all_gather_shared rows HasShared")
	}
	if _, err := Parse("r.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_gather_shared,2,1,4096,1\nall_gather_shared,2,1,4096,2\n")); err == nil ||
		!strings.HasPrefix(err.Error(), "r.csv:3: all_gather_shared 2x1 4096 measured twice (first on line 2)") {
		t.Errorf("a shared row measured twice: %v", err)
	}
}

// The pack table reads and writes back, sorted; PackTime takes a
// measured shape as it is and scales the nearest by elements.
func TestProfilePacks(t *testing.T) {
	text := `kernel,shapes,dtype,flops,seconds
matmul,16x64;64x64,f32,131072,0.001
pack,k,n,seconds
matmul_grad_a,64x128,0.0005
matmul,64,128,0.0002
matmul,64,64,0.0001
`
	if _, err := Parse("p.csv", strings.NewReader(text)); err == nil || !strings.Contains(err.Error(), "p.csv:4: want 4 fields") {
		t.Fatalf("a 3-field pack row: %v", err)
	}
	text = strings.Replace(text, "64x128", "64,128", 1)
	p, err := Parse("p.csv", strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if !p.HasPacks() {
		t.Fatal("no packs")
	}
	for _, c := range []struct {
		kind ir.OpKind
		k, n int64
		want float64
		ok   bool
	}{
		{ir.MatMul, 64, 64, 0.0001, true},
		{ir.MatMul, 64, 128, 0.0002, true},
		{ir.MatMul, 128, 128, 0.0004, true}, // 64x128's, twice the elements
		{ir.MatMul, 32, 32, 0.000025, true},
		{ir.MatMulGradA, 64, 64, 0.00025, true},
		{ir.MatMulGradB, 64, 64, 0, false},
	} {
		got, ok := p.PackTime(c.kind, c.k, c.n)
		if ok != c.ok || math.Abs(got-c.want) > 1e-15 {
			t.Errorf("PackTime(%v, %d, %d) = %g, %v; want %g, %v", c.kind, c.k, c.n, got, ok, c.want, c.ok)
		}
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	want := `# amspc profile v3
kernel,shapes,dtype,flops,seconds
matmul,16x64;64x64,f32,131072,0.001
pack,k,n,seconds
matmul,64,64,0.0001
matmul,64,128,0.0002
matmul_grad_a,64,128,0.0005
`
	if b.String() != want {
		t.Errorf("written:\n%s\nwant:\n%s", b.String(), want)
	}
	for _, c := range []struct{ text, want string }{
		{"pack,k,n\n", "p.csv:1: header must be pack,k,n,seconds"},
		{"pack,k,n,seconds\nadd,2,2,1\n", `p.csv:2: pack of "add": want matmul or matmul_grad_a`},
		{"pack,k,n,seconds\nmatmul,0,2,1\n", `p.csv:2: k "0" and n "2" must be positive integers`},
		{"pack,k,n,seconds\nmatmul,2,2,0\n", `p.csv:2: seconds "0" must be a positive number`},
		{"pack,k,n,seconds\nmatmul,2,2,1\nmatmul,2,2,1\n", "p.csv:3: pack matmul 2x2 measured twice (first on line 2)"},
	} {
		if _, err := Parse("p.csv", strings.NewReader(c.text)); err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("profile %q: error %v, want %q", c.text, err, c.want)
		}
	}
}

// The overhead table reads and writes back, after the other tables.
func TestProfileOverhead(t *testing.T) {
	p, err := Parse("p.csv", strings.NewReader(profileV2+"overhead,value\ncollective,0.0002\nkernel_scale,0.75\ninstruction,2e-06\nwake,1e-05\ncores,2\ninstruction_tp,4e-06\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Overhead{KernelScale: 0.75, Collective: 200e-6, Instruction: 2e-6, InstructionTP: 4e-6, Wake: 1e-5, Cores: 2}); p.Overhead != want {
		t.Errorf("overhead %+v, want %+v", p.Overhead, want)
	}
	var b bytes.Buffer
	if err := p.Write(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "overhead,value\nkernel_scale,0.75\ncollective,0.0002\ninstruction,2e-06\ninstruction_tp,4e-06\nwake,1e-05\ncores,2\n") {
		t.Errorf("written:\n%s", b.String())
	}
	q, err := Parse("q.csv", &b)
	if err != nil || q.Overhead != p.Overhead {
		t.Errorf("read back %+v, %v", q.Overhead, err)
	}
	// Tensor-parallel programs take their own instruction cost; without
	// one, everyone's.
	if a, b := p.Overhead.InstructionOf(true), p.Overhead.InstructionOf(false); a != 4e-6 || b != 2e-6 {
		t.Errorf("InstructionOf: %g (meeting), %g; want 4e-06, 2e-06", a, b)
	}
	if a := (Overhead{Instruction: 2e-6}).InstructionOf(true); a != 2e-6 {
		t.Errorf("InstructionOf without instruction_tp: %g, want 2e-06", a)
	}
}

// A version-1 file (one table, no version line) still reads.
func TestProfileV1(t *testing.T) {
	p, err := Parse("v1.csv", strings.NewReader("collective,s0,s1,bytes,effective_gbps\nall_reduce,4,2,1024,1.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bw, ok := p.Bandwidth(ir.AllReduce, ir.Factor{S0: 4, S1: 2}, 1024); !ok || math.Abs(bw-1.5e9) > 1 {
		t.Errorf("bandwidth %v %v", bw, ok)
	}
	if _, ok := p.KernelTime(ir.MatMul, [][]int64{{2, 2}, {2, 2}}, 16); ok {
		t.Error("a profile without kernels answered for a kernel")
	}
}

func TestKernelTime(t *testing.T) {
	p, err := Parse("p.csv", strings.NewReader(profileV2))
	if err != nil {
		t.Fatal(err)
	}
	// Exact: the measured seconds (two dtypes: their mean).
	if s, ok := p.KernelTime(ir.MatMul, [][]int64{{128, 64}, {64, 64}}, 1048576); !ok || s != 0.001 {
		t.Errorf("exact hit: %v %v", s, ok)
	}
	if s, _ := p.KernelTime(ir.MatMul, [][]int64{{128, 64}, {64, 256}}, 4194304); math.Abs(s-0.003) > 1e-12 {
		t.Errorf("exact hit over two dtypes: %v, want their mean 0.003", s)
	}
	// Between the points: rates 1048576/0.001 and 4194304/0.003 (the
	// mean of its two rows' rates), linear in log(flops).
	r1, r2 := 1048576/0.001, (4194304/0.002+4194304/0.004)/2
	f := 2097152.0 // halfway in log
	want := f / ((r1 + r2) / 2)
	if s, ok := p.KernelTime(ir.MatMul, [][]int64{{128, 64}, {64, 128}}, f); !ok || math.Abs(s-want) > 1e-12 {
		t.Errorf("interpolated: %v, want %v", s, want)
	}
	// Outside: held at the nearest rate.
	if s, _ := p.KernelTime(ir.MatMul, [][]int64{{1, 64}, {64, 64}}, 8192); math.Abs(s-8192/r1) > 1e-15 {
		t.Errorf("below: %v, want %v", s, 8192/r1)
	}
	if s, _ := p.KernelTime(ir.MatMul, [][]int64{{4096, 64}, {64, 256}}, 4194304*32); math.Abs(s-4194304*32/r2) > 1e-12 {
		t.Errorf("above: %v, want %v", s, 4194304*32/r2)
	}
	// No FLOPs: the rate is of operand elements.
	elems := 2*64 + 256*64.0
	if s, ok := p.KernelTime(ir.Embed, [][]int64{{4, 64}, {256, 64}}, 0); !ok || math.Abs(s-(4*64+256*64)/(elems/0.0001)) > 1e-15 {
		t.Errorf("embed by elements: %v %v", s, ok)
	}
	if _, ok := p.KernelTime(ir.Attention, [][]int64{{2, 64, 64}, {2, 64, 64}, {2, 64, 64}}, 1e6); ok {
		t.Error("an unmeasured kind must say so")
	}
}

// Bad rows are refused with file:line.
func TestProfileErrors(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"collective,s0,s1,bytes\n", "p.csv:1: header must be collective,s0,s1,bytes,effective_gbps"},
		{"all_gather,8,1,100,1\n", "p.csv:1: want a header"},
		{"# amspc profile v4\n", "p.csv:1: profile version v4"},
		{"kernel,shapes,dtype\n", "p.csv:1: header must be kernel,shapes,dtype,flops,seconds"},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x2;2x2,f32,16\n", "p.csv:2: want 5 fields"},
		{"kernel,shapes,dtype,flops,seconds\nmatmull,2x2;2x2,f32,16,1\n", `p.csv:2: unknown kernel "matmull"`},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x2,f32,16,1\n", "p.csv:2: matmul takes 2 operands, the row gives 1 shapes"},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x0;2x2,f32,16,1\n", `p.csv:2: shape "2x0"`},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x2;2x2,f31,16,1\n", `p.csv:2: unknown dtype "f31"`},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x2;2x2,f32,-1,1\n", `p.csv:2: flops "-1"`},
		{"kernel,shapes,dtype,flops,seconds\nmatmul,2x2;2x2,f32,16,0\n", `p.csv:2: seconds "0"`},
		{"kernel,shapes,dtype,flops,seconds\n\nmatmul,2x2;2x2,f32,16,1\nmatmul,2x2;2x2,f32,16,2\n", "p.csv:4: matmul(2x2;2x2) f32 measured twice (first on line 3)"},
		{"kernel,shapes,dtype,flops,seconds\nall_gather,8,1,100,1\n", `p.csv:2: unknown kernel "all_gather"`},
		{"collective,s0,s1,bytes,effective_gbps\nmatmul,2x2;2x2,f32,16,1\n", `p.csv:2: unknown collective "matmul"`},
		{"# amspc profile v2\nkernel,shapes,dtype,flops,seconds\n", "p.csv: no measurements"},
		{"overhead,s\n", "p.csv:1: header must be overhead,value"},
		{"overhead,value\nkernel_scale,1e-6,2\n", "p.csv:2: want 2 fields (overhead,value)"},
		{"overhead,value\nwait,1e-6\n", `p.csv:2: unknown overhead "wait" (kernel_scale, collective, instruction, instruction_tp, wake, cores)`},
		{"overhead,value\ncores,1.5\n", `p.csv:2: cores "1.5" must be a whole number`},
		{"overhead,value\nkernel_scale,-1\n", `p.csv:2: value "-1"`},
		{"overhead,value\nkernel_scale,0.5\nkernel_scale,0.6\n", "p.csv:3: overhead kernel_scale measured twice (first on line 2)"},
	} {
		_, err := Parse("p.csv", strings.NewReader(c.text))
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("profile %q: error %v, want %q", c.text, err, c.want)
		}
	}
}

// Memory-bound kernels are rated by operand elements whatever FLOPs a row
// or a call gives (the passes give their adds and casts none), so rows of
// one op share a unit.
func TestKernelTimeElementRate(t *testing.T) {
	p, err := Parse("p.csv", strings.NewReader("kernel,shapes,dtype,flops,seconds\nadd,100;100,f32,100,0.001\nadd,1000;1000,f32,0,0.01\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Both rows: 200000 elements/s; so is a call in between, flops or not.
	for _, flops := range []float64{0, 400} {
		if s, ok := p.KernelTime(ir.Add, [][]int64{{400}, {400}}, flops); !ok || math.Abs(s-0.004) > 1e-12 {
			t.Errorf("add of 400 (flops %v): %v %v, want 0.004", flops, s, ok)
		}
	}
}
