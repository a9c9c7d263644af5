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
	check := func(where string, in *Instr) error {
		ids := append(append([]int32{}, in.Reads()...), in.Writes()...)
		for _, id := range ids {
			if id < 0 || id >= nb {
				return fmt.Errorf("%s: buffer b%d does not exist", where, id)
			}
		}
		switch in.Op {
		case Kernel:
			if in.Kern.Info() == nil {
				return fmt.Errorf("%s: unknown kernel %v", where, in.Kern)
			}
		case Collective:
			if !in.Group.valid() {
				return fmt.Errorf("%s: group %v is not a group", where, in.Group)
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
				return fmt.Errorf("%s: %v of %s (%d %v) into %s (%d %v) over %v (%d ranks), %d bytes: sizes disagree",
					where, in.Coll, a.Name, a.Elems, a.DType, b.Name, b.Elems, b.DType, in.Group, n, in.Bytes)
			}
		}
		return nil
	}
	if len(p.Seq) > 0 {
		persistent := p.Persistent()
		wrote := map[int32]bool{}
		for i := range p.Seq {
			op := &p.Seq[i]
			where := fmt.Sprintf("sequence %d (%s)", i, FormatInstr(&op.Instr, Group.String))
			if op.Stream < 0 || op.Stream >= NumStreams {
				return fmt.Errorf("%s: stream %d", where, op.Stream)
			}
			if err := check(where, &op.Instr); err != nil {
				return err
			}
			if !written {
				continue
			}
			for _, r := range op.Reads() {
				if root := p.Root(r); !persistent[root] && !wrote[root] {
					return fmt.Errorf("%s reads %s before anything writes it", where, p.Buffers[r].Name)
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
			where := fmt.Sprintf("%s %d (%s)", StreamName(s), i, FormatInstr(in, Group.String))
			if err := check(where, in); err != nil {
				return err
			}
			if (in.Op == Record && recorded[in.Event] != 1) || (in.Op == Wait && recorded[in.Event] == 0) {
				return fmt.Errorf("%s: event e%d recorded %d times", where, in.Event, recorded[in.Event])
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
