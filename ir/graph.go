// Package ir is amspc's intermediate representation: a graph of ops and
// values for one training step, plus the job it runs in (cluster, training
// settings, sharding).
//
// In: values and ops built by the frontend (or parsed from the printed
// form). Out: a verified graph whose every value has a concrete shape, a
// dtype, a role and a source position. The package imports nothing of
// amspc's own, so every other package can depend on it.
//
// Values are in SSA form and Graph.Values is in definition order, which is
// also a topological order: an op's operands are always defined on earlier
// lines. Printing follows that order, so the text form is deterministic.
package ir

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
)

// Pos is a source position. Line and Col count from 1; the zero Pos means
// "no position" (values synthesised by a pass inherit the position of what
// they were made from instead).
type Pos struct {
	File string
	Line int
	Col  int
}

func (p Pos) IsValid() bool { return p.Line > 0 }

func (p Pos) String() string {
	if !p.IsValid() {
		if p.File != "" {
			return p.File
		}
		return "-"
	}
	if p.File == "" {
		return fmt.Sprintf("%d:%d", p.Line, p.Col)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// DType is an element type.
type DType uint8

const (
	InvalidDType DType = iota
	I32
	BF16
	F16
	F32
)

var dtypeNames = [...]string{InvalidDType: "invalid", I32: "i32", BF16: "bf16", F16: "f16", F32: "f32"}

func (t DType) String() string {
	if int(t) < len(dtypeNames) {
		return dtypeNames[t]
	}
	return fmt.Sprintf("dtype(%d)", int(t))
}

// Size is the number of bytes of one element.
func (t DType) Size() int64 {
	switch t {
	case I32, F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// IsFloat reports whether t is a floating-point type.
func (t DType) IsFloat() bool { return t == BF16 || t == F16 || t == F32 }

// ParseDType maps a dtype name ("bf16", "f32", ...) to its DType.
func ParseDType(s string) (DType, bool) {
	for i, n := range dtypeNames {
		if i != int(InvalidDType) && n == s {
			return DType(i), true
		}
	}
	return InvalidDType, false
}

// Role says what a value is to training. The forward graph holds inputs,
// params, activations and the loss; autodiff and the optimizer pass add
// gradients (G) and optimizer states (OS), the other two model states that
// AMSP shards independently of P.
type Role uint8

const (
	InvalidRole Role = iota
	Input            // fed from the data loader each micro-batch
	Param            // P: trained weights
	Activation       // computed by an op
	Loss             // the scalar training minimises; computed by an op
	Grad             // G: gradient of the loss w.r.t. a param
	OptState         // OS: fp32 master weights and Adam moments
)

var roleNames = [...]string{InvalidRole: "invalid", Input: "input", Param: "param", Activation: "act", Loss: "loss", Grad: "grad", OptState: "optstate"}

func (r Role) String() string {
	if int(r) < len(roleNames) {
		return roleNames[r]
	}
	return fmt.Sprintf("role(%d)", int(r))
}

// ParseRole maps a printed role keyword to its Role.
func ParseRole(s string) (Role, bool) {
	for i, n := range roleNames {
		if i != int(InvalidRole) && n == s {
			return Role(i), true
		}
	}
	return InvalidRole, false
}

// Defined reports whether values of this role are computed by an op (as
// opposed to arriving from outside the graph).
func (r Role) Defined() bool { return r == Activation || r == Loss || r == Grad }

// Shape is a list of concrete dimension sizes; a scalar has none.
type Shape []int64

// NumElements is the product of the dims (1 for a scalar).
func (s Shape) NumElements() int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

// CheckedNumElements is NumElements, or false when the product (or its
// size in bytes at 8 bytes an element) would overflow an int64.
func (s Shape) CheckedNumElements() (int64, bool) {
	const limit = math.MaxInt64 / 8
	n := int64(1)
	for _, d := range s {
		if d < 0 || (d > 0 && n > limit/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

func (s Shape) Equal(t Shape) bool {
	if len(s) != len(t) {
		return false
	}
	for i := range s {
		if s[i] != t[i] {
			return false
		}
	}
	return true
}

func (s Shape) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, d)
	}
	b.WriteByte(']')
	return b.String()
}

// InitKind is how a param is initialised (NUMERICS.md).
type InitKind uint8

const (
	InitNormal InitKind = iota // normal(0, Std)
	InitOnes
	InitZeros
	InitCopy // the initial value of another param (an fp32 master copy)
)

// Init is a param's initialiser.
type Init struct {
	Kind InitKind
	Std  float64 // for InitNormal
	Of   string  // for InitCopy: the param copied
}

// DefaultInit is what a param without an init clause gets.
var DefaultInit = Init{Kind: InitNormal, Std: 0.02}

func (in Init) String() string {
	switch in.Kind {
	case InitOnes:
		return "ones"
	case InitZeros:
		return "zeros"
	case InitCopy:
		return "copy(" + in.Of + ")"
	}
	return "normal(" + FormatFloat(in.Std) + ")"
}

// Value is a tensor in the graph, defined exactly once.
type Value struct {
	Name  string // unique in the graph: "x", "layers.3.wq", "layers.3.h.1"
	Shape Shape
	DType DType
	Role  Role
	Def   *Op  // the op computing it (one of its results); nil for inputs, params and states
	Init  Init // params only
	Layer int  // index of the repeated block it belongs to, or -1
	Pos   Pos
	// Updates is the state (param or optimizer state) this value
	// replaces at the end of the step; only computed values of role Param
	// or OptState have one.
	Updates *Value
}

// Bytes is the size of the value's data.
func (v *Value) Bytes() int64 { return v.Shape.NumElements() * v.DType.Size() }

// Op computes one or more values, its results, from its operands. The
// results sit next to each other in Graph.Values, in result order, and
// share the op's layer and position.
type Op struct {
	Kind    OpKind
	Args    []*Value
	Attrs   []Attr   // in the op table's attribute order
	Results []*Value // each result's Def is the op
	Pos     Pos
}

// Out is the op's result: the only one of most ops, the first of a
// multi-result op (nil if the op has none, which Verify rejects).
func (op *Op) Out() *Value {
	if len(op.Results) == 0 {
		return nil
	}
	return op.Results[0]
}

// definedAt reports whether v is the op's first result: where a walk over
// values meets the op once.
func (op *Op) definedAt(v *Value) bool { return len(op.Results) > 0 && op.Results[0] == v }

// Attr is a named constant argument of an op.
type Attr struct {
	Name string
	Val  AttrVal
}

// AttrVal is an attribute value: an integer, a float or a bool.
type AttrVal struct {
	Type  AttrType
	Int   int64
	Float float64
	Bool  bool
}

// AttrType is the type of an attribute.
type AttrType uint8

const (
	AttrInt AttrType = iota
	AttrFloat
	AttrBool
)

func (t AttrType) String() string {
	switch t {
	case AttrInt:
		return "an integer"
	case AttrFloat:
		return "a number"
	case AttrBool:
		return "a bool"
	}
	return fmt.Sprintf("attrtype(%d)", int(t))
}

func (a AttrVal) String() string {
	switch a.Type {
	case AttrInt:
		return fmt.Sprint(a.Int)
	case AttrBool:
		return fmt.Sprint(a.Bool)
	}
	return FormatFloat(a.Float)
}

// Attr returns the named attribute and whether the op has it.
func (op *Op) Attr(name string) (AttrVal, bool) { return attrByName(op.Attrs, name) }

// Dim is a named integer of the model, resolved.
type Dim struct {
	Name  string
	Value int64
	Pos   Pos
}

// Graph is the forward computation of one micro-batch on one replica.
type Graph struct {
	Name   string
	Dims   []Dim    // in declaration order; batch and seq first
	Values []*Value // in definition order (a topological order)
	Layers int      // number of repeated blocks stamped
	Pos    Pos      // of the model section

	mu     sync.Mutex // byName: distributions of one graph look up at once
	byName map[string]*Value
}

// Lookup finds a value by name. The index is rebuilt when it is stale
// (values appended directly, or renamed), so it is always right.
func (g *Graph) Lookup(name string) *Value {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v, ok := g.byName[name]; ok && v.Name == name {
		return v
	}
	g.byName = make(map[string]*Value, len(g.Values))
	for _, v := range g.Values {
		if _, dup := g.byName[v.Name]; !dup {
			g.byName[v.Name] = v
		}
	}
	return g.byName[name]
}

// Add appends a value (and its op, if any) to the graph.
func (g *Graph) Add(v *Value) {
	g.Values = append(g.Values, v)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byName != nil {
		g.byName[v.Name] = v
	}
}

// Dim returns the value of a named dim.
func (g *Graph) Dim(name string) (int64, bool) {
	for _, d := range g.Dims {
		if d.Name == name {
			return d.Value, true
		}
	}
	return 0, false
}

// Ops returns the ops in definition order, each once (at its first
// result).
func (g *Graph) Ops() []*Op {
	var ops []*Op
	for _, v := range g.Values {
		if v.Def != nil && v.Def.definedAt(v) {
			ops = append(ops, v.Def)
		}
	}
	return ops
}

// Params returns the params in definition order (not their updates).
func (g *Graph) Params() []*Value {
	var vs []*Value
	for _, v := range g.Values {
		if v.Role == Param && v.Def == nil {
			vs = append(vs, v)
		}
	}
	return vs
}

// ByRole returns the values of one role in definition order.
func (g *Graph) ByRole(r Role) []*Value {
	var vs []*Value
	for _, v := range g.Values {
		if v.Role == r {
			vs = append(vs, v)
		}
	}
	return vs
}

// LossValue returns the value with role Loss, or nil.
func (g *Graph) LossValue() *Value {
	for _, v := range g.Values {
		if v.Role == Loss {
			return v
		}
	}
	return nil
}

// Uses returns, for every value, the ops that read it, in definition order.
func (g *Graph) Uses() map[*Value][]*Op {
	uses := make(map[*Value][]*Op)
	for _, op := range g.Ops() {
		for _, a := range op.Args {
			uses[a] = append(uses[a], op)
		}
	}
	return uses
}

// hasResult reports whether v is one of the op's results.
func (op *Op) hasResult(v *Value) bool {
	for _, r := range op.Results {
		if r == v {
			return true
		}
	}
	return false
}

// Clone returns a copy of g that shares nothing with it, equal to
// Parse(Print(g)) for a graph Verify accepts, at a fraction of the cost:
// it keeps only what the printed form keeps. An op's results share its
// line's layer and position (the first result's), an invalid position
// is dropped, an init is its kind's fields, and attributes are typed as
// the parser types their spelling.
func (g *Graph) Clone() *Graph {
	at := func(p Pos) Pos {
		if !p.IsValid() {
			return Pos{}
		}
		return p
	}
	out := &Graph{Name: g.Name, Layers: g.Layers, Pos: Pos{File: g.Pos.File},
		Dims: make([]Dim, len(g.Dims)), Values: make([]*Value, 0, len(g.Values))}
	if g.Pos.IsValid() {
		out.Pos = g.Pos
	}
	for i, d := range g.Dims {
		out.Dims[i] = Dim{Name: d.Name, Value: d.Value, Pos: at(d.Pos)}
	}
	vals := make([]Value, len(g.Values)) // one allocation for all
	copyOf := make(map[*Value]*Value, len(g.Values))
	value := func(v *Value, layer int, pos Pos) *Value {
		c := &vals[len(out.Values)]
		*c = Value{Name: v.Name, Shape: append(Shape{}, v.Shape...), DType: v.DType, Role: v.Role, Layer: max(layer, -1), Pos: pos, Updates: copyOf[v.Updates]}
		if (v.Role == Param || v.Role == OptState) && v.Def == nil {
			switch in := v.Init; in.Kind {
			case InitOnes, InitZeros:
				c.Init = Init{Kind: in.Kind}
			case InitCopy:
				c.Init = Init{Kind: InitCopy, Of: in.Of}
			default:
				c.Init = Init{Kind: InitNormal, Std: in.Std}
			}
		}
		copyOf[v] = c
		out.Values = append(out.Values, c)
		return c
	}
	for _, v := range g.Values {
		op := v.Def
		if op == nil {
			value(v, v.Layer, at(v.Pos))
			continue
		}
		if len(op.Results) > 1 && !op.definedAt(v) && op.hasResult(v) {
			continue // copied with its op's first result
		}
		heads := []*Value{v}
		if len(op.Results) > 1 && op.definedAt(v) {
			heads = op.Results
		}
		pos := at(v.Pos)
		c := &Op{Kind: op.Kind, Pos: pos, Args: make([]*Value, len(op.Args)), Results: make([]*Value, len(heads))}
		for i, a := range op.Args {
			c.Args[i] = copyOf[a]
		}
		if len(op.Attrs) > 0 {
			c.Attrs = make([]Attr, len(op.Attrs))
			for i, a := range op.Attrs {
				c.Attrs[i] = Attr{Name: a.Name, Val: reparsedAttr(op.Kind, a)}
			}
		}
		for i, r := range heads {
			c.Results[i] = value(r, v.Layer, pos)
			c.Results[i].Def = c
		}
	}
	return out
}

// reparsedAttr is attribute a of a kind op as the parser reads its
// printed form back (parser.attrVal).
func reparsedAttr(kind OpKind, a Attr) AttrVal {
	if a.Val.Type == AttrBool {
		return AttrVal{Type: AttrBool, Bool: a.Val.Bool}
	}
	want := AttrInt
	for _, s := range kind.Info().Attrs {
		if s.Name == a.Name {
			want = s.Type
		}
	}
	if a.Val.Type == AttrInt {
		if want == AttrFloat {
			return AttrVal{Type: AttrFloat, Float: float64(a.Val.Int)}
		}
		return AttrVal{Type: AttrInt, Int: a.Val.Int}
	}
	if s := FormatFloat(a.Val.Float); isIntLiteral(s) && want != AttrFloat {
		n, _ := strconv.ParseInt(s, 10, 64)
		return AttrVal{Type: AttrInt, Int: n}
	}
	return AttrVal{Type: AttrFloat, Float: a.Val.Float}
}
