package frontend

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"amspc/ir"
)

// MaxLayers bounds the total number of stamped blocks, so a typo like
// `repeat 32000` fails fast instead of exhausting memory.
const MaxLayers = 10000

// maxValues bounds the graph as a whole for the same reason: a 200-byte
// file can stamp a 100-value body 10,000 times, and verifying a graph of a
// million values takes over ten seconds. Real models have a few thousand.
const maxValues = 1 << 17

// bindKind is what a name in the model's scope stands for.
type bindKind uint8

const (
	bindDim     bindKind = iota
	bindValue            // a tensor
	bindPoison           // its definition failed; uses stay silent
	bindUnbound          // batch/seq without a train section
)

type binding struct {
	kind  bindKind
	dim   int64
	val   *ir.Value
	layer int // repeat iteration that declared it, -1 outside blocks
	pos   ir.Pos
	why   string // bindUnbound: what would bind it
	// reported is set on a bindUnbound once its first use has said why:
	// one error per name, not one per use.
	reported bool
}

// operand is the result of evaluating an expression: a tensor, a constant
// or nothing (an error was already reported).
type operand struct {
	val   *ir.Value
	c     *constant
	pos   ir.Pos
	bad   bool
	fresh bool // val was created by the statement being lowered
}

type constKind uint8

const (
	constInt constKind = iota
	constFloat
	constBool
)

type constant struct {
	kind constKind
	i    int64
	f    float64
	b    bool
}

func (c *constant) String() string {
	switch c.kind {
	case constInt:
		return strconv.FormatInt(c.i, 10)
	case constBool:
		return strconv.FormatBool(c.b)
	}
	return ir.FormatFloat(c.f)
}

// modelLowerer stamps a model section into a graph.
type modelLowerer struct {
	d      *diag
	g      *ir.Graph
	scope  map[string]*binding
	dtype  ir.DType
	layer  int // current repeat iteration, -1 outside
	inRep  bool
	nextL  int            // next layer index to stamp
	uses   map[string]int // versions per qualified base name
	stmt   []*ir.Value    // values made by the current statement
	temps  int
	target string
}

// lowerModel builds the forward graph of one micro-batch. batch and seq
// are the train section's micro_batch and seq_len (0 when unbound);
// unboundWhy ends the error for a use of an unbound one, and is "" when the
// train section has already reported why they are missing.
func lowerModel(d *diag, m *ModelSection, batch, seq int64, dtype ir.DType, unboundWhy string) *ir.Graph {
	l := &modelLowerer{
		d:     d,
		g:     &ir.Graph{Name: m.Name, Pos: pos(m.Pos)},
		scope: map[string]*binding{},
		dtype: dtype,
		layer: -1,
		uses:  map[string]int{},
	}
	for _, b := range []struct {
		name, setting string
		v             int64
	}{{"batch", "micro_batch", batch}, {"seq", "seq_len", seq}} {
		switch {
		case b.v > 0:
			l.scope[b.name] = &binding{kind: bindDim, dim: b.v, layer: -1}
			l.g.Dims = append(l.g.Dims, ir.Dim{Name: b.name, Value: b.v})
		case unboundWhy == "":
			l.scope[b.name] = &binding{kind: bindUnbound, layer: -1, reported: true}
		default:
			l.scope[b.name] = &binding{kind: bindUnbound, layer: -1,
				why: fmt.Sprintf("%s is bound by train.%s, %s", b.name, b.setting, unboundWhy)}
		}
	}
	before := len(d.errs)
	l.stmts(m.Stmts)
	loss := l.finishLoss(m)
	l.g.Layers = l.nextL
	// A model with mistakes has holes (a failed statement makes no
	// value), so what reaches the loss is only known for a clean one.
	if loss != nil && len(d.errs) == before {
		reach(d, l.g, loss)
	}
	return l.g
}

func (l *modelLowerer) stmts(stmts []*Stmt) {
	for _, s := range stmts {
		if len(l.g.Values) > maxValues {
			l.d.errorf(pos(s.Pos), "model has more than %d values, the limit", maxValues)
			return
		}
		switch {
		case s.Dim != nil:
			l.dimStmt(s.Dim)
		case s.Input != nil:
			l.inputStmt(s.Input)
		case s.Param != nil:
			l.paramStmt(s.Param)
		case s.Repeat != nil:
			l.repeatStmt(s.Repeat)
		case s.Assign != nil:
			l.assignStmt(s.Assign)
		}
	}
}

