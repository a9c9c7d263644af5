package ir

// Parse reads the printed form (see print.go) back into a Graph. It is a
// hand-written line scanner rather than a participle grammar because ir
// imports nothing heavier than gonum, the form is one flat line per item,
// and errors must point at columns of the printed text.
//
// Parse trusts the printed shapes and dtypes: it resolves names and types
// attributes, nothing more, so a test can feed Verify a graph that is wrong
// in exactly one way. The only semantic errors it reports are the ones that
// make a graph impossible to build: an unknown role, dtype or op, an
// operand not defined on an earlier line, a value name used twice.

import (
	"fmt"
	"strconv"
	"strings"
)

// ParseError is a syntax or name-resolution error in printed IR. Pos is in
// the text being parsed, not the model source the IR came from.
type ParseError struct {
	Pos Pos
	Msg string
}

func (e *ParseError) Error() string { return e.Pos.String() + ": " + e.Msg }

// bailout unwinds the parser on the first error (as go/parser does), so
// the grammar code reads straight through instead of checking every call.
type bailout struct{ err *ParseError }

type parser struct {
	filename string
	g        *Graph
	defs     map[string]*Value // by name; Graph.Lookup would rebuild its map per new value
	defLine  map[string]int    // value name -> line of its definition

	// The line being scanned.
	text   string
	lineNo int
	off    int
}

// Parse parses printed IR. filename is used only in error positions; the
// positions stored in the graph come from the text's own header.
func Parse(filename, text string) (g *Graph, err error) {
	p := &parser{filename: filename, g: &Graph{}, defs: map[string]*Value{}, defLine: map[string]int{}}
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(bailout)
			if !ok {
				panic(r) // a parser bug, not bad input: keep the trace
			}
			g, err = nil, b.err
		}
	}()
	p.parse(text)
	return p.g, nil
}

func (p *parser) parse(text string) {
	lines := strings.Split(text, "\n")
	state := 0 // 0: want model, 1: want layers, 2: body
	for i, line := range lines {
		p.text, p.lineNo, p.off = line, i+1, 0
		p.skipSpace()
		if p.atEnd() || p.text[p.off] == '#' {
			continue // blank lines and comments let people annotate dumps
		}
		col := p.off
		kw := p.word("keyword")
		switch {
		case state == 0 && kw != "model":
			p.failAt(col, "missing header: expected \"model NAME\", found %q", kw)
		case state == 0:
			p.model()
			state = 1
		case state == 1 && kw != "layers":
			p.failAt(col, "missing header: expected \"layers N\" after the model line, found %q", kw)
		case state == 1:
			p.g.Layers = p.intWord("layer count", 0)
			state = 2
		case kw == "model" || kw == "layers":
			p.failAt(col, "malformed line: duplicate %s line", kw)
		case kw == "dim":
			p.dim()
		default:
			role, ok := ParseRole(kw)
			if !ok {
				p.failAt(col, "unknown role %q", kw)
			}
			p.value(role)
		}
		p.end()
	}
	if state < 2 {
		p.text, p.lineNo, p.off = "", len(lines), 0
		if state == 0 {
			p.failAt(0, "missing header: no model line")
		}
		p.failAt(0, "missing header: no layers line")
	}
}

// model parses the rest of `model NAME [file "FILE"] [@L:C]`.
func (p *parser) model() {
	p.g.Name = p.word("model name")
	p.skipSpace()
	if p.peekWord() == "file" {
		p.word("file")
		p.skipSpace()
		p.g.Pos.File = p.str()
	}
	p.skipSpace()
	if p.peek() == '@' {
		file, at := p.g.Pos.File, p.off
		p.g.Pos = p.pos()
		if p.g.Pos.File != file {
			p.failAt(at, "malformed line: the model's position is in its own file")
		}
	}
}

// dim parses the rest of `dim NAME = VALUE [@POS]`. Duplicate dim names
// are left for Verify: nothing here refers to a dim by name.
func (p *parser) dim() {
	d := Dim{Name: p.word("dim name")}
	p.expect('=')
	d.Value = p.int64Word("dim value")
	d.Pos = p.optPos()
	p.g.Dims = append(p.g.Dims, d)
}

