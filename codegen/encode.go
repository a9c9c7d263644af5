package codegen

// The plan bundle on disk:
//
//	"AMSPPLAN"            8 bytes, magic
//	version               uint32 little-endian (FormatVersion)
//	payload length        uint64 little-endian
//	payload               see below
//	SHA-256               32 bytes, of everything before it
//
// The payload lists every Bundle field in declaration order. Integers are
// varints (zig-zag for signed), small enums one byte, floats their IEEE
// bits as a fixed uint64, strings and slices a uvarint count first;
// kernels are stored by name, the other enums by number, so renumbering
// an opcode, collective, dtype or attribute type, or changing NumStreams,
// needs a new FormatVersion (TestEncodeDeterministic pins a hash). An
// encoding is canonical: Decode refuses over-long varints and bools other
// than 0 and 1, so whatever decodes re-encodes to the same bytes and equal
// bundles always hash equally. Empty slices decode as nil.
//
// Decode trusts nothing it reads: counts are checked against the bytes left
// before anything is allocated, and the decoded bundle must pass Validate,
// so the runtime and Disasm can index buffers, events and templates without
// further checks.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"

	"amspc/internal/outfile"
	"amspc/ir"
)

// FormatVersion is the bundle layout this compiler writes and reads. Bump
// it on any change to the payload encoding.
//
// Version 2: a kernel has a list of results (Outs), and a collective's
// Out follows its In.
// Version 3: the machine records the kernels' roofline (HBM bandwidth,
// the GEMM efficiency curve) and whether a rank's streams share cores.
// Version 4: the tensor-parallel degree, and each param slot's whole
// shape and the dimension a rank holds a part of.
// Version 5: the train section's learning-rate schedule.
const FormatVersion = 5

const (
	magic      = "AMSPPLAN"
	headerSize = len(magic) + 4 + 8
	sumSize    = sha256.Size
)

// MaxRanks bounds a bundle's rank count, so that a forged topology cannot
// make Match or the runtime loop for ever.
const MaxRanks = 1 << 20

// Decode's errors wrap one of these; errors.Is tells them apart.
var (
	ErrNotPlan   = errors.New("not a plan bundle")
	ErrVersion   = errors.New("unsupported plan format version")
	ErrTruncated = errors.New("truncated plan bundle")
	ErrCorrupt   = errors.New("corrupt plan bundle")
)

// Encode returns the bundle's canonical bytes. It does not validate; call
// Validate (or Match) first, or use WriteFile, which does.
//
// It counts the payload's bytes first (the header announces them), so
// that the checksum, which starts at the header, can be computed on
// another processor behind the encoding, chunk by chunk: at LLaMA-2-70B's
// 7.8 MB, hashing takes longer than encoding.
func Encode(b *Bundle) []byte {
	count := encoder{counting: true}
	count.bundle(b)
	n := count.n
	e := encoder{buf: make([]byte, headerSize, headerSize+n+sumSize)}
	copy(e.buf, magic)
	binary.LittleEndian.PutUint32(e.buf[len(magic):], FormatVersion)
	binary.LittleEndian.PutUint64(e.buf[len(magic)+4:], uint64(n))
	h := sha256.New()
	if n < 2*hashChunk {
		e.bundle(b)
		h.Write(e.buf)
	} else {
		// Buffered for every chunk, so the encoder never waits.
		e.chunks = make(chan []byte, n/hashChunk+2)
		done := make(chan struct{})
		go func() {
			for c := range e.chunks {
				h.Write(c)
			}
			close(done)
		}()
		e.bundle(b)
		e.chunks <- e.buf[e.sent:]
		close(e.chunks)
		<-done
	}
	if got := len(e.buf) - headerSize; got != n {
		// A counting bug (TestEncodeCountsItsBytes): the bytes are
		// right, the header and the checksum are made again.
		binary.LittleEndian.PutUint64(e.buf[len(magic)+4:], uint64(got))
		h.Reset()
		h.Write(e.buf)
	}
	return h.Sum(e.buf)
}

// hashChunk is how many encoded bytes Encode hands the checksum at a time.
const hashChunk = 256 << 10

