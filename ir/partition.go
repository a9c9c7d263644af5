package ir

import "fmt"

// StageGroup is a layer group: the unit the planner may shard
// differently.
type StageGroup uint8

const (
	EmbeddingGroup StageGroup = iota // the stage before the blocks
	BlocksGroup                      // the repeated blocks
	HeadGroup                        // the stage after the blocks
	NumStageGroups
)

var stageGroupNames = [...]string{"embedding", "blocks", "head"}

func (g StageGroup) String() string {
	if g < NumStageGroups {
		return stageGroupNames[g]
	}
	return fmt.Sprintf("group(%d)", int(g))
}

// A Stage is the unit the schedule gathers, computes, saves and reduces
// together: the ops before the first block, each block, the ops after the
// last.
type Stage struct {
	Name  string
	Group StageGroup
	Layer int // block index, -1 for the embedding and head stages
	// Fwd and Bwd are the values the stage computes in forward and in
	// backward, in definition order. Bwd is empty in a partition of a
	// forward graph.
	Fwd, Bwd []*Value
	// Params are the params the stage owns (those whose first use is in
	// it), in order of first use.
	Params []*Value
	// LastUser is the index of the last stage that reads one of the
	// stage's params (its own index unless a param is shared with a later
	// stage); Borrowed lists the earlier stages whose params it reads.
	LastUser int
	Borrowed []int
}

// Partition is the split of a step into stages, computed once: the cost
// model reads it on the forward graph, the scheduler on the training
// graph, by the same rule.
type Partition struct {
	Stages []*Stage
	of     map[*Value]int
	// shared are forward values that a stage other than their own reads.
	shared map[*Value]bool
}

// Droppable reports whether v is a block's forward value that no other
// stage's forward reads: what full recompute may free after forward and
// compute again for backward (the recompute pass copies it; the cost
// model charges it).
func (p *Partition) Droppable(v *Value) bool {
	i, ok := p.of[v]
	return ok && v.Def != nil && v.Role != Param && p.Stages[i].Group == BlocksGroup && !p.shared[v]
}

// Of returns the index of the stage that computes v (or owns v, a param).
func (p *Partition) Of(v *Value) (int, bool) {
	i, ok := p.of[v]
	return i, ok
}

// PartitionGraph splits g into stages. Forward values go to the stage of
// their block, or to the embedding and head stages around the blocks; a
// param to the stage of its first use. With origin (the passes' record of
// which forward value or param each backward value was made for), every
// value after the loss goes to the stage of its origin, except the
// optimizer's (optimizer states, values replacing a state, and what is
// computed from them), which the scheduler's flat kernels replace.
func PartitionGraph(g *Graph, origin map[*Value]*Value) (*Partition, error) {
	p := &Partition{of: map[*Value]int{}, shared: map[*Value]bool{}}
	p.Stages = append(p.Stages, &Stage{Name: "embedding", Group: EmbeddingGroup, Layer: -1})
	for i := 0; i < g.Layers; i++ {
		p.Stages = append(p.Stages, &Stage{Name: fmt.Sprintf("layers.%d", i), Group: BlocksGroup, Layer: i})
	}
	head := len(p.Stages)
	p.Stages = append(p.Stages, &Stage{Name: "head", Group: HeadGroup, Layer: -1})
	loss := g.LossValue()
	end := len(g.Values)
	seen := false
	for i, v := range g.Values {
		if v.Layer >= 0 {
			seen = true
		}
		if v.Def == nil {
			continue
		}
		st := 0
		switch {
		case v.Layer >= 0 && v.Layer < g.Layers:
			st = 1 + v.Layer
		case seen:
			st = head
		}
		p.of[v] = st
		p.Stages[st].Fwd = append(p.Stages[st].Fwd, v)
		for _, a := range v.Def.Args {
			if _, owned := p.of[a]; a.Role == Param && !owned {
				p.of[a] = st
				p.Stages[st].Params = append(p.Stages[st].Params, a)
			}
		}
		if v == loss {
			end = i + 1
			break
		}
	}
	for i, st := range p.Stages {
		for _, v := range st.Fwd {
			for _, a := range v.Def.Args {
				if j, ok := p.of[a]; ok && j != i && a.Role != Param {
					p.shared[a] = true
				}
			}
		}
	}
	if origin != nil {
		opt := map[*Value]bool{}
		for _, v := range g.Values[end:] {
			if v.Role == OptState || v.Updates != nil {
				opt[v] = true
			}
			if v.Def != nil {
				for _, a := range v.Def.Args {
					if opt[a] {
						opt[v] = true
					}
				}
			}
			if v.Def == nil || opt[v] {
				continue
			}
			o := v
			for origin[o] != nil {
				o = origin[o]
			}
			st, ok := p.of[o]
			if !ok {
				return nil, fmt.Errorf("backward value %s has no stage (made for %s)", v.Name, o.Name)
			}
			p.of[v] = st
			p.Stages[st].Bwd = append(p.Stages[st].Bwd, v)
		}
	}
	// A param shared by several stages keeps its owner's stage live from
	// the owner to its last user.
	for i, st := range p.Stages {
		st.LastUser = i
	}
	for i, st := range p.Stages {
		for _, v := range append(append([]*Value{}, st.Fwd...), st.Bwd...) {
			for _, a := range v.Def.Args {
				if a.Role != Param {
					continue
				}
				if owner := p.Stages[p.of[a]]; i > owner.LastUser {
					owner.LastUser = i
				}
			}
		}
	}
	for i, st := range p.Stages {
		for j := i + 1; j <= st.LastUser; j++ {
			p.Stages[j].Borrowed = append(p.Stages[j].Borrowed, i)
		}
	}
	return p, nil
}

// Factors are one layer group's sharding factors. Secondary is ZeRO++
// hpZ's secondary parameter shard (zero when unused): backward gathers P
// from it instead of from the primary shard.
type Factors struct {
	P, G, OS, Secondary Factor
}

func (f Factors) String() string {
	if f.Secondary.Size() > 1 {
		return fmt.Sprintf("%v+%v/%v/%v", f.P, f.Secondary, f.G, f.OS)
	}
	return fmt.Sprintf("%v/%v/%v", f.P, f.G, f.OS)
}
