package ir

// Verify is the invariant every pass must preserve; -d=check runs it after
// each pass and tests run it after every golden. It re-derives what it can
// (attribute normal form, inferred shapes) instead of trusting stored
// results, so a pass that edits a value's operands without re-inferring its
// shape is caught at the pass that did it.

import (
	"fmt"
	"math"
	"strings"

	"gonum.org/v1/gonum/graph/simple"
	"gonum.org/v1/gonum/graph/topo"
)

// VerifyError is the first invariant violation Verify found. Name is the
// value (or "dim NAME", "model NAME") at fault and Pos its source position.
type VerifyError struct {
	Name string
	Pos  Pos
	Msg  string
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("ir.Verify: %s (%s): %s", e.Name, e.Pos, e.Msg)
}

// Verify checks g's invariants and returns the first violation as a
// *VerifyError, or nil. Checks run in a fixed order (graph, dims, then
// values in definition order), so the same bad graph always gets the same
// message. It never panics, whatever g holds.
func Verify(g *Graph) error {
	if g == nil {
		return &VerifyError{Name: "graph", Msg: "nil graph"}
	}
	v := verifier{g: g}
	return v.run()
}

type verifier struct {
	g     *Graph
	index map[*Value]int // first index in g.Values
	cycle map[*Value][]*Value
}

func (vf *verifier) run() error {
	g := vf.g
	model := "model " + g.Name
	if !isWord(g.Name) {
		return &VerifyError{Name: model, Pos: g.Pos, Msg: fmt.Sprintf("model name %q is not a printable name", g.Name)}
	}
	if g.Layers < 0 {
		return &VerifyError{Name: model, Pos: g.Pos, Msg: fmt.Sprintf("negative layer count %d", g.Layers)}
	}
	dims := make(map[string]Pos, len(g.Dims))
	for _, d := range g.Dims {
		fail := func(format string, a ...any) error {
			return &VerifyError{Name: "dim " + d.Name, Pos: d.Pos, Msg: fmt.Sprintf(format, a...)}
		}
		if !isWord(d.Name) {
			return fail("dim name %q is not a printable name", d.Name)
		}
		if p, ok := dims[d.Name]; ok {
			return fail("duplicate dim %s (first declared at %s)", d.Name, p)
		}
		dims[d.Name] = d.Pos
		if d.Value < 1 {
			return fail("dim %s = %d, must be at least 1", d.Name, d.Value)
		}
	}

	vf.index = make(map[*Value]int, len(g.Values))
	for i, v := range g.Values {
		if v == nil {
			return &VerifyError{Name: fmt.Sprintf("value #%d", i), Msg: "nil value"}
		}
		if _, ok := vf.index[v]; !ok {
			vf.index[v] = i
		}
	}
	// Definition order proves acyclicity when every operand comes first;
	// only a graph that breaks it pays for gonum's sort, which then names
	// the cycle (if it is one) in the error.
	if !vf.inOrder() {
		vf.findCycles()
	}

	names := make(map[string]*Value, len(g.Values))
	var loss *Value
	for i, v := range g.Values {
		if err := vf.value(i, v, names); err != nil {
			return err
		}
		names[v.Name] = v
		if v.Role == Loss {
			if loss != nil {
				return verr(v, "second loss value (the first is %s at %s)", loss.Name, loss.Pos)
			}
			loss = v
		}
	}
	if loss == nil {
		return &VerifyError{Name: model, Pos: g.Pos, Msg: "no loss value"}
	}
	if len(vf.cycle) > 0 {
		// The ordering check above rejects every cycle first; reaching
		// here means the two disagree, which is a verifier bug.
		return &VerifyError{Name: model, Pos: g.Pos, Msg: "cycle not caught by the definition-order check"}
	}
	return nil
}

func verr(v *Value, format string, a ...any) error {
	return &VerifyError{Name: v.Name, Pos: v.Pos, Msg: fmt.Sprintf(format, a...)}
}

// inOrder reports whether every operand is defined before its use.
func (vf *verifier) inOrder() bool {
	for i, v := range vf.g.Values {
		if v.Def == nil {
			continue
		}
		for _, a := range v.Def.Args {
			if j, ok := vf.index[a]; !ok || j >= i {
				return false
			}
		}
	}
	return true
}