// Decode parses and validates a bundle written by Encode.
func Decode(data []byte) (*Bundle, error) {
	if len(data) < headerSize {
		if bytes.HasPrefix([]byte(magic), data[:min(len(data), len(magic))]) {
			return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrTruncated, len(data), headerSize)
		}
		return nil, fmt.Errorf("%w: does not start with %q", ErrNotPlan, magic)
	}
	if string(data[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: does not start with %q", ErrNotPlan, magic)
	}
	if v := binary.LittleEndian.Uint32(data[len(magic):]); v != FormatVersion {
		return nil, fmt.Errorf("%w: the bundle has format version %d, this compiler reads version %d", ErrVersion, v, FormatVersion)
	}
	n := binary.LittleEndian.Uint64(data[len(magic)+4:])
	have := uint64(len(data) - headerSize)
	switch {
	case n > have || have-n < sumSize:
		return nil, fmt.Errorf("%w: %d bytes, the header announces %d-byte payload and checksum", ErrTruncated, len(data), uint64(headerSize)+n+sumSize)
	case have-n > sumSize:
		return nil, fmt.Errorf("%w: %d bytes after the checksum", ErrCorrupt, have-n-sumSize)
	}
	end := headerSize + int(n)
	if sum := sha256.Sum256(data[:end]); !bytes.Equal(sum[:], data[end:]) {
		return nil, fmt.Errorf("%w: checksum mismatch (stored %x, computed %x)", ErrCorrupt, data[end:end+8], sum[:8])
	}
	d := decoder{buf: data[headerSize:end]}
	b := d.bundle()
	if d.err != nil {
		return nil, fmt.Errorf("%w: payload byte %d: %v", ErrCorrupt, d.at, d.err)
	}
	if d.off != len(d.buf) {
		return nil, fmt.Errorf("%w: %d unread payload bytes", ErrCorrupt, len(d.buf)-d.off)
	}
	if err := Validate(b); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return b, nil
}

// WriteFile validates b and writes its encoding to path atomically: a
// reader sees the old file or the whole new one, never a partial plan.
func WriteFile(path string, b *Bundle) (err error) {
	// Validation and encoding run side by side; nothing is written
	// before both are done.
	valid := make(chan error, 1)
	go func() { valid <- Validate(b) }()
	data := Encode(b)
	if err := <-valid; err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	return outfile.WriteBytes(path, nil, data)
}