// declare checks that name may be declared here (dims, inputs, params: not
// already bound in this scope) and reports a redefinition otherwise.
func (l *modelLowerer) declare(name string, p ir.Pos, what string) bool {
	b, ok := l.scope[name]
	if !ok || (l.inRep && b.layer >= 0 && b.layer != l.layer) {
		return true // unbound, or declared by the previous layer's stamp
	}
	if b.kind == bindUnbound || (b.kind == bindDim && b.pos == ir.Pos{}) {
		l.d.errorf(p, "%s %s redefines %s, which train binds", what, name, name)
		return false
	}
	l.d.errorf(p, "%s %s redefined (first defined at %s)", what, name, b.pos)
	l.scope[name] = &binding{kind: bindPoison, layer: l.layer, pos: p}
	return false
}

func (l *modelLowerer) dimStmt(s *DimStmt) {
	p := pos(s.Pos)
	if l.inRep {
		l.d.errorf(p, "dim %s: dims are declared outside repeat blocks", s.Name)
		return
	}
	if !l.declare(s.Name, p, "dim") {
		return
	}
	v, ok := l.dimExpr(s.Value, "dim "+s.Name)
	if !ok {
		l.scope[s.Name] = &binding{kind: bindPoison, layer: -1, pos: p}
		return
	}
	l.scope[s.Name] = &binding{kind: bindDim, dim: v, layer: -1, pos: p}
	l.g.Dims = append(l.g.Dims, ir.Dim{Name: s.Name, Value: v, Pos: p})
}

// dimExpr evaluates a positive integer expression.
func (l *modelLowerer) dimExpr(e *Expr, what string) (int64, bool) {
	op := l.expr(e)
	switch {
	case op.bad:
		return 0, false
	case op.val != nil:
		l.d.errorf(op.pos, "%s must be an integer, but %s is a tensor", what, op.describe())
		return 0, false
	case op.c.kind != constInt:
		l.d.errorf(op.pos, "%s must be an integer, not %s", what, op.c)
		return 0, false
	case op.c.i < 1:
		l.d.errorf(op.pos, "%s must be positive, got %d", what, op.c.i)
		return 0, false
	}
	return op.c.i, true
}

func (l *modelLowerer) shape(dims []*Expr, what string) (ir.Shape, bool) {
	var s ir.Shape
	ok := true
	for i, e := range dims {
		v, good := l.dimExpr(e, fmt.Sprintf("dim %d of %s", i, what))
		ok = ok && good
		s = append(s, v)
	}
	return s, ok
}

func (l *modelLowerer) inputStmt(s *InputStmt) {
	p := pos(s.Pos)
	if l.inRep {
		l.d.errorf(p, "input %s: inputs are declared outside repeat blocks", s.Name)
		return
	}
	if !l.declare(s.Name, p, "input") {
		return
	}
	dt, ok := ir.ParseDType(s.DType.Name)
	if !ok {
		l.d.errorf(pos(s.DType.Pos), "unknown dtype %s (known: i32, bf16, f16, f32)", s.DType.Name)
	}
	shape, good := l.shape(s.Dims, "input "+s.Name)
	if !ok || !good || !l.sizeOK(shape, p, "input "+s.Name) {
		l.scope[s.Name] = &binding{kind: bindPoison, layer: -1, pos: p}
		return
	}
	v := &ir.Value{Name: s.Name, Shape: shape, DType: dt, Role: ir.Input, Layer: -1, Pos: p}
	l.g.Add(v)
	l.scope[s.Name] = &binding{kind: bindValue, val: v, layer: -1, pos: p}
}

func (l *modelLowerer) sizeOK(s ir.Shape, p ir.Pos, what string) bool {
	if _, ok := s.CheckedNumElements(); !ok {
		l.d.errorf(p, "%s has too many elements: %s overflows 64-bit sizes", what, s)
		return false
	}
	return true
}

func (l *modelLowerer) qualify(name string) string {
	if l.layer >= 0 {
		return fmt.Sprintf("layers.%d.%s", l.layer, name)
	}
	return name
}

