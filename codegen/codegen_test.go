package codegen

// The instruction level sits below the text level, so these tests build
// bundles in Go; what they print is pinned in testdata/ and regenerated
// with `go test ./codegen -update`.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"amspc/internal/golden"
	"amspc/ir"
)

func grp(o0, o1, i0, i1 int) ir.Group {
	return ir.Group{Outer: ir.Factor{S0: o0, S1: o1}, Inner: ir.Factor{S0: i0, S1: i1}}
}

func ins(op ir.OpCode) ir.Instr { return ir.Instr{Op: op, Stage: -1, Micro: -1} }

func alloc(b int32) ir.Instr { in := ins(ir.Alloc); in.Buf = b; return in }
func free(b int32) ir.Instr  { in := ins(ir.Free); in.Buf = b; return in }
func record(e int32) ir.Instr {
	in := ins(ir.Record)
	in.Event = e
	return in
}
func wait(e int32) ir.Instr { in := ins(ir.Wait); in.Event = e; return in }

func kern(k ir.OpKind, out int32, args ...int32) ir.Instr {
	in := ins(ir.Kernel)
	in.Kern, in.Outs, in.Args = k, []int32{out}, args
	return in
}

func coll(c ir.Coll, from, to int32, g ir.Group, n int64) ir.Instr {
	in := ins(ir.Collective)
	in.Coll, in.In, in.Out, in.Group, in.Bytes, in.DType = c, from, to, g, n, ir.BF16
	return in
}

func at(in ir.Instr, stage, micro int32) ir.Instr { in.Stage, in.Micro = stage, micro; return in }

func fattr(name string, v float64) ir.Attr {
	return ir.Attr{Name: name, Val: ir.AttrVal{Type: ir.AttrFloat, Float: v}}
}

// tinyBundle is one layer on 2 nodes x 4 GPUs: params sharded 4x1,
// gradients reduce-scattered inside a node and all-reduced across the
// two replicas, optimizer states sharded 4x2.
func tinyBundle() *Bundle {
	matmul := at(kern(ir.MatMul, 3, 2, 0), 0, 0)
	matmul.Pos = ir.Pos{File: "tiny.amsp", Line: 30, Col: 16}
	matmul.Flops = 2 * 32 * 64 * 64
	load := ins(ir.Load)
	load.Buf, load.Micro = 2, 0
	grad := at(kern(ir.MatMulGradB, 4, 2, 3), 0, 0)
	grad.Pos = ir.Pos{File: "tiny.amsp", Line: 30, Col: 16}
	grad.Comment = "dW1"
	update := kern(ir.AdamWStep, 7, 7, 8, 10, 6)
	update.Outs = []int32{7, 8, 10}
	update.Attrs = []ir.Attr{fattr("lr", 0.001), fattr("beta1", 0.9), fattr("beta2", 0.95), fattr("eps", 1e-8), fattr("weight_decay", 0)}
	update.Stage = 0
	gather := at(coll(ir.AllGather, 1, 0, grp(4, 1, 1, 1), 8192), 0, 0)
	gather.Pos = ir.Pos{File: "tiny.amsp", Line: 30, Col: 16}
	return &Bundle{
		Model: "tiny",
		Topo:  ir.Topology{GPUsPerNode: 4, Nodes: 2},
		Plan:  "4x1/4x1/4x2",
		Micro: 2,
		Machine: Machine{PeakFLOPS: 312e12, Efficiency: 0.55, IntraBW: 150e9, InterBW: 22.5e9,
			IntraLatency: 2e-6, InterLatency: 8e-6, MemoryBytes: 80 << 30},
		Templates: []ir.Program{{
			Buffers: []ir.Buffer{
				{Name: "w1", DType: ir.BF16, Elems: 4096, Parent: -1},
				{Name: "w1.shard", DType: ir.BF16, Elems: 1024, Parent: 0, Part: grp(4, 1, 1, 1)},
				{Name: "x", DType: ir.BF16, Elems: 2048, Parent: -1, Shape: []int64{32, 64}},
				{Name: "y", DType: ir.BF16, Elems: 2048, Parent: -1, Shape: []int64{32, 64}},
				{Name: "g1", DType: ir.BF16, Elems: 4096, Parent: -1},
				{Name: "g1.shard", DType: ir.BF16, Elems: 1024, Parent: 4, Part: grp(4, 1, 1, 1)},
				{Name: "g1.os", DType: ir.BF16, Elems: 512, Parent: 5, Part: grp(4, 2, 4, 1)},
				{Name: "w1.master", DType: ir.F32, Elems: 512, Parent: -1},
				{Name: "w1.m", DType: ir.F32, Elems: 512, Parent: -1},
				{Name: "layers.0.w1", DType: ir.BF16, Elems: 4000, Parent: 0, Offset: 64, Part: grp(1, 1, 1, 1), Shape: []int64{40, 100}},
				{Name: "w1.v", DType: ir.F32, Elems: 512, Parent: -1},
			},
			Streams: [ir.NumStreams][]ir.Instr{
				ir.Compute: {
					load, wait(0), alloc(3), matmul, alloc(4), grad, record(1), free(0), free(3),
					wait(2), update, free(4),
				},
				ir.CommGather: {alloc(0), gather, record(0)},
				ir.CommReduce: {
					wait(1),
					at(coll(ir.ReduceScatter, 4, 5, grp(4, 1, 1, 1), 8192), 0, 0),
					at(coll(ir.AllReduce, 5, 5, grp(4, 2, 4, 1), 2048), 0, -1),
					record(2),
				},
			},
			Events: 3,
			Layouts: []ir.Layout{{
				Stage: "layers.0", Padded: 4096,
				Params: []ir.Slot{
					{Name: "layers.0.norm", Offset: 0, Elems: 64, Init: ir.Init{Kind: ir.InitOnes}},
					{Name: "layers.0.w1", Offset: 64, Elems: 4000, Decay: true, Init: ir.DefaultInit},
				},
				PShard: grp(4, 1, 1, 1), OSShard: grp(4, 2, 4, 1),
				P: 1, Master: 7, M: 8, V: 10,
			}},
			Inputs: []ir.DataInput{{Buf: 2, Shift: 0}},
		}},
	}
}

