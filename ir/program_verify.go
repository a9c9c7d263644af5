package ir

import "fmt"

// VerifyProgram checks a step program's invariants: buffers and views
// that fit their parents, instructions naming existing buffers, kernels
// and collectives whose sizes agree, events recorded once and waited for
// only when recorded. With written, a sequence must also write every
// transient buffer (not the persistent state) before reading it.
func VerifyProgram(p *Program, written bool) error {
	nb := int32(len(p.Buffers))
	for i, b := range p.Buffers {
		if b.Elems < 0 {
			return fmt.Errorf("buffer b%d %s: %d elements", i, b.Name, b.Elems)
		}
		if !b.IsView() {
			continue
		}
		if b.Parent >= int32(i) {
			return fmt.Errorf("view b%d %s: parent b%d not declared before it", i, b.Name, b.Parent)
		}
		if !b.Part.valid() {
			return fmt.Errorf("view b%d %s: part group %v is not a group", i, b.Name, b.Part)
		}
		par := p.Buffers[b.Parent]
		if par.DType != b.DType {
			return fmt.Errorf("view b%d %s is %v, its parent %s %v", i, b.Name, b.DType, par.Name, par.DType)
		}
		if parts := int64(max(b.Part.Size(), 1)); b.Offset < 0 || b.Offset+parts*b.Elems > par.Elems {
			return fmt.Errorf("view b%d %s: %d parts of %d at %d overrun its parent %s of %d", i, b.Name, parts, b.Elems, b.Offset, par.Name, par.Elems)
		}
	}
	// check's errors lack the instruction's description, formatted only
	// for a failure: a program has tens of thousands of instructions.
	check := func(in *Instr) error {
		for _, ids := range [2][]int32{in.Reads(), in.Writes()} {
			for _, id := range ids {
				if id < 0 || id >= nb {
					return fmt.Errorf("buffer b%d does not exist", id)
				}
			}
		}
		switch in.Op {
		case Kernel:
			if in.Kern.Info() == nil {
				return fmt.Errorf("unknown kernel %v", in.Kern)
			}
		case Collective:
			if !in.Group.valid() {
				return fmt.Errorf("group %v is not a group", in.Group)
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
			if !ok || n < 1 {
				return fmt.Errorf("%v of %s (%d %v) into %s (%d %v) over %v (%d ranks), %d bytes: sizes disagree",
					in.Coll, a.Name, a.Elems, a.DType, b.Name, b.Elems, b.DType, in.Group, n, in.Bytes)
			}
		}
		return nil
	}
	if len(p.Seq) > 0 {
		where := func(i int) string {
			return fmt.Sprintf("sequence %d (%s)", i, FormatInstr(&p.Seq[i].Instr, Group.String))
		}
		persistent := p.Persistent()
		wrote := make([]bool, nb) // by root
		for i := range p.Seq {
			op := &p.Seq[i]
			if op.Stream < 0 || op.Stream >= NumStreams {
				return fmt.Errorf("%s: stream %d", where(i), op.Stream)
			}
			if err := check(&op.Instr); err != nil {
				return fmt.Errorf("%s: %v", where(i), err)
			}
			if !written {
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
	recorded := make([]int, p.Events)
	for s := range p.Streams {
		for i := range p.Streams[s] {
			in := &p.Streams[s][i]
			if in.Op == Record || in.Op == Wait {
				if in.Event < 0 || int(in.Event) >= p.Events {
					return fmt.Errorf("%s %d: event e%d of %d", StreamName(s), i, in.Event, p.Events)
				}
				if in.Op == Record {
					recorded[in.Event]++
				}
			}
		}
	}
	for s := range p.Streams {
		for i := range p.Streams[s] {
			in := &p.Streams[s][i]
			err := check(in)
			if err == nil && ((in.Op == Record && recorded[in.Event] != 1) || (in.Op == Wait && recorded[in.Event] == 0)) {
				err = fmt.Errorf("event e%d recorded %d times", in.Event, recorded[in.Event])
			}
			if err != nil {
				return fmt.Errorf("%s %d (%s): %v", StreamName(s), i, FormatInstr(in, Group.String), err)
			}
		}
	}
	return nil
}

// valid reports whether g's factors are positive and Inner nests in
// Outer.
func (g Group) valid() bool {
	o, i := g.Outer, g.Inner
	return o.S0 > 0 && o.S1 > 0 && i.S0 > 0 && i.S1 > 0 && o.S0%i.S0 == 0 && o.S1%i.S1 == 0
}