// value parses the rest of a value line: `ROLE NAME : DTYPE[SHAPE]
// [init I] [updates STATE]`, then for an op's further results
// `, ROLE NAME : DTYPE[SHAPE] [updates STATE]` each, then `[= OP(...)]
// [layer N] [@POS]`; the clauses are optional but must come in that order.
func (p *parser) value(role Role) {
	heads := []head{p.head(role)}
	for p.skipSpace(); p.peek() == ','; p.skipSpace() {
		p.off++
		p.skipSpace()
		col := p.off
		kw := p.word("role")
		role, ok := ParseRole(kw)
		if !ok {
			p.failAt(col, "unknown role %q", kw)
		}
		h := p.head(role)
		for _, prev := range heads {
			if prev.v.Name == h.v.Name {
				p.failAt(col, "redefined name %q (first defined on line %d)", h.v.Name, p.lineNo)
			}
		}
		heads = append(heads, h)
	}
	var op *Op
	if p.peek() == '=' {
		p.off++
		op = p.op()
	}
	for _, h := range heads {
		switch {
		case op == nil && h.noInit >= 0:
			p.failAt(h.noInit, "malformed line: %s %s needs an init clause", h.v.Role, h.v.Name)
		case op != nil && h.initAt >= 0:
			p.failAt(h.initAt, "malformed line: init on %s %s, which %s computes", h.v.Role, h.v.Name, op.Kind)
		}
	}
	if op == nil && len(heads) > 1 {
		p.failf("malformed line: %d values on one line need the op computing them", len(heads))
	}
	p.skipSpace()
	layer := -1
	if p.peekWord() == "layer" {
		p.word("layer")
		layer = p.intWord("layer", 0)
	}
	pos := p.optPos()
	if op != nil {
		op.Pos = pos
	}
	for _, h := range heads {
		v := h.v
		v.Layer, v.Pos = layer, pos
		if op != nil {
			v.Def = op
			op.Results = append(op.Results, v)
		}
		p.defs[v.Name] = v
		p.defLine[v.Name] = p.lineNo
		p.g.Values = append(p.g.Values, v)
	}
}

// head is one value of a line, as far as its head says.
type head struct {
	v      *Value
	noInit int // where a missing init clause was due; -1 if given, or not a state
	initAt int // where the init clause is, -1 if none
}

// head parses `NAME : DTYPE[SHAPE] [init I] [updates STATE]` of a value
// of role.
func (p *parser) head(role Role) (h head) {
	p.skipSpace()
	nameCol := p.off
	v := &Value{Name: p.word("value name"), Role: role, Layer: -1}
	if first, ok := p.defLine[v.Name]; ok {
		p.failAt(nameCol, "redefined name %q (first defined on line %d)", v.Name, first)
	}
	p.expect(':')
	p.skipSpace()
	col := p.off
	dt := p.word("dtype")
	var ok bool
	if v.DType, ok = ParseDType(dt); !ok {
		p.failAt(col, "unknown dtype %q", dt)
	}
	v.Shape = p.shape()
	h = head{v: v, noInit: -1, initAt: -1}
	p.skipSpace()
	isState := role == Param || role == OptState
	switch {
	case p.peekWord() == "init" && isState:
		h.initAt = p.off
		p.word("init")
		v.Init = p.init()
	case p.peekWord() == "init":
		p.failAt(p.off, "malformed line: init on %s %s (only params and optimizer states have one)", role, v.Name)
	case isState:
		h.noInit = p.off
	}
	p.skipSpace()
	if p.peekWord() == "updates" {
		p.word("updates")
		p.skipSpace()
		col := p.off
		name := p.word("updated state")
		target, ok := p.defs[name]
		if !ok {
			p.failAt(col, "undefined operand %q (updated state)", name)
		}
		v.Updates = target
	}
	return h
}