// findCycles topologically sorts the operand graph with gonum (node ID =
// index in g.Values) and records each value on a cycle. Definition order
// already proves acyclicity when it holds; the sort lets the error for an
// out-of-order operand say whether it is a true cycle, and name it.
func (vf *verifier) findCycles() {
	dg := simple.NewDirectedGraph()
	for i := range vf.g.Values {
		dg.AddNode(simple.Node(i))
	}
	for i, v := range vf.g.Values {
		if v.Def == nil {
			continue
		}
		for _, a := range v.Def.Args {
			j, ok := vf.index[a]
			// Self-edges panic in gonum; a value reading itself is
			// reported by the ordering check directly.
			if ok && j != i {
				dg.SetEdge(dg.NewEdge(simple.Node(j), simple.Node(i)))
			}
		}
	}
	_, err := topo.Sort(dg)
	cycles, ok := err.(topo.Unorderable)
	if !ok {
		return
	}
	vf.cycle = make(map[*Value][]*Value)
	for _, comp := range cycles {
		members := make([]*Value, len(comp)) // sorted by ID, i.e. g.Values order
		for k, n := range comp {
			members[k] = vf.g.Values[n.ID()]
		}
		for _, m := range members {
			vf.cycle[m] = members
		}
	}
}

// value checks one value; names holds the values before it.
func (vf *verifier) value(i int, v *Value, names map[string]*Value) error {
	g := vf.g
	if v.Name == "" {
		return &VerifyError{Name: fmt.Sprintf("value #%d", i), Pos: v.Pos, Msg: "empty name"}
	}
	if !isWord(v.Name) {
		return verr(v, "name %q is not a printable name", v.Name)
	}
	if prev, ok := names[v.Name]; ok {
		return verr(v, "duplicate name %s (first defined at %s)", v.Name, prev.Pos)
	}
	if v.Role <= InvalidRole || v.Role > OptState {
		return verr(v, "invalid role %s", v.Role)
	}
	if v.DType <= InvalidDType || v.DType > F32 {
		return verr(v, "invalid dtype %s", v.DType)
	}
	for _, d := range v.Shape {
		if d < 1 {
			return verr(v, "shape %s has a dim %d < 1", v.Shape, d)
		}
	}
	if _, ok := v.Shape.CheckedNumElements(); !ok {
		return verr(v, "shape %s overflows int64 bytes", v.Shape)
	}
	if v.Layer < -1 || v.Layer >= g.Layers {
		return verr(v, "layer %d out of range [-1, %d)", v.Layer, g.Layers)
	}
	if (v.Role == Param || v.Role == OptState) && v.Init.Kind > InitCopy {
		return verr(v, "invalid init kind %d", v.Init.Kind)
	}
	if v.Def == nil && v.Init.Kind == InitCopy {
		if src, ok := names[v.Init.Of]; !ok || src.Role != Param || !src.Shape.Equal(v.Shape) {
			return verr(v, "init copy(%s) must name an earlier param of shape %s", v.Init.Of, v.Shape)
		}
	}
	isState := v.Role == Param || v.Role == OptState
	if u := v.Updates; u != nil {
		switch {
		case !isState || v.Def == nil:
			return verr(v, "only computed params and optimizer states update a state")
		case names[u.Name] != u:
			return verr(v, "updated state %s is not defined before", u.Name)
		case u.Role != v.Role || u.Def != nil || !u.Shape.Equal(v.Shape) || u.DType != v.DType:
			return verr(v, "updates %s (%s %s%s), which differs in role, type or is itself computed", u.Name, u.Role, u.DType, u.Shape)
		}
	}
	if v.Role == Loss {
		if len(v.Shape) != 0 {
			return verr(v, "loss must be a scalar, not %s", v.Shape)
		}
		if v.DType != F32 {
			return verr(v, "loss must be f32, not %s", v.DType)
		}
	}
	switch {
	case v.Role.Defined() && v.Def == nil:
		return verr(v, "%s value has no defining op", v.Role)
	case isState && v.Def != nil && v.Updates == nil:
		return verr(v, "computed %s value updates no state", v.Role)
	case !v.Role.Defined() && v.Def != nil && !isState:
		return verr(v, "%s value has a defining op %s (only act, loss and grad values are computed)", v.Role, v.Def.Kind)
	case v.Def == nil:
		return nil
	}
	return vf.op(i, v)
}