// twoBundle runs a different template on each of two ranks; they agree
// on their one collective.
func twoBundle() *Bundle {
	cast := kern(ir.Cast, 1, 0)
	cast.Attrs = []ir.Attr{{Name: "dtype", Val: ir.AttrVal{Type: ir.AttrInt, Int: 4}}}
	tmpl := func(extra ...ir.Instr) ir.Program {
		return ir.Program{
			Buffers: []ir.Buffer{
				{Name: "a", DType: ir.BF16, Elems: 8, Parent: -1},
				{Name: "b", DType: ir.F32, Elems: 8, Parent: -1},
			},
			Streams: [ir.NumStreams][]ir.Instr{
				ir.Compute:    append(extra, record(0)),
				ir.CommReduce: {wait(0), coll(ir.AllReduce, 1, 1, grp(2, 1, 1, 1), 32)},
			},
			Events: 1,
		}
	}
	return &Bundle{
		Model:        "two",
		Topo:         ir.Topology{GPUsPerNode: 2, Nodes: 1},
		Plan:         "1x1/1x1/1x1",
		Micro:        1,
		Train:        Train{Schedule: ir.LRSchedule{Kind: ir.WSDLR, Warmup: 3, Decay: 5, MinLR: 1e-5}},
		Templates:    []ir.Program{tmpl(cast), tmpl(kern(ir.SiLU, 1, 0), cast)},
		RankTemplate: []int32{0, 1},
	}
}

func sampleBundles() []*Bundle { return []*Bundle{tinyBundle(), twoBundle()} }

func TestSamplesMatch(t *testing.T) {
	for _, b := range sampleBundles() {
		if err := Match(b); err != nil {
			t.Errorf("%s: %v", b.Model, err)
		}
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	for _, b := range sampleBundles() {
		data := Encode(b)
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", b.Model, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Errorf("%s: decoded bundle differs:\n got %+v\nwant %+v", b.Model, got, b)
		}
		if again := Encode(got); !bytes.Equal(again, data) {
			t.Errorf("%s: re-encoding differs", b.Model)
		}
	}
}

func TestEncodeDeterministic(t *testing.T) {
	a, b := Encode(tinyBundle()), Encode(tinyBundle())
	if !bytes.Equal(a, b) {
		t.Fatal("two encodings of the same bundle differ")
	}
	// The hash of a fixed bundle pins the format: when it changes, the
	// layout changed, and FormatVersion must be bumped with it.
	golden.File(t, "testdata/tiny.plan.sha256", fmt.Sprintf("%x\n", sha256.Sum256(a)))
}

// TestEncodeCountsItsBytes checks Encode's counting pass against the
// bytes it writes, and its checksum, hashed behind the encoding on
// another goroutine for a large bundle, against one hashed after it.
func TestEncodeCountsItsBytes(t *testing.T) {
	big := tinyBundle()
	p := &big.Templates[0]
	for len(Encode(big)) < 5*hashChunk {
		p.Streams[ir.Compute] = append(p.Streams[ir.Compute], p.Streams[ir.Compute]...)
	}
	for _, b := range append(sampleBundles(), big) {
		count := encoder{counting: true}
		count.bundle(b)
		var e encoder
		e.bundle(b)
		if count.n != len(e.buf) {
			t.Errorf("%s: counted %d payload bytes, wrote %d", b.Model, count.n, len(e.buf))
		}
		want := make([]byte, headerSize, headerSize+len(e.buf)+sumSize)
		copy(want, magic)
		binary.LittleEndian.PutUint32(want[len(magic):], FormatVersion)
		binary.LittleEndian.PutUint64(want[len(magic)+4:], uint64(len(e.buf)))
		want = append(want, e.buf...)
		sum := sha256.Sum256(want)
		want = append(want, sum[:]...)
		if got := Encode(b); !bytes.Equal(got, want) {
			t.Errorf("%s: Encode's %d bytes differ from the payload hashed after encoding (%d bytes)", b.Model, len(got), len(want))
		}
	}
}

func TestFloatAttrsBitExact(t *testing.T) {
	b := tinyBundle()
	floats := []float64{math.Copysign(0, -1), math.Inf(-1), math.Float64frombits(0x7ff8000000000123), 5e-324, 0.1}
	k := &b.Templates[0].Streams[ir.Compute][10] // adamw: five float attributes
	for i, f := range floats {
		k.Attrs[i].Val.Float = f
	}
	got, err := Decode(Encode(b))
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range got.Templates[0].Streams[ir.Compute][10].Attrs {
		if x, y := math.Float64bits(a.Val.Float), math.Float64bits(floats[i]); x != y {
			t.Errorf("attr %d: bits %#x, want %#x", i, x, y)
		}
	}
}

