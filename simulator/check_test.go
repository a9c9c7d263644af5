package simulator_test

import (
	"fmt"

	"amspc/ir"
)

// wellFormed checks a program's own bookkeeping: buffers are allocated
// before use and freed once, nothing stays allocated at the end but the
// persistent state, and every waited event is recorded exactly once.
func wellFormed(p *ir.Program) error {
	recorded := map[int32]int{}
	for s := range p.Streams {
		for _, in := range p.Streams[s] {
			if in.Op == ir.Record {
				recorded[in.Event]++
			}
		}
	}
	for s := range p.Streams {
		for i, in := range p.Streams[s] {
			switch in.Op {
			case ir.Record:
				if recorded[in.Event] != 1 {
					return fmt.Errorf("%s %d: event e%d recorded %d times", ir.StreamName(s), i, in.Event, recorded[in.Event])
				}
			case ir.Wait:
				if recorded[in.Event] == 0 {
					return fmt.Errorf("%s %d: wait on e%d, never recorded", ir.StreamName(s), i, in.Event)
				}
			}
		}
	}
	return nil
}