func (l *modelLowerer) paramStmt(s *ParamStmt) {
	p := pos(s.Pos)
	if !l.declare(s.Name, p, "param") {
		return
	}
	shape, ok := l.shape(s.Dims, "param "+s.Name)
	init, iok := l.init(s.Init)
	if !ok || !iok || !l.sizeOK(shape, p, "param "+s.Name) {
		l.scope[s.Name] = &binding{kind: bindPoison, layer: l.layer, pos: p}
		return
	}
	v := &ir.Value{Name: l.qualify(s.Name), Shape: shape, DType: l.dtype, Role: ir.Param,
		Init: init, Layer: l.layer, Pos: p}
	l.g.Add(v)
	l.scope[s.Name] = &binding{kind: bindValue, val: v, layer: l.layer, pos: p}
}

func (l *modelLowerer) init(in *Init) (ir.Init, bool) {
	if in == nil {
		return ir.DefaultInit, true
	}
	p := pos(in.Pos)
	switch in.Name {
	case "ones", "zeros":
		if len(in.Args) > 0 {
			l.d.errorf(p, "init %s takes no arguments", in.Name)
			return ir.Init{}, false
		}
		if in.Name == "ones" {
			return ir.Init{Kind: ir.InitOnes}, true
		}
		return ir.Init{Kind: ir.InitZeros}, true
	case "normal":
		if len(in.Args) != 1 || in.Args[0].Key != "" {
			l.d.errorf(p, "init normal takes one argument, the standard deviation: normal(0.02)")
			return ir.Init{}, false
		}
		op := l.expr(in.Args[0].Value)
		if op.bad {
			return ir.Init{}, false
		}
		std, ok := op.number()
		if !ok || !(std > 0) || math.IsInf(std, 0) {
			l.d.errorf(op.pos, "normal's standard deviation must be a positive number")
			return ir.Init{}, false
		}
		return ir.Init{Kind: ir.InitNormal, Std: std}, true
	}
	l.d.errorf(p, "unknown init %s (known: normal(std), ones, zeros)", in.Name)
	return ir.Init{}, false
}

// describe names a tensor operand for a message: by its name when the
// user wrote one, by its op when it is an intermediate (whose generated
// name, like y.t2, the user never saw).
func (op operand) describe() string {
	if op.fresh && op.val.Def != nil {
		return "the result of " + op.val.Def.Kind.String()
	}
	return op.val.Name
}

func (op operand) number() (float64, bool) {
	if op.c == nil {
		return 0, false
	}
	switch op.c.kind {
	case constInt:
		return float64(op.c.i), true
	case constFloat:
		return op.c.f, true
	}
	return 0, false
}

func (l *modelLowerer) repeatStmt(s *RepeatStmt) {
	p := pos(s.Pos)
	if l.inRep {
		l.d.errorf(p, "nested repeat blocks are not supported")
		return
	}
	n, ok := l.dimExpr(s.Count, "repeat count")
	if !ok {
		return
	}
	if int64(l.nextL)+n > MaxLayers {
		l.d.errorf(pos(s.Count.Pos), "repeat %d would make %d layers, more than the limit of %d", n, int64(l.nextL)+n, MaxLayers)
		return
	}
	l.inRep = true
	start := len(l.g.Values)
	for i := int64(0); i < n; i++ {
		l.layer = l.nextL
		l.nextL++
		before := len(l.d.errs)
		l.stmts(s.Body)
		if len(l.d.errs) > before {
			break // the same mistakes would repeat in every layer
		}
		// Every layer stamps the same values: after the first, the
		// total is known, so a block too big fails before it is built.
		if per := int64(len(l.g.Values) - start); i == 0 && int64(start)+per*n > maxValues {
			l.d.errorf(pos(s.Count.Pos), "repeat %d of %d values each would make the model more than %d values, the limit", n, per, maxValues)
			break
		}
	}
	l.inRep = false
	l.layer = -1
}

