package ir

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// -update (or UPDATE_GOLDEN=1) rewrites each archive's want with the full
// message the code produces now; review the diff like code.
var update = flag.Bool("update", false, "rewrite want sections of testdata archives")

func updating() bool { return *update || os.Getenv("UPDATE_GOLDEN") == "1" }

// irCase is one txtar archive: input.ir and want ("ok" or an error
// substring).
type irCase struct {
	path  string
	ar    *txtar.Archive
	input string
	want  string
}

func loadCases(t testing.TB, dir string) []irCase {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", dir, "*.txtar"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cases in testdata/%s: %v", dir, err)
	}
	var cases []irCase
	for _, path := range paths {
		ar, err := txtar.ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		c := irCase{path: path, ar: ar, want: "\x00"}
		input := false
		for _, f := range ar.Files {
			switch f.Name {
			case "input.ir":
				c.input, input = string(f.Data), true
			case "want":
				c.want = strings.TrimSpace(string(f.Data))
			}
		}
		if !input || c.want == "\x00" {
			t.Fatalf("%s: needs input.ir and want sections", path)
		}
		cases = append(cases, c)
	}
	return cases
}

// check compares a result (nil error means "ok") with the case's want, or
// records it under -update.
func (c irCase) check(t *testing.T, err error) {
	t.Helper()
	got := "ok"
	if err != nil {
		got = err.Error()
	}
	if updating() {
		for i := range c.ar.Files {
			if c.ar.Files[i].Name == "want" {
				c.ar.Files[i].Data = []byte(got + "\n")
			}
		}
		if err := os.WriteFile(c.path, txtar.Format(c.ar), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	switch {
	case c.want == "ok" && err != nil:
		t.Errorf("want ok, got %v", err)
	case c.want != "ok" && err == nil:
		t.Errorf("want error containing %q, got ok", c.want)
	case c.want != "ok" && !strings.Contains(got, c.want):
		t.Errorf("error mismatch:\n got: %s\nwant: %s", got, c.want)
	}
}

// roundTrip requires inputs to be canonical: they double as printer
// goldens, written by hand in the documented format.
func roundTrip(t *testing.T, g *Graph, input string) {
	t.Helper()
	if got := Print(g); got != input {
		t.Errorf("Print(Parse(x)) != x\n--- got ---\n%s--- want ---\n%s", got, input)
	}
}

func TestParse(t *testing.T) {
	for _, c := range loadCases(t, "parse") {
		t.Run(strings.TrimSuffix(filepath.Base(c.path), ".txtar"), func(t *testing.T) {
			g, err := Parse("input.ir", c.input)
			c.check(t, err)
			if err == nil {
				roundTrip(t, g, c.input)
			}
		})
	}
}

func TestVerify(t *testing.T) {
	for _, c := range loadCases(t, "verify") {
		t.Run(strings.TrimSuffix(filepath.Base(c.path), ".txtar"), func(t *testing.T) {
			g, err := Parse("input.ir", c.input)
			if err != nil {
				t.Fatalf("verify inputs must parse: %v", err)
			}
			roundTrip(t, g, c.input)
			c.check(t, Verify(g))
		})
	}
}

// parseCase parses a testdata archive's input for tests that go on to
// break the graph in ways the printed form cannot express.
func parseCase(t *testing.T, path string) *Graph {
	t.Helper()
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range ar.Files {
		if f.Name == "input.ir" {
			g, err := Parse(path, string(f.Data))
			if err != nil {
				t.Fatal(err)
			}
			return g
		}
	}
	t.Fatalf("%s: no input.ir", path)
	return nil
}

// TestVerifyStructural covers the invariants Parse itself guarantees
// (names resolve to earlier lines, results point back), so text cannot break
// them; a buggy pass can, so Verify must still catch each.
func TestVerifyStructural(t *testing.T) {
	// Values of testdata/verify/base_ok.txtar by index: 0 tokens, 1 targets,
	// 2 emb, 3 x, 4 layers.0.norm, 5 layers.0.h, 6 lm_head, 7 logits, 8 loss.
	tests := []struct {
		name   string
		mutate func(g *Graph)
		want   string
	}{
		{"duplicate name", func(g *Graph) { g.Values[6].Name = "emb" },
			"emb (t.amsp:9:3): duplicate name emb (first defined at t.amsp:5:3)"},
		{"empty name", func(g *Graph) { g.Values[1].Name = "" }, "value #1 (t.amsp:4:3): empty name"},
		{"unprintable name", func(g *Graph) { g.Values[1].Name = "a b" }, `name "a b" is not a printable name`},
		{"invalid role", func(g *Graph) { g.Values[1].Role = 0 }, "targets (t.amsp:4:3): invalid role invalid"},
		{"invalid dtype", func(g *Graph) { g.Values[1].DType = 9 }, "invalid dtype dtype(9)"},
		{"result not value", func(g *Graph) { g.Values[3].Def.Results = []*Value{g.Values[7]} },
			"x (t.amsp:6:3): defining op's results (logits) do not include the value"},
		{"nil operand", func(g *Graph) { g.Values[3].Def.Args[1] = nil }, "operand 1 of embed is nil"},
		{"foreign operand", func(g *Graph) { g.Values[3].Def.Args[1] = &Value{Name: "ghost"} },
			"operand ghost of embed is not in the graph"},
		{"reads itself", func(g *Graph) { g.Values[3].Def.Args[0] = g.Values[3] }, "x (t.amsp:6:3): x reads itself"},
		{"defined later", func(g *Graph) {
			g.Values[2], g.Values[3] = g.Values[3], g.Values[2] // x before emb
		}, "x (t.amsp:6:3): operand emb is defined after its use (at t.amsp:5:3)"},
		{"cycle", func(g *Graph) { g.Values[3].Def.Args[1] = g.Values[7] }, // x reads logits
			"x (t.amsp:6:3): operand logits is on a cycle: x, layers.0.h, logits"},
		{"invalid op", func(g *Graph) { g.Values[3].Def.Kind = 200 }, "invalid op kind op(200)"},
		{"nil value", func(g *Graph) { g.Values[4] = nil }, "value #4 (-): nil value"},
		{"negative layers", func(g *Graph) { g.Layers = -1 }, "model t (t.amsp:1:1): negative layer count -1"},
		{"invalid init", func(g *Graph) { g.Values[2].Init.Kind = 7 }, "emb (t.amsp:5:3): invalid init kind 7"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := parseCase(t, "testdata/verify/base_ok.txtar")
			if err := Verify(g); err != nil {
				t.Fatalf("base graph: %v", err)
			}
			tt.mutate(g)
			Print(g) // must not panic on a broken graph either
			err := Verify(g)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want %q", err, tt.want)
			}
			if _, ok := err.(*VerifyError); !ok {
				t.Errorf("error is %T, want *VerifyError", err)
			}
		})
	}
}