// shape parses `[D,D,...]`; any int64 is accepted so Verify can be tested
// on dims < 1.
func (p *parser) shape() Shape {
	p.expect('[')
	s := Shape{}
	p.skipSpace()
	if p.peek() == ']' {
		p.off++
		return s
	}
	for {
		s = append(s, p.int64Word("dimension"))
		p.skipSpace()
		if p.peek() == ']' {
			p.off++
			return s
		}
		p.expect(',')
	}
}

func (p *parser) init() Init {
	p.skipSpace()
	col := p.off
	switch w := p.word("init"); w {
	case "ones":
		return Init{Kind: InitOnes}
	case "zeros":
		return Init{Kind: InitZeros}
	case "normal":
		p.expect('(')
		std := p.floatWord("std")
		p.expect(')')
		return Init{Kind: InitNormal, Std: std}
	case "copy":
		p.expect('(')
		p.skipSpace()
		of := p.word("copied param")
		p.expect(')')
		return Init{Kind: InitCopy, Of: of}
	default:
		p.failAt(col, "unknown init %q", w)
	}
	panic("unreachable")
}

// op parses `OP(arg, ..., name=val, ...)`: operands first, then attrs.
func (p *parser) op() *Op {
	p.skipSpace()
	col := p.off
	name := p.word("op name")
	kind, ok := LookupOp(name)
	if !ok {
		p.failAt(col, "unknown op %q", name)
	}
	op := &Op{Kind: kind}
	p.expect('(')
	p.skipSpace()
	if p.peek() == ')' {
		p.off++
		return op
	}
	for {
		p.skipSpace()
		col := p.off
		w := p.word("operand or attribute")
		p.skipSpace()
		if p.peek() == '=' {
			p.off++
			op.Attrs = append(op.Attrs, Attr{Name: w, Val: p.attrVal(kind, w)})
		} else {
			if len(op.Attrs) > 0 {
				p.failAt(col, "malformed line: operand %s after attributes", w)
			}
			a, ok := p.defs[w]
			if !ok {
				p.failAt(col, "undefined operand %q", w)
			}
			op.Args = append(op.Args, a)
		}
		p.skipSpace()
		if p.peek() == ')' {
			p.off++
			return op
		}
		p.expect(',')
	}
}

// attrVal types an attribute by its spelling and the op table: true/false
// are bools; an integer literal is an int unless the spec says number (so
// eps=1 is the float 1, as NormalizeAttrs would make it); anything else is
// a float. A spec mismatch is not an error here: Verify reports it with
// the op's own message.
func (p *parser) attrVal(kind OpKind, name string) AttrVal {
	p.skipSpace()
	col := p.off
	w := p.word("attribute value")
	if w == "true" || w == "false" {
		return AttrVal{Type: AttrBool, Bool: w == "true"}
	}
	want := AttrInt // unknown attrs keep what they look like
	for _, s := range kind.Info().Attrs {
		if s.Name == name {
			want = s.Type
		}
	}
	if isIntLiteral(w) && want != AttrFloat {
		n, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			p.failAt(col, "bad number %q", w)
		}
		return AttrVal{Type: AttrInt, Int: n}
	}
	f, err := strconv.ParseFloat(w, 64)
	if err != nil {
		p.failAt(col, "bad number %q", w)
	}
	return AttrVal{Type: AttrFloat, Float: f}
}