func (l *modelLowerer) assignStmt(s *AssignStmt) {
	p := pos(s.Pos)
	if b, ok := l.scope[s.Name]; ok {
		switch {
		case b.kind == bindDim || b.kind == bindUnbound:
			l.d.errorf(p, "cannot assign to %s: it is a dim", s.Name)
			return
		case b.kind == bindValue && (b.val.Role == ir.Param || b.val.Role == ir.Input) &&
			!(l.inRep && b.layer >= 0 && b.layer != l.layer):
			l.d.errorf(p, "cannot assign to %s: it is %s (declared at %s)", s.Name, article(b.val.Role.String()), b.pos)
			return
		}
	}
	base := l.qualify(s.Name)
	name := base
	if n := l.uses[base]; n > 0 {
		name = fmt.Sprintf("%s.%d", base, n)
	}
	l.uses[base]++
	l.target, l.temps, l.stmt = name, 0, nil
	op := l.expr(s.Value)
	switch {
	case op.bad:
		l.scope[s.Name] = &binding{kind: bindPoison, layer: l.layer, pos: p}
		return
	case op.c != nil:
		l.d.errorf(op.pos, "%s = %s: values are tensors; declare constants with dim", s.Name, op.c)
		l.scope[s.Name] = &binding{kind: bindPoison, layer: l.layer, pos: p}
		return
	}
	if op.fresh {
		op.val.Name = name
	}
	for _, v := range l.stmt {
		l.g.Add(v)
	}
	l.stmt = nil
	l.scope[s.Name] = &binding{kind: bindValue, val: op.val, layer: l.layer, pos: p}
}

// article prefixes a noun with "a" or "an".
func article(noun string) string {
	if noun != "" && strings.ContainsRune("aeiou", rune(noun[0])) {
		return "an " + noun
	}
	return "a " + noun
}

// finishLoss marks the value named loss, or reports why it cannot be
// trained; it returns the loss when it can.
func (l *modelLowerer) finishLoss(m *ModelSection) *ir.Value {
	b, ok := l.scope["loss"]
	switch {
	case !ok:
		l.d.errorf(pos(m.Pos), "model %s has no value named loss (training minimises loss = cross_entropy(...))", m.Name)
	case b.kind == bindPoison:
	case b.kind != bindValue:
		l.d.errorf(b.pos, "loss must be a tensor computed by the model")
	case b.val.Def == nil:
		l.d.errorf(b.pos, "loss must be computed by the model, not %s", article(b.val.Role.String()))
	case len(b.val.Shape) != 0:
		l.d.errorf(b.val.Pos, "loss must be a scalar, got shape %s", b.val.Shape)
	case b.val.DType != ir.F32:
		l.d.errorf(b.val.Pos, "loss must be f32, got %s", b.val.DType)
	case b.val.Def.Kind != ir.CrossEntropy:
		// Gradients start from one cross_entropy's closed-form seed;
		// a sum or a function of losses needs a seed per term.
		l.d.errorf(b.val.Pos, "loss must be the result of cross_entropy, not of %s (sums and other functions of losses are not supported yet)", b.val.Def.Kind)
	default:
		b.val.Role = ir.Loss
		return b.val
	}
	return nil
}

// expr evaluates an expression to a tensor or a constant.
func (l *modelLowerer) expr(e *Expr) operand {
	acc := l.term(e.Left)
	for _, r := range e.Rest {
		acc = l.binary(r.Op, pos(r.Pos), acc, l.term(r.Right))
	}
	return acc
}

func (l *modelLowerer) term(t *Term) operand {
	acc := l.unary(t.Left)
	for _, r := range t.Rest {
		acc = l.binary(r.Op, pos(r.Pos), acc, l.unary(r.Right))
	}
	return acc
}

func (l *modelLowerer) unary(u *Unary) operand {
	if u.Neg == nil {
		return l.primary(u.Primary)
	}
	p := pos(u.Pos)
	x := l.unary(u.Neg)
	switch {
	case x.bad:
		return x
	case x.val != nil:
		l.d.errorf(p, "cannot negate a tensor (%s)", x.describe())
		return operand{bad: true}
	case x.c.kind == constInt:
		if x.c.i == math.MinInt64 {
			l.d.errorf(p, "integer overflows 64 bits")
			return operand{bad: true}
		}
		return operand{c: &constant{kind: constInt, i: -x.c.i}, pos: p}
	case x.c.kind == constFloat:
		return operand{c: &constant{kind: constFloat, f: -x.c.f}, pos: p}
	}
	l.d.errorf(p, "cannot negate %s", x.c)
	return operand{bad: true}
}