// TestVerifyMultiResult breaks the wiring of a multi-result op in the
// ways a buggy pass could.
func TestVerifyMultiResult(t *testing.T) {
	// Values of testdata/verify/multi_result_ok.txtar by index: 11 d.x and
	// 12 grad.layers.0.norm are rmsnorm_grad's results.
	tests := []struct {
		name   string
		mutate func(g *Graph)
		want   string
	}{
		{"apart", func(g *Graph) { g.Values[11], g.Values[12] = g.Values[12], g.Values[11] },
			"grad.layers.0.norm (t.amsp:8:5): result 1 of rmsnorm_grad does not follow the op's result 0 directly"},
		{"other op", func(g *Graph) { g.Values[12].Def = g.Values[7].Def },
			"grad.layers.0.norm (t.amsp:8:5): result 1 of rmsnorm_grad is defined by another op"},
		{"layer", func(g *Graph) { g.Values[12].Layer = -1 },
			"grad.layers.0.norm (t.amsp:8:5): results of one rmsnorm_grad differ in layer or position (0 at t.amsp:8:5, -1 at t.amsp:8:5)"},
		{"reads own result", func(g *Graph) { g.Values[11].Def.Args[2] = g.Values[12] },
			"d.x (t.amsp:8:5): rmsnorm_grad reads its own result grad.layers.0.norm"},
		{"nil result", func(g *Graph) { g.Values[11].Def.Results[1] = nil }, "d.x (t.amsp:8:5): result 1 of rmsnorm_grad is nil"},
		{"missing result", func(g *Graph) { g.Values = append(g.Values[:12], g.Values[13:]...) },
			"result 1 of rmsnorm_grad does not follow the op's result 0 directly"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := parseCase(t, "testdata/verify/multi_result_ok.txtar")
			if err := Verify(g); err != nil {
				t.Fatalf("base graph: %v", err)
			}
			// 12 computed values, two of the ops with 2 and 3 results.
			if ops := len(g.Ops()); ops != 9 {
				t.Fatalf("%d ops, want 9: Ops must list each op once", ops)
			}
			tt.mutate(g)
			Print(g) // must not panic on a broken graph either
			err := Verify(g)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Verify = %v, want %q", err, tt.want)
			}
		})
	}
}