// ReadFile reads and decodes the bundle at path.
func ReadFile(path string) (*Bundle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	b, err := Decode(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return b, nil
}

// encoder appends the payload to buf or, counting, only adds up its
// length in n. With chunks, every hashChunk bytes or so of buf written
// since sent go to chunks (Encode's checksum).
type encoder struct {
	buf      []byte
	counting bool
	n        int
	chunks   chan []byte
	sent     int
}

func (e *encoder) u(v uint64) {
	if e.counting {
		e.n += uvarintLen(v)
		return
	}
	e.buf = binary.AppendUvarint(e.buf, v)
}

func (e *encoder) i(v int64) {
	// binary.AppendVarint's zig-zag encoding.
	ux := uint64(v) << 1
	if v < 0 {
		ux = ^ux
	}
	e.u(ux)
}

func (e *encoder) byte(v uint8) {
	if e.counting {
		e.n++
		return
	}
	e.buf = append(e.buf, v)
}

func (e *encoder) str(s string) {
	e.u(uint64(len(s)))
	if e.counting {
		e.n += len(s)
		return
	}
	e.buf = append(e.buf, s...)
}

func (e *encoder) f64(v float64) {
	if e.counting {
		e.n += 8
		return
	}
	e.buf = binary.LittleEndian.AppendUint64(e.buf, math.Float64bits(v))
}

// flush hands the bytes written since the last flush to the checksum
// once there are hashChunk of them.
func (e *encoder) flush() {
	if e.chunks != nil && len(e.buf)-e.sent >= hashChunk {
		e.chunks <- e.buf[e.sent:len(e.buf):len(e.buf)]
		e.sent = len(e.buf)
	}
}
func (e *encoder) bool(v bool) {
	if v {
		e.byte(1)
	} else {
		e.byte(0)
	}
}

func (e *encoder) group(g ir.Group) {
	e.i(int64(g.Outer.S0))
	e.i(int64(g.Outer.S1))
	e.i(int64(g.Inner.S0))
	e.i(int64(g.Inner.S1))
}

func (e *encoder) bundle(b *Bundle) {
	e.str(b.Model)
	e.i(int64(b.Topo.GPUsPerNode))
	e.i(int64(b.Topo.Nodes))
	e.str(b.Plan)
	e.i(int64(b.Micro))
	e.i(int64(b.Tensor))
	m := &b.Machine
	for _, f := range [...]float64{m.PeakFLOPS, m.Efficiency, m.IntraBW, m.InterBW, m.IntraLatency, m.InterLatency, m.MemBW, m.MatMulHalf} {
		e.f64(f)
	}
	e.i(m.MemoryBytes)
	e.bool(m.SharedCores)
	t := &b.Train
	for _, v := range [...]int64{t.SeqLen, t.MicroBatch, t.GlobalBatch, t.Steps, t.Seed} {
		e.i(v)
	}
	e.byte(uint8(t.Schedule.Kind))
	e.i(t.Schedule.Warmup)
	e.i(t.Schedule.Decay)
	e.f64(t.Schedule.MinLR)
	e.u(uint64(len(b.Templates)))
	for i := range b.Templates {
		e.program(&b.Templates[i])
	}
	e.u(uint64(len(b.RankTemplate)))
	for _, t := range b.RankTemplate {
		e.i(int64(t))
	}
}

func (e *encoder) program(p *ir.Program) {
	e.u(uint64(len(p.Buffers)))
	for _, buf := range p.Buffers {
		e.str(buf.Name)
		e.byte(uint8(buf.DType))
		e.i(buf.Elems)
		e.i(int64(buf.Parent))
		e.i(buf.Offset)
		e.group(buf.Part)
		e.u(uint64(len(buf.Shape)))
		for _, d := range buf.Shape {
			e.i(d)
		}
	}
	for s := range p.Streams {
		e.u(uint64(len(p.Streams[s])))
		for i := range p.Streams[s] {
			e.instr(&p.Streams[s][i])
			e.flush()
		}
	}
	e.i(int64(p.Events))
	e.u(uint64(len(p.Layouts)))
	for _, l := range p.Layouts {
		e.str(l.Stage)
		e.i(l.Padded)
		e.u(uint64(len(l.Params)))
		for _, sl := range l.Params {
			e.str(sl.Name)
			e.i(sl.Offset)
			e.i(sl.Elems)
			e.bool(sl.Decay)
			e.byte(uint8(sl.Init.Kind))
			e.f64(sl.Init.Std)
			e.str(sl.Init.Of)
			e.i(int64(sl.Split))
			e.u(uint64(len(sl.Shape)))
			for _, n := range sl.Shape {
				e.i(n)
			}
		}
		e.group(l.PShard)
		e.group(l.OSShard)
		for _, id := range [...]int32{l.P, l.Master, l.M, l.V} {
			e.i(int64(id))
		}
	}
	e.u(uint64(len(p.Inputs)))
	for _, in := range p.Inputs {
		e.i(int64(in.Buf))
		e.i(int64(in.Shift))
	}
}

func (e *encoder) instr(in *ir.Instr) {
	e.byte(uint8(in.Op))
	e.i(int64(in.Buf))
	// A kernel is stored by name: ir numbers its ops in table order,
	// and a new op must not change what an old plan runs.
	if in.Kern == ir.InvalidOp {
		e.str("")
	} else {
		e.str(in.Kern.String())
	}
	for _, ids := range [...][]int32{in.Args, in.Outs} {
		e.u(uint64(len(ids)))
		for _, a := range ids {
			e.i(int64(a))
		}
	}
	e.u(uint64(len(in.Attrs)))
	for _, a := range in.Attrs {
		e.str(a.Name)
		e.byte(uint8(a.Val.Type))
		e.i(a.Val.Int)
		e.f64(a.Val.Float)
		e.bool(a.Val.Bool)
	}
	e.byte(uint8(in.Coll))
	e.group(in.Group)
	e.i(in.Bytes)
	e.byte(uint8(in.DType))
	e.i(int64(in.In))
	e.i(int64(in.Out))
	e.i(int64(in.Event))
	e.f64(in.Flops)
	e.i(int64(in.Stage))
	e.i(int64(in.Micro))
	e.str(in.Pos.File)
	e.i(int64(in.Pos.Line))
	e.i(int64(in.Pos.Col))
	e.str(in.Comment)
}

// decoder reads the payload. The first error sticks: later reads return
// zero values, so the decoding functions need no error plumbing, and
// counts read after an error are 0, so nothing further is allocated.
type decoder struct {
	buf     []byte
	off, at int // at: where the first error was found
	err     error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
		d.at = d.off
	}
}

func (d *decoder) left() int { return len(d.buf) - d.off }