func (l *modelLowerer) primary(pr *Primary) operand {
	p := pos(pr.Pos)
	switch {
	case pr.Number != nil:
		return l.number(*pr.Number, p)
	case pr.Sub != nil:
		op := l.expr(pr.Sub)
		if !op.bad && op.c != nil {
			op.pos = p
		}
		return op
	case pr.Call != nil:
		return l.call(pr.Call)
	}
	name := *pr.Ident
	b, ok := l.scope[name]
	if !ok {
		if name == "true" || name == "false" {
			return operand{c: &constant{kind: constBool, b: name == "true"}, pos: p}
		}
		l.d.errorf(p, "undefined: %s", name)
		return operand{bad: true}
	}
	switch b.kind {
	case bindDim:
		return operand{c: &constant{kind: constInt, i: b.dim}, pos: p}
	case bindUnbound:
		if !b.reported {
			l.d.errorf(p, "%s", b.why)
			b.reported = true
		}
		return operand{bad: true}
	case bindPoison:
		return operand{bad: true}
	}
	return operand{val: b.val, pos: p}
}

func (l *modelLowerer) number(s string, p ir.Pos) operand {
	if !strings.ContainsAny(s, ".eE") {
		i, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			l.d.errorf(p, "integer %s overflows 64 bits", s)
			return operand{bad: true}
		}
		return operand{c: &constant{kind: constInt, i: i}, pos: p}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		l.d.errorf(p, "number %s is out of range", s)
		return operand{bad: true}
	}
	return operand{c: &constant{kind: constFloat, f: f}, pos: p}
}

// binary applies + - * / @ to two operands: integer arithmetic on
// constants, an op on tensors.
func (l *modelLowerer) binary(sym string, p ir.Pos, a, b operand) operand {
	if a.bad || b.bad {
		return operand{bad: true}
	}
	if a.c != nil && b.c != nil {
		return l.arith(sym, p, a, b)
	}
	if a.c != nil || b.c != nil {
		c, t := a.c, b
		if c == nil {
			c, t = b.c, a
		}
		l.d.errorf(p, "cannot apply %s to a tensor (%s) and a number (%s)", sym, t.describe(), c)
		return operand{bad: true}
	}
	kind, ok := ir.LookupInfix(sym)
	if !ok {
		l.d.errorf(p, "operator %s is not defined on tensors (tensors take @, + and *)", sym)
		return operand{bad: true}
	}
	return l.apply(kind, p, []operand{a, b}, nil, nil)
}

func (l *modelLowerer) arith(sym string, p ir.Pos, a, b operand) operand {
	if a.c.kind != constInt || b.c.kind != constInt {
		l.d.errorf(p, "%s %s %s: dim arithmetic takes integers", a.c, sym, b.c)
		return operand{bad: true}
	}
	x, y := a.c.i, b.c.i
	var r int64
	overflow := false
	switch sym {
	case "+":
		r = x + y
		overflow = (y > 0 && r < x) || (y < 0 && r > x)
	case "-":
		r = x - y
		overflow = (y < 0 && r < x) || (y > 0 && r > x)
	case "*":
		r = x * y
		overflow = x != 0 && (r/x != y || (x == -1 && y == math.MinInt64))
	case "/":
		if y == 0 {
			l.d.errorf(p, "division by zero: %d / 0", x)
			return operand{bad: true}
		}
		if x%y != 0 {
			l.d.errorf(p, "%d / %d does not divide evenly (remainder %d)", x, y, x%y)
			return operand{bad: true}
		}
		if x == math.MinInt64 && y == -1 {
			overflow = true
		}
		r = x / y
	default:
		l.d.errorf(p, "operator %s is not defined on integers", sym)
		return operand{bad: true}
	}
	if overflow {
		l.d.errorf(p, "%d %s %d overflows 64 bits", x, sym, y)
		return operand{bad: true}
	}
	return operand{c: &constant{kind: constInt, i: r}, pos: a.pos}
}