// op checks v's defining op: wiring, operand order, arity, attribute normal
// form and that the op table's shape rule agrees with the stored type of
// each result. A multi-result op is checked once, at its first result; its
// other results must follow it directly in definition order.
func (vf *verifier) op(i int, v *Value) error {
	op := v.Def
	k := -1
	for j, r := range op.Results {
		if r == v {
			k = j
			break
		}
	}
	if k < 0 {
		return verr(v, "defining op's results (%s) do not include the value", resultNames(op))
	}
	if k > 0 {
		// Checked with the first result; only the wiring is left.
		if i < k || vf.g.Values[i-k] != op.Results[0] {
			return verr(v, "result %d of %s does not follow the op's result %d directly", k, op.Kind, k-1)
		}
		return nil
	}
	if op.Kind <= InvalidOp || op.Kind >= numOps {
		return verr(v, "invalid op kind %s", op.Kind)
	}
	info := op.Kind.Info()
	if len(op.Results) != info.NumResults() {
		return verr(v, "%s has %d result%s, got %d (%s)", info.Name, info.NumResults(), plural(info.NumResults()), len(op.Results), resultNames(op))
	}
	for j, r := range op.Results[1:] {
		switch {
		case r == nil:
			return verr(v, "result %d of %s is nil", j+1, op.Kind)
		case i+j+1 >= len(vf.g.Values) || vf.g.Values[i+j+1] != r:
			return verr(r, "result %d of %s does not follow the op's result %d directly", j+1, op.Kind, j)
		case r.Def != op:
			return verr(r, "result %d of %s is defined by another op", j+1, op.Kind)
		case r.Layer != v.Layer || r.Pos != v.Pos:
			return verr(r, "results of one %s differ in layer or position (%d at %s, %d at %s)", op.Kind, v.Layer, v.Pos, r.Layer, r.Pos)
		}
	}
	for k, a := range op.Args {
		if a == nil {
			return verr(v, "operand %d of %s is nil", k, op.Kind)
		}
		j, ok := vf.index[a]
		switch {
		case !ok:
			return verr(v, "operand %s of %s is not in the graph", a.Name, op.Kind)
		case a == v:
			return verr(v, "%s reads itself", v.Name)
		case a.Def == op:
			return verr(v, "%s reads its own result %s", op.Kind, a.Name)
		case j < i:
			continue
		case vf.cycle[a] != nil && sameCycle(vf.cycle[a], v):
			return verr(v, "operand %s is on a cycle: %s", a.Name, cycleNames(vf.cycle[a]))
		default:
			return verr(v, "operand %s is defined after its use (at %s)", a.Name, a.Pos)
		}
	}
	if len(op.Args) != info.Arity {
		return verr(v, "%s takes %d operand%s, got %d", info.Name, info.Arity, plural(info.Arity), len(op.Args))
	}
	if err := CheckAttrs(op.Kind, op.Attrs); err != nil {
		return verr(v, "%v", err)
	}
	types, oerr := Infer(op.Kind, op.Args, op.Attrs)
	if oerr != nil {
		return verr(v, "%s", oerr.Msg)
	}
	for j, r := range op.Results {
		if t := types[j]; !t.Shape.Equal(r.Shape) || t.DType != r.DType {
			return verr(r, "type %s%s differs from the inferred %s%s", r.DType, r.Shape, t.DType, t.Shape)
		}
	}
	return nil
}

func resultNames(op *Op) string {
	names := make([]string, len(op.Results))
	for i, r := range op.Results {
		names[i] = nameOf(r)
	}
	return strings.Join(names, ", ")
}

func sameCycle(members []*Value, v *Value) bool {
	for _, m := range members {
		if m == v {
			return true
		}
	}
	return false
}

func cycleNames(members []*Value) string {
	names := make([]string, len(members))
	for i, m := range members {
		names[i] = m.Name
	}
	return strings.Join(names, ", ")
}

// attrsEqual compares name, type and the field the type selects; floats by
// bits, so a NaN attribute equals itself.
func attrsEqual(a, b []Attr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Name != y.Name || x.Val.Type != y.Val.Type {
			return false
		}
		switch x.Val.Type {
		case AttrInt:
			if x.Val.Int != y.Val.Int {
				return false
			}
		case AttrFloat:
			if math.Float64bits(x.Val.Float) != math.Float64bits(y.Val.Float) {
				return false
			}
		case AttrBool:
			if x.Val.Bool != y.Val.Bool {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func attrString(attrs []Attr) string {
	var b strings.Builder
	for i, a := range attrs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(a.Name + "=" + a.Val.String())
	}
	return b.String()
}

func nameOf(v *Value) string {
	if v == nil {
		return "nil"
	}
	return v.Name
}

// isWord reports whether s prints as one word of the printed form, so
// Parse(Print(g)) can read it back.
func isWord(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameChar(s[i]) {
			return false
		}
	}
	return true
}

// InternalError is a compiler bug caught by a check (a verifier, a pass
// that fails or panics), not a user's mistake: it names the stage that
// found it, and the CLI exits 2 on it.
type InternalError struct {
	Pass string
	Err  error
}

func (e *InternalError) Error() string {
	return "internal compiler error: " + e.Pass + ": " + e.Err.Error()
}

func (e *InternalError) Unwrap() error { return e.Err }
