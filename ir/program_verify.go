package ir

import (
	"fmt"
	"math"
	"strings"
	"sync"
)

// Checks selects what VerifyProgram proves beyond a program's form.
type Checks uint8

const (
	// Scheduled: the program is in stream form, no sequence left (what a
	// plan bundle holds).
	Scheduled Checks = 1 << iota
	// Runnable: in stream form, every waited event is recorded exactly
	// once, and the streams, each in order and a wait blocking until its
	// record has run, all finish.
	Runnable
	// Consistent: a view has its parent's dtype, and a collective's
	// buffers, bytes and group agree.
	Consistent
	// Written: in sequence form, every transient buffer (not the
	// persistent state) is written before it is read.
	Written
)

// VerifyProgram checks a step program: its form always, so that every
// index in it can be followed without a bounds check, and what checks
// selects. The form is: every buffer id, event id, opcode, kernel,
// collective, dtype and group in range; groups that tile topology t (the
// zero Topology checks only that a group's factors nest); a view a part
// of an earlier buffer that fits in it; shapes that hold their buffer's
// elements; layout slots that fit their padded length; loads that fill a
// listed input; kernels with their op's arity and attributes. Codegen
// verifies the form of what it decodes and encodes (codegen.Validate),
// collective matching makes sure templates are Runnable, and the passes
// check all of it after every pass (-d=check).
//
// An error in an instruction's event order is an *EventError.
func VerifyProgram(p *Program, t Topology, checks Checks) error {
	if checks&Scheduled != 0 && len(p.Seq) > 0 {
		return fmt.Errorf("program not scheduled: %d instructions still in sequence form", len(p.Seq))
	}
	if err := verifyTables(p, t, checks); err != nil {
		return err
	}
	if len(p.Seq) > 0 {
		return verifySeq(p, t, checks)
	}
	nbuf := int32(len(p.Buffers))
	ninstr := 0
	for s := range p.Streams {
		ninstr += len(p.Streams[s])
	}
	// Every event is recorded once, so there are no more events than
	// instructions; the bound keeps per-event tables small.
	if p.Events < 0 || p.Events > ninstr {
		return fmt.Errorf("%d events for %d instructions", p.Events, ninstr)
	}
	isInput := inputs(p)
	bufOK := func(id int32) bool { return id >= 0 && id < nbuf }
	// The instructions in chunks, and the event order, are checked at
	// once: the error is the first instruction's in stream order, else
	// the events'. The event check follows only ids the form check
	// proves in range, so it waits for those. (ir imports nothing of
	// ours, internal/par included: its own goroutines.)
	type chunk struct{ s, lo, hi int }
	var chunks []chunk
	const chunkLen = 16 << 10
	for s := range p.Streams {
		for lo := 0; lo < len(p.Streams[s]); lo += chunkLen {
			chunks = append(chunks, chunk{s, lo, min(lo+chunkLen, len(p.Streams[s]))})
		}
	}
	errs := make([]error, len(chunks))
	var wg sync.WaitGroup
	for k, c := range chunks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c.lo; i < c.hi; i++ {
				in := &p.Streams[c.s][i]
				if err := verifyInstr(t, in, bufOK, isInput, p.Events, len(p.Layouts)); err != nil {
					errs[k] = fmt.Errorf("%s %d: %v", StreamName(c.s), i, err)
					return
				}
				if checks&Consistent == 0 {
					continue
				}
				if err := verifySizes(p, in); err != nil {
					errs[k] = fmt.Errorf("%s %d (%s): %v", StreamName(c.s), i, FormatInstr(in, Group.String), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	if checks&Runnable != 0 {
		return verifyEvents(p)
	}
	return nil
}

// verifyTables checks the buffers, layouts and inputs.
func verifyTables(p *Program, t Topology, checks Checks) error {
	nbuf := int32(len(p.Buffers))
	if len(p.Buffers) > math.MaxInt32 {
		return fmt.Errorf("%d buffers", len(p.Buffers))
	}
	for i, buf := range p.Buffers {
		switch {
		case buf.DType.Size() == 0:
			return fmt.Errorf("buffer b%d %q: unknown dtype %v", i, buf.Name, buf.DType)
		case buf.Elems < 0:
			return fmt.Errorf("buffer b%d %q: %d elements", i, buf.Name, buf.Elems)
		case buf.Elems > math.MaxInt64/8:
			return fmt.Errorf("buffer b%d %q: %d elements overflow a byte count", i, buf.Name, buf.Elems)
		case buf.Parent < -1 || buf.Parent >= int32(i):
			return fmt.Errorf("buffer b%d %q: parent b%d is not an earlier buffer", i, buf.Name, buf.Parent)
		}
		if len(buf.Shape) > 0 {
			if n, ok := Shape(buf.Shape).CheckedNumElements(); !ok || n != buf.Elems {
				return fmt.Errorf("buffer b%d %q: shape %v does not hold %d elements", i, buf.Name, Shape(buf.Shape), buf.Elems)
			}
		}
		if !buf.IsView() {
			continue
		}
		if err := verifyGroup(t, buf.Part); err != nil {
			return fmt.Errorf("view b%d %q: part %v", i, buf.Name, err)
		}
		// The last part ends at Offset + Size x Elems.
		parent := p.Buffers[buf.Parent]
		if buf.Offset < 0 || buf.Offset > parent.Elems || buf.Elems > (parent.Elems-buf.Offset)/int64(buf.Part.Size()) {
			return fmt.Errorf("view b%d %q: %d parts of %d elements at offset %d do not fit in b%d %q of %d",
				i, buf.Name, buf.Part.Size(), buf.Elems, buf.Offset, buf.Parent, parent.Name, parent.Elems)
		}
		if checks&Consistent != 0 && parent.DType != buf.DType {
			return fmt.Errorf("view b%d %q is %v, its parent %q %v", i, buf.Name, buf.DType, parent.Name, parent.DType)
		}
	}
	for _, l := range p.Layouts {
		if l.Padded < 0 {
			return fmt.Errorf("layout %q: padded length %d", l.Stage, l.Padded)
		}
		for _, sl := range l.Params {
			if sl.Offset < 0 || sl.Elems < 0 || sl.Offset > l.Padded-sl.Elems {
				return fmt.Errorf("layout %q: param %q at %d of %d elements does not fit in %d", l.Stage, sl.Name, sl.Offset, sl.Elems, l.Padded)
			}
			if sl.Init.Kind > InitCopy {
				return fmt.Errorf("layout %q: param %q: unknown init kind %d", l.Stage, sl.Name, sl.Init.Kind)
			}
		}
		// A zero group means no shard.
		for _, g := range [...]Group{l.PShard, l.OSShard} {
			if g != (Group{}) {
				if err := verifyGroup(t, g); err != nil {
					return fmt.Errorf("layout %q: shard %v", l.Stage, err)
				}
			}
		}
		for _, id := range [...]int32{l.P, l.Master, l.M, l.V} {
			if id < -1 || id >= nbuf {
				return fmt.Errorf("layout %q: buffer b%d out of range", l.Stage, id)
			}
		}
	}
	isInput := make([]bool, len(p.Buffers))
	for _, in := range p.Inputs {
		switch {
		case in.Buf < 0 || in.Buf >= nbuf:
			return fmt.Errorf("input b%d out of range", in.Buf)
		case isInput[in.Buf]:
			return fmt.Errorf("input b%d listed twice", in.Buf)
		case in.Shift != 0 && in.Shift != 1:
			return fmt.Errorf("input b%d: shift %d is neither 0 nor 1", in.Buf, in.Shift)
		}
		isInput[in.Buf] = true
	}
	return nil
}

// inputs marks the buffers a load may fill (verifyTables has checked
// the list).
func inputs(p *Program) []bool {
	out := make([]bool, len(p.Buffers))
	for _, in := range p.Inputs {
		out[in.Buf] = true
	}
	return out
}

// verifySeq checks a program in sequence form: each instruction's form,
// stream and sizes, and with Written, that a transient buffer is written
// before it is read.
func verifySeq(p *Program, t Topology, checks Checks) error {
	nbuf := int32(len(p.Buffers))
	bufOK := func(id int32) bool { return id >= 0 && id < nbuf }
	isInput := inputs(p)
	// where formats the instruction only for a failure: a program has
	// tens of thousands of them.
	where := func(i int) string {
		return fmt.Sprintf("sequence %d (%s)", i, FormatInstr(&p.Seq[i].Instr, Group.String))
	}
	persistent := p.Persistent()
	wrote := make([]bool, nbuf) // by root
	for i := range p.Seq {
		op := &p.Seq[i]
		if op.Stream < 0 || op.Stream >= NumStreams {
			return fmt.Errorf("%s: stream %d", where(i), op.Stream)
		}
		if err := verifyInstr(t, &op.Instr, bufOK, isInput, p.Events, len(p.Layouts)); err != nil {
			return fmt.Errorf("%s: %v", where(i), err)
		}
		if checks&Consistent != 0 {
			if err := verifySizes(p, &op.Instr); err != nil {
				return fmt.Errorf("%s: %v", where(i), err)
			}
		}
		if checks&Written == 0 {
			continue
		}
		for _, r := range op.Reads() {
			if root := p.Root(r); !persistent[root] && !wrote[root] {
				return fmt.Errorf("%s reads %s before anything writes it", where(i), p.Buffers[r].Name)
			}
		}
		for _, w := range op.Writes() {
			if op.Op != Free {
				wrote[p.Root(w)] = true
			}
		}
	}
	return nil
}

func verifyInstr(t Topology, in *Instr, bufOK func(int32) bool, isInput []bool, events, layouts int) error {
	// Fields an opcode does not use must still hold known values, so that
	// printing them can never surprise.
	switch {
	case in.Op >= NumOpCodes:
		return fmt.Errorf("unknown opcode %d", in.Op)
	case in.Kern != InvalidOp && !knownKernels()[in.Kern]:
		return fmt.Errorf("unknown kernel %d", in.Kern)
	case in.Coll >= NumColls:
		return fmt.Errorf("unknown collective %d", in.Coll)
	case in.DType != InvalidDType && in.DType.Size() == 0:
		return fmt.Errorf("unknown dtype %d", in.DType)
	}
	for _, a := range in.Attrs {
		if a.Val.Type > AttrBool {
			return fmt.Errorf("attribute %q: unknown type %d", a.Name, a.Val.Type)
		}
	}
	switch in.Op {
	case Alloc, Free:
		if !bufOK(in.Buf) {
			return fmt.Errorf("%v: buffer b%d out of range", in.Op, in.Buf)
		}
	case Load:
		if !bufOK(in.Buf) || !isInput[in.Buf] {
			return fmt.Errorf("load: b%d is not an input", in.Buf)
		}
	case Kernel:
		return verifyKernel(in, bufOK, layouts)
	case Collective:
		switch {
		case !bufOK(in.In) || !bufOK(in.Out):
			return fmt.Errorf("%v: buffer b%d -> b%d out of range", in.Coll, in.In, in.Out)
		case in.Bytes < 0:
			return fmt.Errorf("%v: %d bytes", in.Coll, in.Bytes)
		case in.DType.Size() == 0:
			return fmt.Errorf("%v: no dtype", in.Coll)
		}
		if err := verifyGroup(t, in.Group); err != nil {
			return fmt.Errorf("%v: %v", in.Coll, err)
		}
	case Record, Wait:
		if in.Event < 0 || int(in.Event) >= events {
			return fmt.Errorf("%v: event e%d out of range (%d events)", in.Op, in.Event, events)
		}
	}
	return nil
}

func verifyKernel(in *Instr, bufOK func(int32) bool, layouts int) error {
	if !knownKernels()[in.Kern] {
		return fmt.Errorf("kernel without an op")
	}
	info := in.Kern.Info()
	if len(in.Args) != info.Arity || len(in.Outs) != info.NumResults() {
		return fmt.Errorf("kernel %v: %d arguments and %d results, want %d and %d", in.Kern, len(in.Args), len(in.Outs), info.Arity, info.NumResults())
	}
	for _, a := range in.Args {
		if !bufOK(a) {
			return fmt.Errorf("kernel %v: argument b%d out of range", in.Kern, a)
		}
	}
	for _, o := range in.Outs {
		if !bufOK(o) {
			return fmt.Errorf("kernel %v: result b%d out of range", in.Kern, o)
		}
	}
	// Attributes as the op table declares them, so a kernel never reads
	// a missing one as zero.
	if err := CheckAttrs(in.Kern, in.Attrs); err != nil {
		return fmt.Errorf("kernel %v: %v", in.Kern, err)
	}
	// The optimizer runs on a stage's flat shard, whose layout says
	// which elements are decayed.
	if in.Kern.Info().Decays && (in.Stage < 0 || int(in.Stage) >= layouts) {
		return fmt.Errorf("kernel %v: stage %d has no layout (%d layouts)", in.Kern, in.Stage, layouts)
	}
	return nil
}

// verifySizes checks that a collective's buffers, bytes and group agree
// (its form is checked).
func verifySizes(p *Program, in *Instr) error {
	if in.Op != Collective {
		return nil
	}
	a, b, n := p.Buffers[in.In], p.Buffers[in.Out], int64(in.Group.Size())
	ok := a.DType == b.DType
	switch in.Coll {
	case AllGather:
		ok = ok && b.Elems == a.Elems*n && in.Bytes == b.Bytes()
	case ReduceScatter:
		ok = ok && a.Elems == b.Elems*n && in.Bytes == a.Bytes()
	default:
		ok = ok && a.Elems == b.Elems && in.Bytes == a.Bytes()
	}
	if !ok {
		return fmt.Errorf("%v of %s (%d %v) into %s (%d %v) over %v (%d ranks), %d bytes: sizes disagree",
			in.Coll, a.Name, a.Elems, a.DType, b.Name, b.Elems, b.DType, in.Group, n, in.Bytes)
	}
	return nil
}

// verifyGroup checks that g's blocks tile the topology and its Inner
// blocks tile Outer, the conditions under which Group.Ranks and
// Group.Index agree and every rank is in exactly one group.
func verifyGroup(t Topology, g Group) error {
	o, in := g.Outer, g.Inner
	switch {
	case o.S0 < 1 || o.S1 < 1 || in.S0 < 1 || in.S1 < 1:
		return fmt.Errorf("group %v/%v has an empty factor", o, in)
	case t.GPUsPerNode%o.S0 != 0 || t.Nodes%o.S1 != 0:
		return fmt.Errorf("group %v does not tile %d nodes x %d GPUs", o, t.Nodes, t.GPUsPerNode)
	case o.S0%in.S0 != 0 || o.S1%in.S1 != 0:
		return fmt.Errorf("group %v/%v: inner factor does not tile the outer", o, in)
	}
	return nil
}

// knownKernels()[k] says whether k is a kernel of the op table (built
// on first use: the table's name index is built in an init function,
// after this package's variables).
var knownKernels = sync.OnceValue(func() *[256]bool {
	var known [256]bool
	for k := range known {
		if kind := OpKind(k); kind != InvalidOp {
			if l, ok := LookupOp(kind.String()); ok && l == kind {
				known[k] = true
			}
		}
	}
	return &known
})

// An EventError is a scheduled program whose events do not let it run:
// an event recorded twice or never, or streams that wait for each other.
// Stream and Index place the instruction, Instr is its text.
type EventError struct {
	Stream, Index int
	Instr         string
	Msg           string
}

func (e *EventError) Error() string {
	return fmt.Sprintf("%s %d: %s: %s", StreamName(e.Stream), e.Index, e.Instr, e.Msg)
}

// verifyEvents runs a scheduled program's streams (its form checked):
// every waited event is recorded once, and the streams, each in order
// and a wait blocking until its record has run, all finish.
func verifyEvents(p *Program) error {
	type pc struct{ s, i int }
	name := func(at pc) string { return fmt.Sprintf("%s %d", StreamName(at.s), at.i) }
	fail := func(at pc, format string, args ...any) error {
		return &EventError{Stream: at.s, Index: at.i, Instr: FormatInstr(&p.Streams[at.s][at.i], Group.String), Msg: fmt.Sprintf(format, args...)}
	}
	recordAt := make([]pc, p.Events)
	for e := range recordAt {
		recordAt[e].s = -1
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			if in.Op != Record {
				continue
			}
			if prev := recordAt[in.Event]; prev.s >= 0 {
				return fail(pc{s, i}, "event e%d is recorded twice, first at %s", in.Event, name(prev))
			}
			recordAt[in.Event] = pc{s, i}
		}
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			if in.Op == Wait && recordAt[in.Event].s < 0 {
				return fail(pc{s, i}, "event e%d is never recorded on this rank", in.Event)
			}
		}
	}
	// Run the streams: each round advances every stream as far as it
	// can, so a round that moves nothing means the rest is blocked.
	// Every round but the last moves an instruction: O(instructions) in
	// all.
	var at [NumStreams]int
	done := make([]bool, p.Events)
	for moved := true; moved; {
		moved = false
		for s := range p.Streams {
			for ; at[s] < len(p.Streams[s]); at[s]++ {
				in := &p.Streams[s][at[s]]
				if in.Op == Wait && !done[in.Event] {
					break
				}
				if in.Op == Record {
					done[in.Event] = true
				}
				moved = true
			}
		}
	}
	var blocked []string
	first := pc{-1, -1}
	for s := range p.Streams {
		if at[s] == len(p.Streams[s]) {
			continue
		}
		if first.s < 0 {
			first = pc{s, at[s]}
		}
		e := p.Streams[s][at[s]].Event
		blocked = append(blocked, fmt.Sprintf("%s (wait e%d) waits for %s (record e%d)", name(pc{s, at[s]}), e, name(recordAt[e]), e))
	}
	if first.s >= 0 {
		return fail(first, "deadlock: %s", strings.Join(blocked, ", "))
	}
	return nil
}