func (d *decoder) u() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.off:])
	switch {
	case n == 0:
		d.fail("payload ends inside a number")
		return 0
	case n < 0 || n != uvarintLen(v):
		d.fail("malformed number")
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) i() int64 {
	// Zig-zag, read as the unsigned varint it is, so canonicality is the
	// unsigned rule.
	ux := d.u()
	x := int64(ux >> 1)
	if ux&1 != 0 {
		x = ^x
	}
	return x
}

// uvarintLen is the length of binary.AppendUvarint's encoding of v.
func uvarintLen(v uint64) int {
	return (bits.Len64(v|1) + 6) / 7
}

func (d *decoder) i32(what string) int32 {
	v := d.i()
	if v < math.MinInt32 || v > math.MaxInt32 {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return int32(v)
}

func (d *decoder) int(what string) int {
	v := d.i()
	if int64(int(v)) != v {
		d.fail("%s %d out of range", what, v)
		return 0
	}
	return int(v)
}

func (d *decoder) byte() uint8 {
	if d.err != nil {
		return 0
	}
	if d.left() < 1 {
		d.fail("payload ends early")
		return 0
	}
	d.off++
	return d.buf[d.off-1]
}

func (d *decoder) bool() bool {
	switch v := d.byte(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		d.fail("bool byte %d is neither 0 nor 1", v)
		return false
	}
}

func (d *decoder) f64() float64 {
	if d.err != nil {
		return 0
	}
	if d.left() < 8 {
		d.fail("payload ends inside a float")
		return 0
	}
	d.off += 8
	return math.Float64frombits(binary.LittleEndian.Uint64(d.buf[d.off-8:]))
}

func (d *decoder) str() string {
	n := d.count("string", 1)
	if n == 0 {
		return ""
	}
	d.off += n
	return string(d.buf[d.off-n : d.off])
}

// count reads a length and checks that n elements of at least minSize
// encoded bytes each fit in what is left, so a forged count cannot make
// Decode allocate more than a small multiple of its input.
func (d *decoder) count(what string, minSize int) int {
	n := d.u()
	if d.err != nil {
		return 0
	}
	if n > uint64(d.left()/minSize) {
		d.fail("%s count %d exceeds the %d bytes left", what, n, d.left())
		return 0
	}
	return int(n)
}

func (d *decoder) group() ir.Group {
	var g ir.Group
	g.Outer.S0 = d.int("group factor")
	g.Outer.S1 = d.int("group factor")
	g.Inner.S0 = d.int("group factor")
	g.Inner.S1 = d.int("group factor")
	return g
}

// Minimum encoded sizes, for count.
const (
	minBuffer  = 1 + 1 + 1 + 1 + 1 + 4 + 1
	minProgram = 1 + ir.NumStreams + 1 + 1 + 1
	minInstr   = 1 + 1 + 1 + 1 + 1 + 1 + 1 + 4 + 1 + 1 + 1 + 1 + 1 + 8 + 1 + 1 + 3 + 1
	minAttr    = 1 + 1 + 1 + 8 + 1
	minLayout  = 1 + 1 + 1 + 4 + 4 + 4
	minSlot    = 1 + 1 + 1 + 1 + 1 + 8 + 1 + 1 + 1
	minInput   = 1 + 1
)

func (d *decoder) bundle() *Bundle {
	b := &Bundle{}
	b.Model = d.str()
	b.Topo.GPUsPerNode = d.int("GPUs per node")
	b.Topo.Nodes = d.int("node count")
	b.Plan = d.str()
	b.Micro = d.int("micro-batch count")
	b.Tensor = d.int("tensor-parallel degree")
	m := &b.Machine
	for _, f := range [...]*float64{&m.PeakFLOPS, &m.Efficiency, &m.IntraBW, &m.InterBW, &m.IntraLatency, &m.InterLatency, &m.MemBW, &m.MatMulHalf} {
		*f = d.f64()
	}
	m.MemoryBytes = d.i()
	m.SharedCores = d.bool()
	t := &b.Train
	for _, v := range [...]*int64{&t.SeqLen, &t.MicroBatch, &t.GlobalBatch, &t.Steps, &t.Seed} {
		*v = d.i()
	}
	sc := &t.Schedule
	sc.Kind = ir.ScheduleKind(d.byte())
	sc.Warmup, sc.Decay, sc.MinLR = d.i(), d.i(), d.f64()
	if sc.Kind > ir.WSDLR || sc.Warmup < 0 || sc.Decay < 0 || !(sc.MinLR >= 0) || math.IsInf(sc.MinLR, 0) {
		d.fail("learning-rate schedule %v is not one the compiler writes", *sc)
	}
	if n := d.count("template", minProgram); n > 0 {
		b.Templates = make([]ir.Program, n)
		for i := range b.Templates {
			d.program(&b.Templates[i])
		}
	}
	if n := d.count("rank", 1); n > 0 {
		b.RankTemplate = make([]int32, n)
		for i := range b.RankTemplate {
			b.RankTemplate[i] = d.i32("template index")
		}
	}
	return b
}

func (d *decoder) program(p *ir.Program) {
	if n := d.count("buffer", minBuffer); n > 0 {
		p.Buffers = make([]ir.Buffer, n)
		for i := range p.Buffers {
			buf := &p.Buffers[i]
			buf.Name = d.str()
			buf.DType = ir.DType(d.byte())
			buf.Elems = d.i()
			buf.Parent = d.i32("parent")
			buf.Offset = d.i()
			buf.Part = d.group()
			if n := d.count("dimension", 1); n > 0 {
				buf.Shape = make([]int64, n)
				for j := range buf.Shape {
					buf.Shape[j] = d.i()
				}
			}
		}
	}
	for s := range p.Streams {
		if n := d.count("instruction", minInstr); n > 0 {
			p.Streams[s] = make([]ir.Instr, n)
			for i := range p.Streams[s] {
				d.instr(&p.Streams[s][i])
			}
		}
	}
	p.Events = d.int("event count")
	if n := d.count("layout", minLayout); n > 0 {
		p.Layouts = make([]ir.Layout, n)
		for i := range p.Layouts {
			l := &p.Layouts[i]
			l.Stage = d.str()
			l.Padded = d.i()
			if n := d.count("slot", minSlot); n > 0 {
				l.Params = make([]ir.Slot, n)
				for j := range l.Params {
					sl := &l.Params[j]
					sl.Name = d.str()
					sl.Offset = d.i()
					sl.Elems = d.i()
					sl.Decay = d.bool()
					sl.Init.Kind = ir.InitKind(d.byte())
					sl.Init.Std = d.f64()
					sl.Init.Of = d.str()
					sl.Split = int(d.i())
					if n := d.count("dimension", 1); n > 0 {
						sl.Shape = make([]int64, n)
						for k := range sl.Shape {
							sl.Shape[k] = d.i()
						}
					}
				}
			}
			l.PShard = d.group()
			l.OSShard = d.group()
			for _, id := range [...]*int32{&l.P, &l.Master, &l.M, &l.V} {
				*id = d.i32("buffer")
			}
		}
	}
	if n := d.count("input", minInput); n > 0 {
		p.Inputs = make([]ir.DataInput, n)
		for i := range p.Inputs {
			p.Inputs[i].Buf = d.i32("buffer")
			p.Inputs[i].Shift = d.i32("shift")
		}
	}
}

func (d *decoder) instr(in *ir.Instr) {
	in.Op = ir.OpCode(d.byte())
	in.Buf = d.i32("buffer")
	if name := d.str(); name != "" {
		k, ok := ir.LookupOp(name)
		if !ok {
			d.fail("unknown kernel %q", name)
		}
		in.Kern = k
	}
	for i, ids := range [...]*[]int32{&in.Args, &in.Outs} {
		if n := d.count([...]string{"argument", "result"}[i], 1); n > 0 {
			*ids = make([]int32, n)
			for i := range *ids {
				(*ids)[i] = d.i32("buffer")
			}
		}
	}
	if n := d.count("attribute", minAttr); n > 0 {
		in.Attrs = make([]ir.Attr, n)
		for i := range in.Attrs {
			a := &in.Attrs[i]
			a.Name = d.str()
			a.Val.Type = ir.AttrType(d.byte())
			a.Val.Int = d.i()
			a.Val.Float = d.f64()
			a.Val.Bool = d.bool()
		}
	}
	in.Coll = ir.Coll(d.byte())
	in.Group = d.group()
	in.Bytes = d.i()
	in.DType = ir.DType(d.byte())
	in.In = d.i32("buffer")
	in.Out = d.i32("buffer")
	in.Event = d.i32("event")
	in.Flops = d.f64()
	in.Stage = d.i32("stage")
	in.Micro = d.i32("micro-batch")
	in.Pos.File = d.str()
	in.Pos.Line = d.int("line")
	in.Pos.Col = d.int("column")
	in.Comment = d.str()
}
