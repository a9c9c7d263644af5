package frontend

import (
	"fmt"
	"strings"

	"amspc/ir"
)

// reach keeps what training needs once a model has lowered cleanly: every
// param must reach the loss (one that does not would get no gradient, and
// an optimizer cannot update it), and values that do not reach the loss
// are dropped. Nothing observes them: the step computes the loss and its
// gradients, so a value after the loss (`twice = loss + loss`) or a dead
// branch would only cost time and memory, and the scheduler's split of a
// step into forward and backward assumes the loss is the last forward
// value.
func reach(d *diag, g *ir.Graph, loss *ir.Value) {
	live := map[*ir.Value]bool{loss: true}
	for i := len(g.Values) - 1; i >= 0; i-- {
		v := g.Values[i]
		if !live[v] || v.Def == nil {
			continue
		}
		for _, a := range v.Def.Args {
			live[a] = true
		}
	}
	unreachedParams(d, g, live)
	kept := g.Values[:0]
	for _, v := range g.Values {
		if live[v] || v.Role != ir.Activation {
			kept = append(kept, v)
		}
	}
	clear(g.Values[len(kept):])
	g.Values = kept
}

// unreachedParams reports each param declaration with copies that do not
// reach the loss, once per declaration: a param declared in a repeat block
// is one statement stamped into every layer, and may miss the loss in
// some layers only (a block whose output the next layer overwrites).
func unreachedParams(d *diag, g *ir.Graph, live map[*ir.Value]bool) {
	type decl struct {
		name   string
		all    int   // copies stamped
		missed []int // layers (or -1) of the copies that do not reach
	}
	var order []ir.Pos
	decls := map[ir.Pos]*decl{}
	for _, p := range g.Params() {
		dc := decls[p.Pos]
		if dc == nil {
			dc = &decl{name: p.Name}
			if p.Layer >= 0 {
				dc.name = strings.TrimPrefix(p.Name, fmt.Sprintf("layers.%d.", p.Layer))
			}
			decls[p.Pos] = dc
			order = append(order, p.Pos)
		}
		dc.all++
		if !live[p] {
			dc.missed = append(dc.missed, p.Layer)
		}
	}
	for _, pos := range order {
		dc := decls[pos]
		switch {
		case len(dc.missed) == 0:
		case len(dc.missed) == dc.all:
			d.errorf(pos, "param %s does not reach the loss, so training cannot update it (it would get no gradient)", dc.name)
		default:
			d.errorf(pos, "param %s does not reach the loss in %s of %d, so training cannot update those copies",
				dc.name, layerList(dc.missed), dc.all)
		}
	}
}

// layerList names layers compactly: "layer 3", "layers 0-2, 5".
func layerList(ls []int) string {
	var parts []string
	for i := 0; i < len(ls); {
		j := i
		for j+1 < len(ls) && ls[j+1] == ls[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, fmt.Sprint(ls[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ls[i], ls[j]))
		}
		i = j + 1
	}
	if len(ls) == 1 {
		return "layer " + parts[0]
	}
	return "layers " + strings.Join(parts, ", ")
}
