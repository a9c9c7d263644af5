package engine_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"

	"amspc/cost"
	"amspc/engine"
	"amspc/ir"
)

// opaqueBackend is a device the runtime cannot look into: memory is an
// address (region << 40 | byte offset) into byte arrays, bf16 takes two
// bytes an element, and every kernel copies its operands out, runs the
// CPU backend's kernel on the copies and copies the results back, as a
// GPU backend's host staging would. It checks that the runtime reaches
// memory only through the Backend interface and that two-byte bf16
// storage holds what the CPU backend's rounded float32 holds.
type opaqueBackend struct {
	cpu engine.Backend

	mu      sync.Mutex
	regions map[uint64][]byte
	next    uint64
	live    int
}

func newOpaque() *opaqueBackend {
	return &opaqueBackend{cpu: engine.NewCPUBackend(), regions: map[uint64][]byte{}, next: 1}
}

func elemBytes(dt ir.DType) int64 {
	if dt == ir.BF16 {
		return 2
	}
	return 4
}

func (o *opaqueBackend) Name() string { return "opaque test device" }

func (o *opaqueBackend) Alloc(dt ir.DType, n int64) (engine.Mem, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := o.next
	o.next++
	o.regions[id] = make([]byte, n*elemBytes(dt))
	o.live++
	return engine.DeviceMem(dt, n, id<<40, elemBytes(dt)), nil
}

func (o *opaqueBackend) Free(m engine.Mem) {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := m.Addr >> 40
	if _, ok := o.regions[id]; !ok || m.Addr&(1<<40-1) != 0 {
		panic(fmt.Sprintf("free of %#x, which Alloc did not return", m.Addr))
	}
	delete(o.regions, id)
	o.live--
}

// bytes is m's storage.
func (o *opaqueBackend) bytes(m engine.Mem) []byte {
	if m.IsHost() && m.N > 0 {
		panic("host memory given to the opaque device")
	}
	o.mu.Lock()
	r, ok := o.regions[m.Addr>>40]
	o.mu.Unlock()
	if !ok {
		panic(fmt.Sprintf("address %#x is not allocated", m.Addr))
	}
	off := int64(m.Addr & (1<<40 - 1))
	return r[off : off+m.N*m.Elem]
}