func isIntLiteral(s string) bool {
	if s != "" && (s[0] == '-' || s[0] == '+') {
		s = s[1:]
	}
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (p *parser) optPos() Pos {
	p.skipSpace()
	if p.peek() != '@' {
		return Pos{}
	}
	return p.pos()
}

// pos parses `@L:C` or `@"FILE":L:C`; a bare position is in the model's
// file.
func (p *parser) pos() Pos {
	p.expect('@')
	pos := Pos{File: p.g.Pos.File}
	if p.peek() == '"' {
		pos.File = p.str()
		p.expect(':')
	}
	pos.Line = p.intWord("line", 1)
	p.expect(':')
	pos.Col = p.intWord("column", 0)
	return pos
}

// str scans a Go-quoted string (the printer writes strconv.Quote).
func (p *parser) str() string {
	p.skipSpace()
	if p.peek() != '"' {
		p.failf("malformed line: expected quoted string, found %s", p.found())
	}
	start := p.off
	i := start + 1
	for ; i < len(p.text) && p.text[i] != '"'; i++ {
		if p.text[i] == '\\' {
			i++
		}
	}
	if i >= len(p.text) {
		p.failf("malformed line: unterminated string")
	}
	s, err := strconv.Unquote(p.text[start : i+1])
	if err != nil {
		p.failf("malformed line: bad string %s", p.text[start:i+1])
	}
	p.off = i + 1
	return s
}

// isNameChar reports whether c can be part of a word: names, keywords and
// numbers alike. Everything but spaces, controls and the form's
// punctuation, so dotted names (layers.0.wq), negative numbers and 1e-05
// are single words.
func isNameChar(c byte) bool {
	if c <= ' ' || c == 0x7f {
		return false
	}
	return !strings.ContainsRune(`()[],:=@"`, rune(c))
}

// word scans one word after optional spaces; what names the expectation
// for the error message.
func (p *parser) word(what string) string {
	p.skipSpace()
	start := p.off
	for p.off < len(p.text) && isNameChar(p.text[p.off]) {
		p.off++
	}
	if p.off == start {
		p.failf("malformed line: expected %s, found %s", what, p.found())
	}
	return p.text[start:p.off]
}

// peekWord returns the word at the cursor without consuming it.
func (p *parser) peekWord() string {
	i := p.off
	for i < len(p.text) && isNameChar(p.text[i]) {
		i++
	}
	return p.text[p.off:i]
}

func (p *parser) int64Word(what string) int64 {
	p.skipSpace()
	col := p.off
	w := p.word(what)
	n, err := strconv.ParseInt(w, 10, 64)
	if err != nil {
		p.failAt(col, "bad number %q (want an integer %s)", w, what)
	}
	return n
}

// intWord scans an int that must be at least min.
func (p *parser) intWord(what string, min int) int {
	p.skipSpace()
	col := p.off
	w := p.word(what)
	n, err := strconv.Atoi(w)
	if err != nil {
		p.failAt(col, "bad number %q (want an integer %s)", w, what)
	}
	if n < min {
		p.failAt(col, "bad number %q (%s must be at least %d)", w, what, min)
	}
	return n
}

func (p *parser) floatWord(what string) float64 {
	p.skipSpace()
	col := p.off
	w := p.word(what)
	f, err := strconv.ParseFloat(w, 64)
	if err != nil {
		p.failAt(col, "bad number %q (want a number %s)", w, what)
	}
	return f
}

func (p *parser) expect(c byte) {
	p.skipSpace()
	if p.peek() != c {
		p.failf("malformed line: expected %q, found %s", string(c), p.found())
	}
	p.off++
}

func (p *parser) end() {
	p.skipSpace()
	if !p.atEnd() {
		p.failf("malformed line: unexpected %s", p.found())
	}
}

func (p *parser) skipSpace() {
	for p.off < len(p.text) && (p.text[p.off] == ' ' || p.text[p.off] == '\t' || p.text[p.off] == '\r') {
		p.off++
	}
}

func (p *parser) atEnd() bool { return p.off >= len(p.text) }

func (p *parser) peek() byte {
	if p.atEnd() {
		return 0
	}
	return p.text[p.off]
}

// found describes what is at the cursor, for "expected X, found Y".
func (p *parser) found() string {
	if p.atEnd() {
		return "end of line"
	}
	if w := p.peekWord(); w != "" {
		return strconv.Quote(w)
	}
	return strconv.Quote(p.text[p.off : p.off+1])
}

func (p *parser) failf(format string, args ...any) {
	p.failAt(p.off, format, args...)
}

// failAt reports an error at byte offset off of the current line.
func (p *parser) failAt(off int, format string, args ...any) {
	panic(bailout{&ParseError{
		Pos: Pos{File: p.filename, Line: p.lineNo, Col: off + 1},
		Msg: fmt.Sprintf(format, args...),
	}})
}