// TestEncodeCoversEveryField fails when a type reachable from Bundle
// gains, loses or renames a field: Encode, Decode, Validate and Disasm
// must learn of it, then this list (and FormatVersion, if plans were
// already written).
func TestEncodeCoversEveryField(t *testing.T) {
	known := map[reflect.Type]string{
		reflect.TypeFor[Bundle]():        "Model Topo Plan Micro Tensor Machine Train Templates RankTemplate",
		reflect.TypeFor[ir.Topology]():   "GPUsPerNode Nodes",
		reflect.TypeFor[Machine]():       "PeakFLOPS Efficiency IntraBW InterBW IntraLatency InterLatency MemoryBytes MemBW MatMulHalf SharedCores",
		reflect.TypeFor[ir.Program]():    "Buffers Streams Events Layouts Inputs",
		reflect.TypeFor[ir.Buffer]():     "Name DType Elems Parent Offset Part Shape",
		reflect.TypeFor[ir.Group]():      "Outer Inner",
		reflect.TypeFor[ir.Factor]():     "S0 S1",
		reflect.TypeFor[ir.Instr]():      "Op Kern Coll DType Buf Args Outs Attrs Group Bytes In Out Event Stage Micro Flops Pos Comment",
		reflect.TypeFor[ir.Attr]():       "Name Val",
		reflect.TypeFor[ir.AttrVal]():    "Type Int Float Bool",
		reflect.TypeFor[ir.Pos]():        "File Line Col",
		reflect.TypeFor[ir.Layout]():     "Stage Padded Params PShard OSShard P Master M V",
		reflect.TypeFor[ir.Slot]():       "Name Offset Elems Decay Init Split Shape",
		reflect.TypeFor[ir.Init]():       "Kind Std Of",
		reflect.TypeFor[ir.DataInput]():  "Buf Shift",
		reflect.TypeFor[Train]():         "SeqLen MicroBatch GlobalBatch Steps Seed Schedule",
		reflect.TypeFor[ir.LRSchedule](): "Kind Warmup Decay MinLR",
	}
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type)
	walk = func(typ reflect.Type) {
		switch typ.Kind() {
		case reflect.Slice, reflect.Array, reflect.Pointer:
			walk(typ.Elem())
			return
		case reflect.Struct:
		default:
			return
		}
		if seen[typ] {
			return
		}
		seen[typ] = true
		var names []string
		for f := range typ.Fields() {
			if typ == reflect.TypeFor[ir.Program]() && f.Name == "Seq" {
				continue // the unscheduled form: Validate refuses it (TestValidateRefusesSequence)
			}
			names = append(names, f.Name)
			walk(f.Type)
		}
		want, ok := known[typ]
		switch {
		case !ok:
			t.Errorf("%v (fields %s) is not encoded", typ, strings.Join(names, " "))
		case strings.Join(names, " ") != want:
			t.Errorf("%v has fields %s; the encoding knows %s", typ, strings.Join(names, " "), want)
		}
	}
	walk(reflect.TypeFor[Bundle]())
}

// reseal wraps a payload in a valid header and checksum, so that tests
// (and the fuzzer) reach the payload decoder.
func reseal(payload []byte) []byte {
	out := make([]byte, headerSize, headerSize+len(payload)+sumSize)
	copy(out, magic)
	binary.LittleEndian.PutUint32(out[len(magic):], FormatVersion)
	binary.LittleEndian.PutUint64(out[len(magic)+4:], uint64(len(payload)))
	out = append(out, payload...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...)
}

func payloadOf(data []byte) []byte {
	p := data[min(headerSize, len(data)):]
	if len(p) >= sumSize {
		p = p[:len(p)-sumSize]
	}
	return p
}