func (o *opaqueBackend) Read(dst []float32, m engine.Mem) error {
	b := o.bytes(m)
	for i := range dst {
		if m.DType == ir.BF16 {
			dst[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		} else {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return nil
}

// Write stores src in m; a bf16 value is rounded to nearest even (the
// CPU backend's rounding) and keeps its top two bytes.
func (o *opaqueBackend) Write(m engine.Mem, src []float32) error {
	b := o.bytes(m)
	if m.DType == ir.BF16 {
		r := engine.HostMem(ir.BF16, append([]float32(nil), src...), nil)
		if err := o.cpu.Write(r, src); err != nil {
			return err
		}
		src = r.Host()
	}
	for i, v := range src {
		if m.DType == ir.BF16 {
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
		} else {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	return nil
}

func (o *opaqueBackend) ReadInts(dst []int32, m engine.Mem) error {
	b := o.bytes(m)
	for i := range dst {
		dst[i] = int32(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return nil
}

func (o *opaqueBackend) WriteInts(m engine.Mem, src []int32) error {
	b := o.bytes(m)
	for i, v := range src {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return nil
}

// host is a host copy of m.
func (o *opaqueBackend) host(m engine.Mem) engine.Mem {
	if m.DType == ir.I32 {
		h := make([]int32, m.N)
		o.ReadInts(h, m)
		return engine.HostMem(ir.I32, nil, h)
	}
	h := make([]float32, m.N)
	o.Read(h, m)
	return engine.HostMem(m.DType, h, nil)
}

func (o *opaqueBackend) Launch(s int, c *engine.KernelCall) error {
	h := *c
	h.Args = make([]engine.Mem, len(c.Args))
	h.Outs = make([]engine.Mem, len(c.Outs))
	for i, m := range c.Args {
		h.Args[i] = o.host(m)
	}
	for i, m := range c.Outs {
		h.Outs[i] = o.host(m)
	}
	if err := o.cpu.Launch(s, &h); err != nil {
		return err
	}
	for i, m := range c.Outs {
		if m.DType == ir.I32 {
			o.WriteInts(m, h.Outs[i].HostInts())
		} else {
			o.Write(m, h.Outs[i].Host())
		}
	}
	return nil
}

func (o *opaqueBackend) Copy(_ int, dst, src engine.Mem) error {
	if dst.DType != src.DType || dst.N != src.N {
		return fmt.Errorf("copy of %d %v into %d %v", src.N, src.DType, dst.N, dst.DType)
	}
	copy(o.bytes(dst), o.bytes(src))
	return nil
}

func (o *opaqueBackend) Record(int, int) error { return nil }
func (o *opaqueBackend) Wait(int, int) error   { return nil }
func (o *opaqueBackend) Sync() error           { return nil }

// TestBackendOpaque: tiny trains bit for bit alike on the CPU backend and
// on a backend whose memory the runtime cannot read (collectives staged
// through the host), in fp32 and in bf16 (two-byte storage there), on
// one rank, a ZeRO-3 plan gathering in two levels and a mixed plan; a
// checkpoint saved from the opaque device resumes on the CPU exactly.
func TestBackendOpaque(t *testing.T) {
	F := func(a, b int) ir.Factor { return ir.Factor{S0: a, S1: b} }
	bf16 := `train { seq_len = 64 micro_batch = 2 global_batch = 32 precision = bf16
  optimizer = adamw(lr=1e-3, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1) }`
	const n = 3
	for _, c := range []struct {
		nodes, gpus int
		f           cost.Factors
		extra       []string
	}{
		{1, 1, cost.Factors{P: F(1, 1), G: F(1, 1), OS: F(1, 1)}, nil},
		{2, 4, cost.Factors{P: F(4, 2), G: F(4, 2), OS: F(4, 2)}, nil},
		{2, 4, cost.Factors{P: F(2, 1), G: F(4, 1), OS: F(4, 2)}, nil},
		{2, 4, cost.Factors{P: F(2, 1), G: F(2, 1), OS: F(4, 2)}, []string{bf16}},
	} {
		name := fmt.Sprintf("%dx%d %v", c.nodes, c.gpus, c.f)
		if c.extra != nil {
			name += " bf16"
		}
		t.Run(name, func(t *testing.T) {
			want := train(t, compile(t, c.nodes, c.gpus, c.f, c.extra...), n+1)
			b := compile(t, c.nodes, c.gpus, c.f, c.extra...)
			var devs []*opaqueBackend
			var mu sync.Mutex
			r := start(t, b, func(int) (engine.Backend, error) {
				mu.Lock()
				defer mu.Unlock()
				o := newOpaque()
				devs = append(devs, o)
				return o, nil
			})
			for i, l := range steps(t, r, n) {
				if l != want[i] {
					t.Errorf("step %d: opaque device loss %.17g, CPU %.17g", i+1, l, want[i])
				}
			}
			dir := t.TempDir()
			if err := r.Save(dir); err != nil {
				t.Fatal(err)
			}
			if l := resumed(t, b, dir, 1)[0]; l != want[n] {
				t.Errorf("resumed on the CPU from the opaque device's checkpoint: loss %.17g, want %.17g", l, want[n])
			}
			// Only the persistent shards stay allocated between steps.
			persistent := 0
			for _, buf := range b.Template(0).Buffers {
				if !buf.IsView() && !transient(b.Template(0), buf.Name) {
					persistent++
				}
			}
			if got := devs[0].live; got != persistent {
				t.Errorf("rank 0 holds %d allocations after the steps, want its %d persistent buffers", got, persistent)
			}
		})
	}
}

// transient says whether some instruction of p allocates buffer name.
func transient(p *ir.Program, name string) bool {
	for _, ins := range p.Streams {
		for _, in := range ins {
			if in.Op == ir.Alloc && p.Buffers[in.Buf].Name == name {
				return true
			}
		}
	}
	return false
}