// TestNewOp: the constructor passes use normalises attributes and types
// every result; a misspelt or missing attribute is an error, never a
// default.
func TestNewOp(t *testing.T) {
	g := parseCase(t, "testdata/verify/multi_result_ok.txtar")
	x, w, dy := g.Lookup("x"), g.Lookup("layers.0.norm"), g.Lookup("d.h")
	op, err := NewOp(RMSNormGrad, []*Value{x, w, dy}, nil, x.Pos)
	if err != nil {
		t.Fatal(err)
	}
	if len(op.Results) != 2 || op.Out() != op.Results[0] || op.Results[1].Def != op ||
		!op.Results[1].Shape.Equal(Shape{8}) || len(op.Attrs) != 1 || op.Attrs[0].Val.Float != 1e-5 {
		t.Errorf("rmsnorm_grad: results %v, attrs %v", op.Results, op.Attrs)
	}
	for _, c := range []struct {
		attrs []Attr
		want  string
	}{
		{[]Attr{FloatAttr("epsilon", 1e-6)}, `rmsnorm_grad: rmsnorm_grad has no attribute "epsilon" (it takes eps)`},
		{[]Attr{IntAttr("eps", 1), FloatAttr("eps", 2)}, `rmsnorm_grad: attribute "eps" given twice`},
		{[]Attr{BoolAttr("eps", true)}, "rmsnorm_grad: attribute eps of rmsnorm_grad must be a number, not true"},
	} {
		if _, err := NewOp(RMSNormGrad, []*Value{x, w, dy}, c.attrs, x.Pos); err == nil || err.Error() != c.want {
			t.Errorf("NewOp(%v) = %v, want %q", c.attrs, err, c.want)
		}
	}
	if _, err := NewOp(AdamWStep, []*Value{x, x, x, x}, []Attr{FloatAttr("lr", 1)}, x.Pos); err == nil ||
		err.Error() != "adamw: adamw needs attribute beta1=" {
		t.Errorf("adamw without beta1: %v", err)
	}
	if _, err := NewOp(RMSNormGrad, []*Value{x, w}, nil, x.Pos); err == nil || !strings.Contains(err.Error(), "takes 3 operands, got 2") {
		t.Errorf("arity: %v", err)
	}
}

// TestPrintPositions covers header and position forms the testdata cannot
// show through Parse: a graph with no file at all, and a value whose file
// differs from an empty model file.
func TestPrintPositions(t *testing.T) {
	in := &Value{Name: "a", Role: Input, DType: I32, Shape: Shape{3}, Layer: -1, Pos: Pos{File: "x.amsp", Line: 2, Col: 1}}
	p := &Value{Name: "b", Role: Param, DType: F32, Shape: Shape{}, Layer: 0, Pos: Pos{Line: 3, Col: 4}}
	g := &Graph{Name: "m", Layers: 1, Dims: []Dim{{Name: "d", Value: 3}}, Values: []*Value{in, p}}
	want := `model m
layers 1
dim d = 3
input a : i32[3] @"x.amsp":2:1
param b : f32[] init normal(0) layer 0 @3:4
`
	if got := Print(g); got != want {
		t.Fatalf("got:\n%swant:\n%s", got, want)
	}
	g2, err := Parse("m.ir", want)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Values[0].Pos != in.Pos || g2.Values[1].Pos != p.Pos || g2.Pos.File != "" {
		t.Errorf("positions not restored: %+v %+v", g2.Values[0].Pos, g2.Values[1].Pos)
	}
	var b strings.Builder
	if err := Fprint(&b, g); err != nil || b.String() != want {
		t.Errorf("Fprint = %q, %v", b.String(), err)
	}
}

// TestParseAttrTypes pins how untyped attribute spellings get their type,
// which decides whether Verify accepts them.
func TestParseAttrTypes(t *testing.T) {
	g, err := Parse("a.ir", `model a
layers 0
input x : f32[1,2,4]
act y : f32[1,2,4] = rope(x, heads=2, theta=500, extra=7, other=0.5, flag=false)
`)
	if err != nil {
		t.Fatal(err)
	}
	op := g.Values[1].Def
	if op.Out() != g.Values[1] || op.Args[0] != g.Values[0] || op.Pos != g.Values[1].Pos {
		t.Errorf("op not wired: %+v", op)
	}
	want := []AttrVal{
		{Type: AttrInt, Int: 2},       // spec: integer
		{Type: AttrFloat, Float: 500}, // spec: number, though spelled as an integer
		{Type: AttrInt, Int: 7},       // no spec: looks like an integer
		{Type: AttrFloat, Float: 0.5}, // no spec: looks like a number
		{Type: AttrBool},
	}
	for i, w := range want {
		if op.Attrs[i].Val != w {
			t.Errorf("attr %s = %+v, want %+v", op.Attrs[i].Name, op.Attrs[i].Val, w)
		}
	}
}

// FuzzParse: no input panics the parser (or the verifier on what it
// returns), and whatever parses prints to a fixpoint.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"parse", "verify"} {
		for _, c := range loadCases(f, dir) {
			f.Add(c.input)
		}
	}
	f.Fuzz(func(t *testing.T, text string) {
		g, err := Parse("fuzz.ir", text)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.ir:") {
				t.Fatalf("error without position: %v", err)
			}
			return
		}
		Verify(g)
		p1 := Print(g)
		g2, err := Parse("p1.ir", p1)
		if err != nil {
			t.Fatalf("printed form does not parse: %v\n%s", err, p1)
		}
		if p2 := Print(g2); p2 != p1 {
			t.Fatalf("no fixpoint:\n--- first ---\n%s--- second ---\n%s", p1, p2)
		}
	})
}