func TestDecodeRefuses(t *testing.T) {
	data := Encode(tinyBundle())
	type tc struct {
		name string
		data []byte
		is   error
		msg  string
	}
	var cases []tc
	for _, n := range []int{0, 3, 8, 12, 19, 20, 21, len(data) / 2, len(data) - sumSize, len(data) - 1} {
		cases = append(cases, tc{fmt.Sprint("truncated at ", n), data[:n], ErrTruncated, "truncated plan bundle"})
	}
	flip := bytes.Clone(data)
	flip[headerSize+10] ^= 0x40
	cases = append(cases, tc{"flipped payload byte", flip, ErrCorrupt, "checksum mismatch"})
	sum := bytes.Clone(data)
	sum[len(sum)-1] ^= 1
	cases = append(cases, tc{"flipped checksum byte", sum, ErrCorrupt, "checksum mismatch"})
	cases = append(cases, tc{"trailing bytes", append(bytes.Clone(data), 0), ErrCorrupt, "1 bytes after the checksum"})
	magicBad := bytes.Clone(data)
	copy(magicBad, "AMSPPLAX")
	cases = append(cases, tc{"wrong magic", magicBad, ErrNotPlan, `not a plan bundle: does not start with "AMSPPLAN"`})
	cases = append(cases, tc{"text file", []byte("model tiny\n"), ErrNotPlan, "not a plan"})
	v1 := bytes.Clone(data)
	binary.LittleEndian.PutUint32(v1[len(magic):], 1)
	cases = append(cases, tc{"version 1", v1, ErrVersion, "format version 1, this compiler reads version 5"})

	// Payloads that pass the checksum but do not decode consistently.
	var e encoder
	e.str("m")
	e.i(4)
	e.i(2)
	e.str("p")
	e.i(1)
	e.i(0) // no tensor parallelism
	for range 8 {
		e.f64(1)
	}
	e.i(0)
	e.bool(false)
	for range 5 { // the train settings
		e.i(0)
	}
	e.byte(0) // a constant learning rate
	e.i(0)
	e.i(0)
	e.f64(0)
	e.u(1 << 40)
	cases = append(cases, tc{"huge template count", reseal(e.buf), ErrCorrupt, "template count 1099511627776 exceeds"})
	cases = append(cases, tc{"payload cut short", reseal(payloadOf(data)[:40]), ErrCorrupt, "payload"})
	cases = append(cases, tc{"unread payload", reseal(append(payloadOf(data), 0)), ErrCorrupt, "1 unread payload bytes"})
	long := bytes.Clone(payloadOf(data))
	long = append([]byte{0x84, 0x00}, long[1:]...) // model length 4 as two bytes
	cases = append(cases, tc{"over-long varint", reseal(long), ErrCorrupt, "malformed number"})

	mutate := func(name, msg string, f func(b *Bundle)) {
		b := tinyBundle()
		f(b)
		cases = append(cases, tc{name, Encode(b), ErrCorrupt, msg})
	}
	p := func(b *Bundle) *ir.Program { return &b.Templates[0] }
	mutate("buffer out of range", "compute 2: alloc: buffer b19 out of range", func(b *Bundle) { p(b).Streams[ir.Compute][2].Buf = 19 })
	mutate("kernel arg out of range", "kernel matmul: argument b-1 out of range", func(b *Bundle) { p(b).Streams[ir.Compute][3].Args[0] = -1 })
	mutate("kernel result out of range", "kernel matmul: result b11 out of range", func(b *Bundle) { p(b).Streams[ir.Compute][3].Outs[0] = 11 })
	mutate("kernel attribute missing", "kernel adamw: adamw needs attribute weight_decay=", func(b *Bundle) {
		p(b).Streams[ir.Compute][10].Attrs = p(b).Streams[ir.Compute][10].Attrs[:4]
	})
	mutate("kernel attribute misspelt", `kernel adamw: adamw has no attribute "beta_1"`, func(b *Bundle) { p(b).Streams[ir.Compute][10].Attrs[1].Name = "beta_1" })
	mutate("kernel attribute order", "kernel adamw: attributes (beta1=0.9, lr=0.001, beta2=0.95, eps=1e-08, weight_decay=0) are not in normal form", func(b *Bundle) {
		a := p(b).Streams[ir.Compute][10].Attrs
		a[0], a[1] = a[1], a[0]
	})
	mutate("adamw without layout", "kernel adamw: stage -1 has no layout (1 layouts)", func(b *Bundle) { p(b).Streams[ir.Compute][10].Stage = -1 })
	mutate("adamw results", "kernel adamw: 4 arguments and 1 results, want 4 and 3", func(b *Bundle) { p(b).Streams[ir.Compute][10].Outs = []int32{7} })
	mutate("kernel without result", "kernel matmul: 2 arguments and 0 results, want 2 and 1", func(b *Bundle) { p(b).Streams[ir.Compute][3].Outs = nil })
	mutate("kernel arity", "kernel matmul: 1 arguments and 1 results, want 2 and 1", func(b *Bundle) { p(b).Streams[ir.Compute][3].Args = []int32{2} })
	mutate("collective out of range", "all_gather: buffer b1 -> b20 out of range", func(b *Bundle) { p(b).Streams[ir.CommGather][1].Out = 20 })
	mutate("unknown opcode", "unknown opcode 17", func(b *Bundle) { p(b).Streams[ir.Compute][2].Op = 17 })
	mutate("unknown kernel", `unknown kernel "op(200)"`, func(b *Bundle) { p(b).Streams[ir.Compute][3].Kern = 200 })
	mutate("kernel without op", "compute 3: kernel without an op", func(b *Bundle) { p(b).Streams[ir.Compute][3].Kern = ir.InvalidOp })
	mutate("unknown attribute type", `attribute "lr": unknown type 3`, func(b *Bundle) { p(b).Streams[ir.Compute][10].Attrs[0].Val.Type = 3 })
	mutate("unknown collective", "unknown collective 9", func(b *Bundle) { p(b).Streams[ir.CommGather][1].Coll = 9 })
	mutate("unknown dtype", `buffer b2 "x": unknown dtype dtype(7)`, func(b *Bundle) { p(b).Buffers[2].DType = 7 })
	mutate("collective dtype", "all_gather: no dtype", func(b *Bundle) { p(b).Streams[ir.CommGather][1].DType = ir.InvalidDType })
	mutate("parent out of range", `buffer b1 "w1.shard": parent b99 is not an earlier buffer`, func(b *Bundle) { p(b).Buffers[1].Parent = 99 })
	mutate("parent later", `buffer b5 "g1.shard": parent b6 is not an earlier buffer`, func(b *Bundle) { p(b).Buffers[5].Parent = 6 })
	mutate("parent self", `parent b5 is not an earlier buffer`, func(b *Bundle) { p(b).Buffers[5].Parent = 5 })
	mutate("view too big", "4 parts of 2048 elements at offset 0 do not fit in b0", func(b *Bundle) { p(b).Buffers[1].Elems = 2048 })
	mutate("view offset too big", `view b9 "layers.0.w1": 1 parts of 4000 elements at offset 97 do not fit in b0 "w1" of 4096`, func(b *Bundle) { p(b).Buffers[9].Offset = 97 })
	mutate("negative view offset", "at offset -1 do not fit", func(b *Bundle) { p(b).Buffers[9].Offset = -1 })
	mutate("shape", `buffer b2 "x": shape [32,65] does not hold 2048 elements`, func(b *Bundle) { p(b).Buffers[2].Shape[1] = 65 })
	mutate("layout", `layout "layers.0": param "layers.0.w1" at 64 of 4033 elements does not fit in 4096`, func(b *Bundle) { p(b).Layouts[0].Params[1].Elems = 4033 })
	mutate("init kind", `param "layers.0.w1": unknown init kind 9`, func(b *Bundle) { p(b).Layouts[0].Params[1].Init.Kind = 9 })
	mutate("layout shard", `layout "layers.0": shard group 3x1 does not tile`, func(b *Bundle) { p(b).Layouts[0].OSShard = grp(3, 1, 1, 1) })
	mutate("layout buffer", `layout "layers.0": buffer b11 out of range`, func(b *Bundle) { p(b).Layouts[0].V = 11 })
	mutate("input out of range", "input b30 out of range", func(b *Bundle) { p(b).Inputs[0].Buf = 30 })
	mutate("input twice", "input b2 listed twice", func(b *Bundle) { p(b).Inputs = append(p(b).Inputs, ir.DataInput{Buf: 2, Shift: 1}) })
	mutate("input shift", "input b2: shift 2 is neither 0 nor 1", func(b *Bundle) { p(b).Inputs[0].Shift = 2 })
	mutate("load of non-input", "compute 0: load: b3 is not an input", func(b *Bundle) { p(b).Streams[ir.Compute][0].Buf = 3 })
	mutate("bad group", "group 3x1 does not tile 2 nodes x 4 GPUs", func(b *Bundle) { p(b).Streams[ir.CommGather][1].Group = grp(3, 1, 1, 1) })
	mutate("zero group", "has an empty factor", func(b *Bundle) { p(b).Streams[ir.CommGather][1].Group = ir.Group{} })
	mutate("event out of range", "wait: event e3 out of range (3 events)", func(b *Bundle) { p(b).Streams[ir.Compute][1].Event = 3 })
	mutate("rank template out of range", "rank 7 runs template 1, there are 1", func(b *Bundle) { b.RankTemplate = []int32{0, 0, 0, 0, 0, 0, 0, 1} })
	mutate("rank template length", "3 rank template entries for 8 ranks", func(b *Bundle) { b.RankTemplate = []int32{0, 0, 0} })
	mutate("no templates", "no templates", func(b *Bundle) { b.Templates = nil })
	mutate("empty topology", "topology 0 nodes x 4 GPUs", func(b *Bundle) { b.Topo.Nodes = 0 })

	for _, c := range cases {
		b, err := Decode(c.data)
		if err == nil {
			t.Errorf("%s: decoded %+v", c.name, b)
			continue
		}
		if !errors.Is(err, c.is) {
			t.Errorf("%s: %v is not %v", c.name, err, c.is)
		}
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %q does not say %q", c.name, err, c.msg)
		}
	}
}

func TestFileRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tiny.plan")
	b := tinyBundle()
	if err := WriteFile(path, b); err != nil {
		t.Fatal(err)
	}
	// Overwriting is the atomic case that matters.
	if err := WriteFile(path, b); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, b) {
		t.Error("bundle read back differs")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d files after WriteFile, want 1 (temp file left behind?)", len(entries))
	}

	bad := tinyBundle()
	bad.Templates[0].Events = -1
	if err := WriteFile(filepath.Join(dir, "bad.plan"), bad); err == nil || !strings.Contains(err.Error(), "-1 events") {
		t.Errorf("WriteFile of an invalid bundle: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.plan")); !os.IsNotExist(err) {
		t.Error("WriteFile of an invalid bundle left a file")
	}

	data, _ := os.ReadFile(path)
	os.WriteFile(path, data[:len(data)-5], 0o644)
	_, err = ReadFile(path)
	if !errors.Is(err, ErrTruncated) || !strings.HasPrefix(err.Error(), path+": ") {
		t.Errorf("ReadFile of a truncated file: %v", err)
	}
}

func TestGroupRanks(t *testing.T) {
	topo := ir.Topology{GPUsPerNode: 4, Nodes: 2}
	for _, c := range []struct {
		g     ir.Group
		rank  int
		ranks []int
		index int
	}{
		// Replicas of a 2x1 shard in a 4x2 block: the same GPU parity,
		// GPU-major.
		{grp(4, 2, 2, 1), 5, []int{1, 5, 3, 7}, 1},
		{grp(4, 2, 2, 1), 2, []int{0, 4, 2, 6}, 2},
		{grp(4, 1, 1, 1), 5, []int{4, 5, 6, 7}, 1},
		{grp(2, 1, 1, 1), 6, []int{6, 7}, 0},
		{grp(4, 2, 1, 1), 3, []int{0, 4, 1, 5, 2, 6, 3, 7}, 6},
		{grp(4, 2, 4, 1), 5, []int{1, 5}, 1},
		{grp(2, 2, 1, 1), 5, []int{0, 4, 1, 5}, 3},
		{grp(2, 2, 1, 2), 5, []int{4, 5}, 1},
		{grp(1, 2, 1, 1), 6, []int{2, 6}, 1},
		{grp(1, 1, 1, 1), 6, []int{6}, 0},
	} {
		if got := c.g.Ranks(topo, c.rank); !slices.Equal(got, c.ranks) {
			t.Errorf("%v of rank %d: ranks %v, want %v", c.g, c.rank, got, c.ranks)
		}
		if got := c.g.Index(topo, c.rank); got != c.index {
			t.Errorf("%v of rank %d: index %d, want %d", c.g, c.rank, got, c.index)
		}
		if got := c.g.Size(); got != len(c.ranks) {
			t.Errorf("%v: size %d, want %d", c.g, got, len(c.ranks))
		}
	}
}