func (l *modelLowerer) call(c *Call) operand {
	p := pos(c.Pos)
	kind, ok := ir.LookupOp(c.Name)
	ok = ok && !kind.Info().Internal
	if !ok {
		if b, bound := l.scope[c.Name]; bound && b.kind != bindPoison {
			l.d.errorf(p, "%s is not an op", c.Name)
		} else {
			l.d.errorf(p, "unknown op %s (known: %s)", c.Name, strings.Join(ir.OpNames(), ", "))
		}
		return operand{bad: true}
	}
	var args []operand
	var attrs []ir.Attr
	var attrPos []ir.Pos
	bad := false
	for _, a := range c.Args {
		op := l.expr(a.Value)
		if op.bad {
			bad = true
			continue
		}
		if a.Key == "" {
			if len(attrs) > 0 {
				l.d.errorf(pos(a.Pos), "positional argument after keyword argument")
				bad = true
			}
			if op.c != nil {
				l.d.errorf(op.pos, "operand %d of %s must be a tensor, not %s (attributes are written name=value)", len(args)+1, c.Name, op.c)
				bad = true
			}
			args = append(args, op)
			continue
		}
		if op.val != nil {
			l.d.errorf(op.pos, "attribute %s of %s must be a constant, but %s is a tensor", a.Key, c.Name, op.describe())
			bad = true
			continue
		}
		if v, isNum := op.number(); isNum {
			if msg := attrRange(kind, a.Key, v); msg != "" {
				l.d.errorf(op.pos, "attribute %s of %s %s", a.Key, c.Name, msg)
				bad = true
				continue
			}
		}
		attrs = append(attrs, ir.Attr{Name: a.Key, Val: op.c.attr()})
		attrPos = append(attrPos, pos(a.Pos))
	}
	if bad {
		return operand{bad: true}
	}
	return l.apply(kind, p, args, attrs, attrPos)
}

// attrRange says what is wrong with the value v of attribute name of
// kind, or "": the op table's range of the attribute (ir.AttrSpec.Range;
// integer ones, heads and kv_heads, are checked by the ops' shape rules).
func attrRange(kind ir.OpKind, name string, v float64) string {
	for _, s := range kind.Info().Attrs {
		if s.Name == name && s.Range != nil {
			return s.Range(v)
		}
	}
	return ""
}

func (c *constant) attr() ir.AttrVal {
	switch c.kind {
	case constInt:
		return ir.AttrVal{Type: ir.AttrInt, Int: c.i}
	case constBool:
		return ir.AttrVal{Type: ir.AttrBool, Bool: c.b}
	}
	return ir.AttrVal{Type: ir.AttrFloat, Float: c.f}
}

// apply type-checks an op application and makes its value. Errors point at
// the operand or attribute the op's shape rule blames.
func (l *modelLowerer) apply(kind ir.OpKind, p ir.Pos, args []operand, given []ir.Attr, attrPos []ir.Pos) operand {
	blame := func(e *ir.OpError) ir.Pos {
		if e.Arg >= 0 && e.Arg < len(args) {
			return args[e.Arg].pos
		}
		// The last occurrence: for "given twice" it is the repeat.
		for i := len(given) - 1; i >= 0; i-- {
			if given[i].Name == e.Attr {
				return attrPos[i]
			}
		}
		return p
	}
	attrs, oerr := ir.NormalizeAttrs(kind, given)
	if oerr != nil {
		l.d.errorf(blame(oerr), "%s", oerr.Msg)
		return operand{bad: true}
	}
	vals := make([]*ir.Value, len(args))
	for i, a := range args {
		vals[i] = a.val
	}
	types, oerr := ir.Infer(kind, vals, attrs)
	if oerr != nil {
		l.d.errorf(blame(oerr), "%s", oerr.Msg)
		return operand{bad: true}
	}
	if kind == ir.CrossEntropy && vals[0].DType != ir.F32 {
		// The loss reads fp32 logits, as every framework keeps them:
		// the cast is exact, so the loss is unchanged, but the logits
		// saved for the backward pass are fp32 (NUMERICS.md).
		vals[0] = l.value(ir.Cast, p, []*ir.Value{vals[0]}, []ir.Attr{ir.IntAttr("dtype", int64(ir.F32))},
			ir.Type{Shape: vals[0].Shape, DType: ir.F32})
	}
	// Source ops have one result.
	if !l.sizeOK(types[0].Shape, p, "result of "+kind.String()) {
		return operand{bad: true}
	}
	v := l.value(kind, p, vals, attrs, types[0])
	return operand{val: v, pos: p, fresh: true}
}

// value makes the activation of one op application, a temporary of the
// statement being lowered.
func (l *modelLowerer) value(kind ir.OpKind, p ir.Pos, args []*ir.Value, attrs []ir.Attr, t ir.Type) *ir.Value {
	l.temps++
	v := &ir.Value{Name: fmt.Sprintf("%s.t%d", l.target, l.temps), Shape: t.Shape, DType: t.DType,
		Role: ir.Activation, Layer: l.layer, Pos: p}
	v.Def = &ir.Op{Kind: kind, Args: args, Attrs: attrs, Results: []*ir.Value{v}, Pos: p}
	l.stmt = append(l.stmt, v)
	return v
}
