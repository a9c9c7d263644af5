package passes

import (
	"strings"
	"testing"

	"amspc/internal/testjob"
	"amspc/ir"
)

// TestBadAttrIsInternalError: an op built with an attribute its spec does
// not declare, or without a required one, stops the pass with an internal
// compiler error naming it, never a silent default.
func TestBadAttrIsInternalError(t *testing.T) {
	g := testjob.Load(t, "tiny").Graph
	x, w := g.Lookup("x"), g.Lookup("layers.0.attn_norm")
	for _, c := range []struct {
		attrs []ir.Attr
		want  string
	}{
		{[]ir.Attr{ir.FloatAttr("epsilon", 1e-6)}, `internal compiler error: broken: making the rmsnorm_grad of x: rmsnorm_grad: rmsnorm_grad has no attribute "epsilon" (it takes eps)`},
		{[]ir.Attr{ir.IntAttr("eps", 1), ir.IntAttr("eps", 2)}, `attribute "eps" given twice`},
	} {
		pass := Pass{Name: "broken", Run: func(s *State) error {
			b := &gradBuilder{g: s.Graph}
			b.at(x)
			b.Apply(ir.RMSNormGrad, []*ir.Value{x, w, x}, c.attrs...)
			return nil
		}}
		err := runPass(pass, &State{Graph: g})
		if _, ok := err.(*ir.InternalError); !ok || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want an internal error containing %q", err, c.want)
		}
	}
	pass := Pass{Name: "broken", Run: func(s *State) error {
		b := &gradBuilder{g: s.Graph}
		b.at(x)
		b.Apply(ir.AdamWStep, []*ir.Value{w, w, w, w}, ir.FloatAttr("lr", 1))
		return nil
	}}
	if err := runPass(pass, &State{Graph: g}); err == nil || !strings.Contains(err.Error(), "adamw needs attribute beta1=") {
		t.Errorf("adamw without beta1: %v", err)
	}
}

// TestPassOrder checks the pipeline against the order constraints, and
// that each constraint names real passes.
func TestPassOrder(t *testing.T) {
	at := map[string]int{}
	for i, p := range Pipeline {
		at[p.Name] = i
	}
	for _, c := range passOrder {
		a, okA := at[c[0]]
		b, okB := at[c[1]]
		switch {
		case !okA || !okB:
			t.Errorf("constraint %s before %s names a pass not in the pipeline", c[0], c[1])
		case a >= b:
			t.Errorf("pass %s must run before %s", c[0], c[1])
		}
	}
	// Graph passes come first: a distribution pass runs only on a
	// partitioned graph.
	for i := 1; i < len(Pipeline); i++ {
		if Pipeline[i-1].Dist && !Pipeline[i].Dist {
			t.Errorf("graph pass %s after distribution pass %s", Pipeline[i].Name, Pipeline[i-1].Name)
		}
	}
}