// TestGroupPartition checks, for every valid group of a few topologies,
// that the groups partition the ranks, each member lists the same group,
// Index finds the rank in it, and GroupID is the least member.
func TestGroupPartition(t *testing.T) {
	for _, topo := range []ir.Topology{{GPUsPerNode: 4, Nodes: 2}, {GPUsPerNode: 8, Nodes: 4}, {GPUsPerNode: 2, Nodes: 6}, {GPUsPerNode: 1, Nodes: 3}} {
		for _, g := range allGroups(topo) {
			for r := range topo.Ranks() {
				ranks := g.Ranks(topo, r)
				if len(ranks) != g.Size() {
					t.Fatalf("%v on %v, rank %d: %d ranks %v, size %d", g, topo, r, len(ranks), ranks, g.Size())
				}
				i := g.Index(topo, r)
				if i < 0 || i >= len(ranks) || ranks[i] != r {
					t.Fatalf("%v on %v, rank %d: index %d in %v", g, topo, r, i, ranks)
				}
				// The group is the Intra group's Index-th block of
				// Inter groups, each contiguous in group order.
				in, out := g.Intra(), g.Inter()
				if in.Size()*out.Size() != g.Size() || i != in.Index(topo, r)*out.Size()+out.Index(topo, r) {
					t.Fatalf("%v on %v, rank %d: index %d, intra %v index %d, inter %v index %d", g, topo, r, i, in, in.Index(topo, r), out, out.Index(topo, r))
				}
				if blk := ranks[in.Index(topo, r)*out.Size():][:out.Size()]; !slices.Equal(blk, out.Ranks(topo, r)) {
					t.Fatalf("%v on %v, rank %d: block %v, inter group %v", g, topo, r, blk, out.Ranks(topo, r))
				}
				if g.GroupID(topo, r) != slices.Min(ranks) {
					t.Fatalf("%v on %v, rank %d: group id %d, ranks %v", g, topo, r, g.GroupID(topo, r), ranks)
				}
				for _, m := range ranks {
					if got := g.Ranks(topo, m); !slices.Equal(got, ranks) {
						t.Fatalf("%v on %v: rank %d has group %v, member %d has %v", g, topo, r, ranks, m, got)
					}
				}
			}
		}
	}
}

func allGroups(t ir.Topology) []ir.Group {
	divisors := func(n int) (ds []int) {
		for d := 1; d <= n; d++ {
			if n%d == 0 {
				ds = append(ds, d)
			}
		}
		return ds
	}
	var gs []ir.Group
	for _, o0 := range divisors(t.GPUsPerNode) {
		for _, o1 := range divisors(t.Nodes) {
			for _, i0 := range divisors(o0) {
				for _, i1 := range divisors(o1) {
					gs = append(gs, grp(o0, o1, i0, i1))
				}
			}
		}
	}
	return gs
}

func TestDisasm(t *testing.T) {
	var buf bytes.Buffer
	if err := DisasmAll(&buf, tinyBundle(), []int{0, 5}); err != nil {
		t.Fatal(err)
	}
	buf.WriteString("\n")
	if err := Disasm(&buf, twoBundle(), 1); err != nil {
		t.Fatal(err)
	}
	golden.File(t, "testdata/disasm.golden", buf.String())

	if err := Disasm(io.Discard, tinyBundle(), 8); err == nil || err.Error() != "rank 8 out of range (8 ranks)" {
		t.Errorf("rank 8: %v", err)
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1280: "1.25 KiB", 1536: "1.5 KiB", 3 << 30: "3 GiB", math.MaxInt64: "8 EiB"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	long := make([]int, 40)
	for i := range long {
		long[i] = 2 * i
	}
	if got, want := formatRanks(long), "0,2,4,6,8,10,12,14,...,78 (40 ranks)"; got != want {
		t.Errorf("formatRanks = %q, want %q", got, want)
	}
}

// pairBundle is two ranks with a template each; a test breaks one.
func pairBundle() *Bundle {
	g := grp(2, 1, 1, 1)
	tmpl := ir.Program{
		Buffers: []ir.Buffer{
			{Name: "w", DType: ir.BF16, Elems: 1024, Parent: -1},
			{Name: "w.shard", DType: ir.BF16, Elems: 512, Parent: 0, Part: g},
			{Name: "y", DType: ir.BF16, Elems: 1024, Parent: -1},
		},
		Streams: [ir.NumStreams][]ir.Instr{
			ir.Compute:    {wait(0), kern(ir.MatMul, 2, 0, 0), record(1)},
			ir.CommGather: {coll(ir.AllGather, 1, 0, g, 2048), record(0)},
			ir.CommReduce: {wait(1), coll(ir.ReduceScatter, 2, 1, g, 1024)},
		},
		Events: 2,
	}
	clone := func(p ir.Program) ir.Program {
		for s := range p.Streams {
			p.Streams[s] = slices.Clone(p.Streams[s])
		}
		return p
	}
	return &Bundle{
		Model: "pair", Topo: ir.Topology{GPUsPerNode: 2, Nodes: 1}, Plan: "2x1/2x1/2x1", Micro: 1,
		Templates:    []ir.Program{clone(tmpl), clone(tmpl)},
		RankTemplate: []int32{0, 1},
	}
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(p0, p1 *ir.Program)
		want   []string
		rank   int
	}{
		{"ok", func(p0, p1 *ir.Program) {}, nil, 0},
		{"bytes differ", func(p0, p1 *ir.Program) { p1.Streams[ir.CommReduce][1].Bytes = 2048 }, []string{
			"group 2x1 (ranks 0,1): ranks 0, 1: rank 1 comm.reduce 1: ",
			"collective 0 of this group on comm.reduce is reduce_scatter b2 -> b1 group 2x1 (ranks 0,1) 2 KiB bf16",
			"but on rank 0 it is comm.reduce 1: reduce_scatter b2 -> b1 group 2x1 (ranks 0,1) 1 KiB bf16",
		}, 1},
		{"dtype differs", func(p0, p1 *ir.Program) { p1.Streams[ir.CommReduce][1].DType = ir.F32 }, []string{"1 KiB f32", "1 KiB bf16"}, 1},
		{"missing on one rank", func(p0, p1 *ir.Program) { p1.Streams[ir.CommReduce] = p1.Streams[ir.CommReduce][:1] }, []string{
			"group 2x1 (ranks 0,1): ranks 0, 1: rank 0 comm.reduce 1: collective 0 of this group on comm.reduce is reduce_scatter",
			"but rank 1 issues only 0 there",
		}, 0},
		{"extra on one rank", func(p0, p1 *ir.Program) {
			p1.Streams[ir.CommGather] = append(p1.Streams[ir.CommGather], coll(ir.AllGather, 1, 0, grp(2, 1, 1, 1), 2048))
		}, []string{"rank 1 comm.gather 2: collective 1 of this group on comm.gather is all_gather", "but rank 0 issues only 1 there"}, 1},
		{"wrong order", func(p0, p1 *ir.Program) {
			for _, p := range []*ir.Program{p0, p1} {
				p.Streams[ir.CommGather] = append(p.Streams[ir.CommGather], coll(ir.AllGather, 1, 0, grp(2, 1, 1, 1), 4096))
			}
			s := p1.Streams[ir.CommGather]
			s[0], s[2] = s[2], s[0]
		}, []string{"rank 1 comm.gather 0: collective 0 of this group on comm.gather is all_gather b1 -> b0 group 2x1 (ranks 0,1) 4 KiB bf16, but on rank 0 it is comm.gather 0: all_gather b1 -> b0 group 2x1 (ranks 0,1) 2 KiB bf16"}, 1},
		{"wrong stream", func(p0, p1 *ir.Program) {
			p1.Streams[ir.CommGather] = p1.Streams[ir.CommGather][1:]
			p1.Streams[ir.CommReduce] = append(p1.Streams[ir.CommReduce], coll(ir.AllGather, 1, 0, grp(2, 1, 1, 1), 2048))
		}, []string{"rank 0 comm.gather 0: collective 0 of this group on comm.gather is all_gather", "but rank 1 issues only 0 there"}, 0},
		{"wait without record", func(p0, p1 *ir.Program) { p0.Streams[ir.CommGather] = p0.Streams[ir.CommGather][:1] }, []string{
			"rank 0 compute 0: wait e0: event e0 is never recorded on this rank",
		}, 0},
		{"double record", func(p0, p1 *ir.Program) { p0.Streams[ir.Compute] = append(p0.Streams[ir.Compute], record(0)) }, []string{
			"rank 0 comm.gather 1: record e0: event e0 is recorded twice, first at compute 3",
		}, 0},
		{"deadlock", func(p0, p1 *ir.Program) {
			// The gather stream waits for compute, which waits for it.
			p1.Streams[ir.CommGather] = append([]ir.Instr{wait(1)}, p1.Streams[ir.CommGather]...)
		}, []string{
			"rank 1 compute 0: wait e0: deadlock: compute 0 (wait e0) waits for comm.gather 2 (record e0), " +
				"comm.gather 0 (wait e1) waits for compute 2 (record e1), comm.reduce 0 (wait e1) waits for compute 2 (record e1)",
		}, 1},
		{"wait before own record", func(p0, p1 *ir.Program) {
			p0.Streams[ir.Compute] = []ir.Instr{wait(0), wait(1), kern(ir.MatMul, 2, 0, 0), record(1)}
		}, []string{"rank 0 compute 1: wait e1: deadlock: compute 1 (wait e1) waits for compute 3 (record e1)"}, 0},
	} {
		b := pairBundle()
		c.break_(&b.Templates[0], &b.Templates[1])
		err := Match(b)
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			}
			continue
		}
		var me *MatchError
		if !errors.As(err, &me) {
			t.Errorf("%s: %v is not a MatchError", c.name, err)
			continue
		}
		if me.Rank != c.rank {
			t.Errorf("%s: error on rank %d, want %d", c.name, me.Rank, c.rank)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q\ndoes not say %q", c.name, err, w)
			}
		}
	}
}

// TestValidate covers what Decode catches before Validate sees it.
func TestValidate(t *testing.T) {
	b := tinyBundle()
	b.Templates[0].Streams[ir.Compute][3].Kern = 200
	if err := Validate(b); err == nil || err.Error() != "template 0: compute 3: unknown kernel 200" {
		t.Errorf("kernel 200: %v", err)
	}
}

func TestMatchInvalid(t *testing.T) {
	b := pairBundle()
	b.Templates[1].Streams[ir.Compute][0].Event = 5
	err := Match(b)
	var me *MatchError
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "template 1: compute 0: wait: event e5 out of range") {
		t.Errorf("Match of an invalid bundle: %v", err)
	}
}

// nodeBundle runs one template per node of 2 nodes x 4 GPUs. Inside a
// node, the templates' collectives may differ; on groups spanning nodes
// they must not.
func nodeBundle(cross0, cross1 int64) *Bundle {
	tmpl := func(local, cross int64) ir.Program {
		return ir.Program{
			Buffers: []ir.Buffer{{Name: "a", DType: ir.BF16, Elems: 1 << 20, Parent: -1}},
			Streams: [ir.NumStreams][]ir.Instr{ir.CommReduce: {
				coll(ir.AllReduce, 0, 0, grp(4, 1, 1, 1), local),
				coll(ir.AllReduce, 0, 0, grp(4, 2, 4, 1), cross),
			}},
		}
	}
	return &Bundle{
		Model: "nodes", Topo: ir.Topology{GPUsPerNode: 4, Nodes: 2}, Micro: 1,
		Templates:    []ir.Program{tmpl(100, cross0), tmpl(200, cross1)},
		RankTemplate: []int32{0, 0, 0, 0, 1, 1, 1, 1},
	}
}

func TestMatchTemplates(t *testing.T) {
	if err := Match(nodeBundle(64, 64)); err != nil {
		t.Errorf("templates agreeing on every group: %v", err)
	}
	err := Match(nodeBundle(64, 128))
	want := "group 4x2/4x1 (ranks 0,4): ranks 0, 4: rank 4 comm.reduce 1: collective 0 of this group on comm.reduce is all_reduce b0 -> b0 group 4x2/4x1 (ranks 0,4) 128 B bf16, but on rank 0 it is comm.reduce 1: all_reduce b0 -> b0 group 4x2/4x1 (ranks 0,4) 64 B bf16"
	if err == nil || err.Error() != want {
		t.Errorf("got  %v\nwant %s", err, want)
	}
	// A template no rank runs is not matched against anything.
	b := nodeBundle(64, 64)
	b.Templates = append(b.Templates, ir.Program{Streams: [ir.NumStreams][]ir.Instr{ir.Compute: {wait(0)}}, Events: 1})
	if err := Match(b); err != nil {
		t.Errorf("unused template: %v", err)
	}
}

// FuzzDecode feeds Decode arbitrary bytes, as they are and resealed with
// a valid header and checksum (without which nearly every mutation would
// stop at the checksum). Decode must not panic, whatever it accepts must
// re-encode to the same bytes, and Match and Disasm must handle it.
// Crashers found by `go test -fuzz` are kept in testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, b := range sampleBundles() {
		data := Encode(b)
		f.Add(data)
		for _, n := range []int{0, 8, headerSize, headerSize + 5, len(data) / 2, len(data) - 1} {
			f.Add(data[:n])
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Not a benchmark: a hang detector, with room for a slow machine.
		start := time.Now()
		defer func() {
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		}()
		for _, in := range [][]byte{data, reseal(payloadOf(data))} {
			b, err := Decode(in)
			if err != nil {
				if !errors.Is(err, ErrNotPlan) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error wraps no sentinel: %v", err)
				}
				continue
			}
			if again := Encode(b); !bytes.Equal(again, in) {
				t.Fatalf("re-encoding differs:\n%x\n%x", in, again)
			}
			Match(b)
			if err := Disasm(io.Discard, b, b.Topo.Ranks()-1); err != nil {
				t.Fatalf("Disasm of a decoded bundle: %v", err)
			}
		}
	})
}

// BenchmarkMatch is 16384 ranks (2048 nodes x 8 GPUs) running two
// templates, alternating by node, that agree on every group.
func BenchmarkMatch(b *testing.B) {
	topo := ir.Topology{GPUsPerNode: 8, Nodes: 2048}
	var streams [ir.NumStreams][]ir.Instr
	for i := range 200 {
		streams[ir.CommGather] = append(streams[ir.CommGather], coll(ir.AllGather, 0, 0, grp(8, 1, 1, 1), int64(i)))
		streams[ir.CommReduce] = append(streams[ir.CommReduce], coll(ir.ReduceScatter, 0, 0, grp(8, 2048, 1, 1), int64(i)))
	}
	p0 := ir.Program{Buffers: []ir.Buffer{{Name: "a", DType: ir.BF16, Elems: 1 << 20, Parent: -1}}, Streams: streams}
	// p1 differs on the node-local groups, which makes Match visit
	// every rank.
	p1 := p0
	p1.Streams[ir.CommGather] = slices.Clone(p1.Streams[ir.CommGather])
	for i := range p1.Streams[ir.CommGather] {
		p1.Streams[ir.CommGather][i].Bytes++
	}
	bundle := &Bundle{Topo: topo, Templates: []ir.Program{p0, p1}, RankTemplate: make([]int32, topo.Ranks())}
	for r := range bundle.RankTemplate {
		bundle.RankTemplate[r] = int32(r / 8 % 2)
	}
	for b.Loop() {
		if err := Match(bundle); err != nil {
			b.Fatal(err)
		}
	}
}

// TestValidateRefusesSequence: a bundle holds scheduled programs only; a
// program still in sequence form is a compiler bug, refused before
// encoding.
func TestValidateRefusesSequence(t *testing.T) {
	b := &Bundle{Model: "m", Topo: ir.Topology{GPUsPerNode: 1, Nodes: 1}, Micro: 1,
		Templates: []ir.Program{{Buffers: []ir.Buffer{{Name: "x", DType: ir.F32, Elems: 1, Parent: -1}},
			Seq: []ir.SeqOp{{Instr: ir.Instr{Op: ir.Alloc, Buf: 0}}}}}}
	if err := Validate(b); err == nil || !strings.Contains(err.Error(), "not scheduled") {
		t.Errorf("Validate = %v, want a refusal of the unscheduled sequence", err)
	}
}
