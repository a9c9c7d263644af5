package solver

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

var inf = math.Inf(1)

// prob is shorthand for test problems; rows are dense for readability.
func prob(obj, lo, hi []float64, integer []bool, rows ...Row) *Problem {
	return &Problem{Obj: obj, Lower: lo, Upper: hi, Integer: integer, Rows: rows}
}

func dense(coef []float64, s Sense, rhs float64) Row {
	r := Row{Sense: s, RHS: rhs}
	for j, a := range coef {
		if a != 0 {
			r.Idx = append(r.Idx, j)
			r.Coef = append(r.Coef, a)
		}
	}
	return r
}

func fill[T any](n int, v T) []T {
	s := make([]T, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// feasible reports whether x satisfies p within tol, integrality included.
func feasible(p *Problem, x []float64, tol float64) bool {
	for j, v := range x {
		if v < p.Lower[j]-tol || v > p.Upper[j]+tol {
			return false
		}
		if p.Integer[j] && math.Abs(v-math.Round(v)) > tol {
			return false
		}
	}
	for _, r := range p.Rows {
		s := 0.0
		for k, j := range r.Idx {
			s += r.Coef[k] * x[j]
		}
		switch {
		case r.Sense == LE && s > r.RHS+tol,
			r.Sense == GE && s < r.RHS-tol,
			r.Sense == EQ && math.Abs(s-r.RHS) > tol:
			return false
		}
	}
	return true
}

func dot(a, b []float64) float64 {
	s := 0.0
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

// engines runs a test with the default tableau and with gonum's simplex.
var engines = []struct {
	name string
	BranchAndBound
}{{"tableau", BranchAndBound{}}, {"gonum", BranchAndBound{gonumLP: true}}}

func TestMain(m *testing.M) {
	code := m.Run()
	if n := fallbacks.Load(); n > 0 && code == 0 {
		println("solver: the tableau fell back to gonum", n, "times")
		code = 1
	}
	os.Exit(code)
}

func TestHandCases(t *testing.T) {
	bin := func(n int) ([]float64, []float64, []bool) {
		return fill(n, 0.0), fill(n, 1.0), fill(n, true)
	}
	lo4, hi4, int4 := bin(4)
	cases := []struct {
		name   string
		p      *Problem
		status Status
		obj    float64
		x      []float64 // nil: only the objective is checked
	}{
		{
			// Vertices (0,0) (2,0) (1.6,1.2) (0,2): the third wins.
			name: "lp",
			p: prob([]float64{-1, -1}, []float64{0, 0}, []float64{inf, inf}, []bool{false, false},
				dense([]float64{1, 2}, LE, 4), dense([]float64{3, 1}, LE, 6)),
			status: Optimal, obj: -2.8, x: []float64{1.6, 1.2},
		},
		{
			// Weights 4,6,3,5 under 10: {a,b} (value 23) beats {b,c}
			// (20), {a,d} (18) and {a,c} (17).
			name: "knapsack",
			p: prob([]float64{-10, -13, -7, -8}, lo4, hi4, int4,
				dense([]float64{4, 6, 3, 5}, LE, 10)),
			status: Optimal, obj: -23, x: []float64{1, 1, 0, 0},
		},
		{
			// LP optimum (3, 1.5) = 21; the best integer point is (4, 0).
			name: "general-integers",
			p: prob([]float64{-5, -4}, []float64{0, 0}, []float64{10, 10}, []bool{true, true},
				dense([]float64{6, 4}, LE, 24), dense([]float64{1, 2}, LE, 6)),
			status: Optimal, obj: -20, x: []float64{4, 0},
		},
		{
			// y + z >= 1 and the sum is 2: the cheapest split is x=1, y=1.
			name: "equality",
			p: prob([]float64{1, 2, 3}, []float64{0, 0, 0}, []float64{inf, inf, inf}, []bool{false, false, false},
				dense([]float64{1, 1, 1}, EQ, 2), dense([]float64{0, 1, 1}, GE, 1)),
			status: Optimal, obj: 3, x: []float64{1, 1, 0},
		},
		{
			name: "equality-integer",
			p: prob([]float64{1, 2, 3}, []float64{0, 0, 0}, []float64{5, 5, 5}, []bool{true, true, true},
				dense([]float64{2, 2, 2}, EQ, 4), dense([]float64{0, 1, 1}, GE, 1)),
			status: Optimal, obj: 3, x: []float64{1, 1, 0},
		},
		{
			// x + y >= -6.5 with integers means x + y >= -6.
			name: "negative-lower",
			p: prob([]float64{1, 1}, []float64{-5, -3}, []float64{5, 2}, []bool{true, true},
				dense([]float64{1, 1}, GE, -6.5), dense([]float64{1, -1}, LE, 1)),
			status: Optimal, obj: -6,
		},
		{
			name: "negative-lower-continuous",
			p: prob([]float64{2, -1}, []float64{-4, -2}, []float64{-1, 3}, []bool{false, false},
				dense([]float64{1, 1}, LE, 0)),
			status: Optimal, obj: -11, x: []float64{-4, 3},
		},
		{
			name: "free-column",
			p: prob([]float64{1}, []float64{math.Inf(-1)}, []float64{inf}, []bool{false},
				dense([]float64{1}, GE, -7.5)),
			status: Optimal, obj: -7.5, x: []float64{-7.5},
		},
		{
			name: "free-integer-column",
			p: prob([]float64{1}, []float64{math.Inf(-1)}, []float64{inf}, []bool{true},
				dense([]float64{2}, GE, -7.5)),
			status: Optimal, obj: -3, x: []float64{-3},
		},
		{
			// Lower -Inf with a finite upper bound is mirrored internally.
			name: "mirrored-column",
			p: prob([]float64{1, 0}, []float64{math.Inf(-1), 0}, []float64{3, 1}, []bool{true, false},
				dense([]float64{1, 1}, GE, -2.5)),
			status: Optimal, obj: -3,
		},
		{
			name: "mixed-integer",
			p: prob([]float64{-1, -2}, []float64{0, 0}, []float64{inf, inf}, []bool{true, false},
				dense([]float64{2, 2}, LE, 5), dense([]float64{1, 0}, GE, 1)),
			// y = (5 - 2x)/2 for any x; objective -x - 5 + 2x = x - 5 so x = 1.
			status: Optimal, obj: -4, x: []float64{1, 1.5},
		},
		{
			name:   "no-rows",
			p:      prob([]float64{-1, 1}, []float64{0, 1}, []float64{3, 2}, []bool{false, true}),
			status: Optimal, obj: -2, x: []float64{3, 1},
		},
		{
			name: "fixed-column",
			p: prob([]float64{1, 1}, []float64{2, 0}, []float64{2, 5}, []bool{false, true},
				dense([]float64{1, 1}, GE, 3.5)),
			status: Optimal, obj: 4, x: []float64{2, 2},
		},
		{
			name: "duplicate-indices",
			p: prob([]float64{-1}, []float64{0}, []float64{inf}, []bool{false},
				Row{Idx: []int{0, 0}, Coef: []float64{1, 2}, Sense: LE, RHS: 6}),
			status: Optimal, obj: -2, x: []float64{2},
		},
		{
			// Three copies of one equality (gonum needs full row rank).
			name: "dependent-equalities",
			p: prob([]float64{1, 2}, []float64{0, 0}, []float64{inf, inf}, []bool{false, false},
				dense([]float64{1, 1}, EQ, 1), dense([]float64{2, 2}, EQ, 2), dense([]float64{1, 1}, EQ, 1)),
			status: Optimal, obj: 1, x: []float64{1, 0},
		},
		{
			name: "inconsistent-equalities",
			p: prob([]float64{1, 2}, []float64{0, 0}, []float64{inf, inf}, []bool{false, false},
				dense([]float64{1, 1}, EQ, 1), dense([]float64{2, 2}, EQ, 3)),
			status: Infeasible,
		},
		{
			// Beale's example, which cycles under the textbook rules.
			name: "beale-cycling",
			p: prob([]float64{-0.75, 20, -0.5, 6}, []float64{0, 0, 0, 0}, []float64{inf, inf, inf, inf}, []bool{false, false, false, false},
				dense([]float64{0.25, -8, -1, 9}, LE, 0), dense([]float64{0.5, -12, -0.5, 3}, LE, 0), dense([]float64{0, 0, 1, 0}, LE, 1)),
			status: Optimal, obj: -1.25, x: []float64{1, 0, 1, 0},
		},
		{
			name: "infeasible-binary",
			p: prob([]float64{1, 1}, []float64{0, 0}, []float64{1, 1}, []bool{true, true},
				dense([]float64{1, 1}, GE, 3)),
			status: Infeasible,
		},
		{
			name: "infeasible-lp",
			p: prob([]float64{1, 1}, []float64{0, 0}, []float64{inf, inf}, []bool{false, false},
				dense([]float64{1, 1}, LE, 1), dense([]float64{1, -1}, GE, 2), dense([]float64{0, 1}, GE, 0.5)),
			status: Infeasible,
		},
		{
			// LP-feasible (x = 0.5) but no integer point.
			name: "infeasible-integer",
			p: prob([]float64{0}, []float64{0}, []float64{5}, []bool{true},
				dense([]float64{2}, EQ, 1)),
			status: Infeasible,
		},
		{
			name:   "integer-bounds-empty",
			p:      prob([]float64{0}, []float64{0.2}, []float64{0.8}, []bool{true}),
			status: Infeasible,
		},
		{
			name: "unbounded",
			p: prob([]float64{-1, 0}, []float64{0, 0}, []float64{inf, inf}, []bool{false, false},
				dense([]float64{1, -1}, LE, 1)),
			status: Unbounded,
		},
		{
			name:   "unbounded-no-rows",
			p:      prob([]float64{-1}, []float64{0}, []float64{inf}, []bool{true}),
			status: Unbounded,
		},
	}
	for _, e := range engines {
		for _, tc := range cases {
			t.Run(e.name+"/"+tc.name, func(t *testing.T) {
				s, err := e.Solve(tc.p)
				if err != nil {
					t.Fatal(err)
				}
				if s.Status != tc.status {
					t.Fatalf("status %v, want %v (x=%v obj=%v)", s.Status, tc.status, s.X, s.Obj)
				}
				if tc.status != Optimal {
					return
				}
				if math.Abs(s.Obj-tc.obj) > 1e-6 {
					t.Errorf("obj %v, want %v (x=%v)", s.Obj, tc.obj, s.X)
				}
				if !feasible(tc.p, s.X, 1e-6) {
					t.Errorf("x=%v infeasible", s.X)
				}
				if math.Abs(dot(tc.p.Obj, s.X)-s.Obj) > 1e-6 {
					t.Errorf("Obj %v does not match Obj·X = %v", s.Obj, dot(tc.p.Obj, s.X))
				}
				for k, v := range tc.x {
					if math.Abs(s.X[k]-v) > 1e-6 {
						t.Errorf("x=%v, want %v", s.X, tc.x)
						break
					}
				}
				for j, isInt := range tc.p.Integer {
					if isInt && s.X[j] != math.Round(s.X[j]) {
						t.Errorf("x[%d]=%v not rounded", j, s.X[j])
					}
				}
			})
		}
	}
}

func TestMalformed(t *testing.T) {
	ok := func() *Problem {
		return prob([]float64{1, 1}, []float64{0, 0}, []float64{1, 1}, []bool{true, true},
			dense([]float64{1, 1}, LE, 1))
	}
	cases := map[string]func(p *Problem){
		"short-lower":   func(p *Problem) { p.Lower = p.Lower[:1] },
		"short-integer": func(p *Problem) { p.Integer = nil },
		"nan-obj":       func(p *Problem) { p.Obj[0] = math.NaN() },
		"inf-obj":       func(p *Problem) { p.Obj[1] = inf },
		"nan-upper":     func(p *Problem) { p.Upper[0] = math.NaN() },
		"lower-inf":     func(p *Problem) { p.Lower[0] = inf },
		"lower>upper":   func(p *Problem) { p.Lower[1] = 2 },
		"idx-coef":      func(p *Problem) { p.Rows[0].Coef = p.Rows[0].Coef[:1] },
		"idx-range":     func(p *Problem) { p.Rows[0].Idx[1] = 2 },
		"idx-negative":  func(p *Problem) { p.Rows[0].Idx[0] = -1 },
		"nan-coef":      func(p *Problem) { p.Rows[0].Coef[0] = math.NaN() },
		"nan-rhs":       func(p *Problem) { p.Rows[0].RHS = math.NaN() },
		"sense":         func(p *Problem) { p.Rows[0].Sense = 7 },
	}
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		p := ok()
		cases[name](p)
		if _, err := Default().Solve(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := Default().Solve(nil); !errors.Is(err, ErrMalformed) {
		t.Errorf("nil: err = %v", err)
	}
	if _, err := Default().Solve(ok()); err != nil {
		t.Errorf("well-formed: %v", err)
	}
}

func TestNodeLimit(t *testing.T) {
	// Fractional at the root, so one node cannot finish the search.
	p := prob([]float64{-5, -4}, []float64{0, 0}, []float64{10, 10}, []bool{true, true},
		dense([]float64{6, 4}, LE, 24), dense([]float64{1, 2}, LE, 6))
	for _, e := range engines {
		e.MaxNodes = 1
		s, err := e.Solve(p)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != Limit || s.Nodes != 1 || s.X != nil {
			t.Errorf("%s: status %v after %d nodes, x=%v; want limit after 1, no x", e.name, s.Status, s.Nodes, s.X)
		}
	}
}

func TestStrings(t *testing.T) {
	got := []string{LE.String(), GE.String(), EQ.String(), Sense(9).String(),
		Optimal.String(), Infeasible.String(), Unbounded.String(), Limit.String(), Status(9).String(),
		Default().Name()}
	want := []string{"<=", ">=", "==", "Sense(9)", "optimal", "infeasible", "unbounded", "limit", "Status(9)",
		"branch-and-bound (dual simplex)"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q\nwant %q", got, want)
	}
}

// bruteForce enumerates every integer point of a pure-integer problem's
// (small, finite) box.
func bruteForce(p *Problem) (Status, float64) {
	n := len(p.Obj)
	best, found := inf, false
	x := clone(p.Lower)
	for {
		if feasible(p, x, 1e-9) {
			found = true
			best = math.Min(best, dot(p.Obj, x))
		}
		j := 0
		for ; j < n && x[j] == p.Upper[j]; j++ {
			x[j] = p.Lower[j]
		}
		if j == n {
			break
		}
		x[j]++
	}
	if !found {
		return Infeasible, 0
	}
	return Optimal, best
}

func randomBinary(r *rand.Rand) *Problem {
	n := 1 + r.IntN(12)
	p := &Problem{Obj: make([]float64, n), Lower: fill(n, 0.0), Upper: fill(n, 1.0), Integer: fill(n, true)}
	integral := r.IntN(2) == 0 // exercises the integer-objective cutoff
	for j := range p.Obj {
		if integral {
			p.Obj[j] = float64(r.IntN(21) - 10)
		} else {
			p.Obj[j] = math.Round((r.Float64()*20-10)*1000) / 1000
		}
	}
	for range 1 + r.IntN(4) {
		row := Row{Sense: Sense(r.IntN(3))}
		sum := 0.0
		for j := 0; j < n; j++ {
			if r.IntN(3) == 0 {
				continue
			}
			a := float64(r.IntN(11) - 5)
			row.Idx = append(row.Idx, j)
			row.Coef = append(row.Coef, a)
			sum += math.Abs(a)
		}
		// Equalities get a right-hand side reachable by a random point,
		// or almost every one would be infeasible.
		if row.Sense == EQ {
			for _, a := range row.Coef {
				if r.IntN(2) == 0 {
					row.RHS += a
				}
			}
		} else {
			row.RHS = math.Round((r.Float64()*2-1)*sum*0.6*2) / 2
		}
		p.Rows = append(p.Rows, row)
	}
	return p
}

func TestBruteForce(t *testing.T) {
	for _, e := range engines {
		r := rand.New(rand.NewPCG(1, 2))
		var count [4]int
		for i := range 200 {
			p := randomBinary(r)
			count[checkBrute(t, e.name, i, e, p)]++
		}
		if count[Optimal] < 50 || count[Infeasible] < 10 {
			t.Errorf("%s: unbalanced sample: %d optimal, %d infeasible", e.name, count[Optimal], count[Infeasible])
		}
	}
}

// TestBland reruns the random problems with Bland's rule from the start.
func TestBland(t *testing.T) {
	forceBland = true
	defer func() { forceBland = false }()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		checkBrute(t, "bland", i, Default(), randomBinary(r))
	}
	pl := newPlanner(2, 3, 8, 40)
	if s, err := Default().Solve(pl.problem()); err != nil || math.Abs(s.Obj-pl.enumerate()) > 1e-6 {
		t.Fatalf("planner under Bland: %v %v", s, err)
	}
}

// TestBruteForceIntegers covers general integers with negative bounds and
// a continuous-free objective, enumerated over their boxes.
func TestBruteForceIntegers(t *testing.T) {
	for _, e := range engines {
		r := rand.New(rand.NewPCG(3, 4))
		for i := range 200 {
			p := randomBinary(r)
			p.Obj, p.Lower, p.Upper, p.Integer = p.Obj[:min(len(p.Obj), 5)], p.Lower[:0], p.Upper[:0], p.Integer[:0]
			for range p.Obj {
				l := float64(r.IntN(4) - 3)
				p.Lower = append(p.Lower, l)
				p.Upper = append(p.Upper, l+float64(r.IntN(5)))
				p.Integer = append(p.Integer, true)
			}
			for k := range p.Rows {
				row := &p.Rows[k]
				var idx []int
				var coef []float64
				for t, j := range row.Idx {
					if j < len(p.Obj) {
						idx, coef = append(idx, j), append(coef, row.Coef[t])
					}
				}
				row.Idx, row.Coef = idx, coef
			}
			checkBrute(t, e.name, i, e, p)
		}
	}
}

func checkBrute(t *testing.T, engine string, i int, s Solver, p *Problem) Status {
	t.Helper()
	wantSt, wantObj := bruteForce(p)
	sol, err := s.Solve(p)
	if err != nil {
		t.Fatalf("%s problem %d: %v", engine, i, err)
	}
	if sol.Status != wantSt {
		t.Fatalf("%s problem %d: status %v, want %v\n%+v", engine, i, sol.Status, wantSt, p)
	}
	if wantSt == Optimal {
		if math.Abs(sol.Obj-wantObj) > 1e-6 {
			t.Fatalf("%s problem %d: obj %v, want %v\n%+v\nx=%v", engine, i, sol.Obj, wantObj, p, sol.X)
		}
		if !feasible(p, sol.X, 1e-9) {
			t.Fatalf("%s problem %d: x=%v infeasible", engine, i, sol.X)
		}
	}
	return sol.Status
}

// TestRandomLP compares the two LP engines on problems with every kind of
// bound (free, half-bounded, boxed, fixed); every third one has integer
// columns too.
func TestRandomLP(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var count [4]int
	for i := range 1000 {
		n := 1 + r.IntN(8)
		p := &Problem{Obj: make([]float64, n), Lower: make([]float64, n), Upper: make([]float64, n), Integer: make([]bool, n)}
		for j := range n {
			p.Obj[j] = float64(r.IntN(11) - 5)
			l, u := float64(r.IntN(7)-3), inf
			switch r.IntN(8) {
			case 0:
				l = math.Inf(-1)
			case 1:
				l, u = math.Inf(-1), float64(r.IntN(5))
			case 2, 3:
				// Mostly bounded in the direction the cost pulls.
				p.Obj[j] = math.Abs(p.Obj[j])
			default:
				u = l + float64(r.IntN(4))
			}
			p.Lower[j], p.Upper[j] = l, u
			p.Integer[j] = i%3 == 0 && r.IntN(2) == 0
		}
		for range r.IntN(6) {
			row := Row{Sense: Sense(r.IntN(3)), RHS: float64(r.IntN(21) - 10)}
			if row.Sense == EQ && r.IntN(2) == 0 {
				row.Sense = LE
			}
			for j := range n {
				if r.IntN(2) == 0 {
					row.Idx = append(row.Idx, j)
					row.Coef = append(row.Coef, float64(r.IntN(9)-4))
				}
			}
			p.Rows = append(p.Rows, row)
		}
		a, err := engines[0].Solve(p)
		if err != nil {
			t.Fatalf("problem %d: tableau: %v", i, err)
		}
		b, err := engines[1].Solve(p)
		if err != nil {
			t.Fatalf("problem %d: gonum: %v", i, err)
		}
		count[a.Status]++
		if a.Status != b.Status || a.Status == Optimal && math.Abs(a.Obj-b.Obj) > 1e-6 {
			t.Fatalf("problem %d: tableau %v %v, gonum %v %v\n%+v", i, a.Status, a.Obj, b.Status, b.Obj, p)
		}
		if a.Status == Optimal && !feasible(p, a.X, 1e-7) {
			t.Fatalf("problem %d: tableau x=%v infeasible", i, a.X)
		}
	}
	t.Logf("%d optimal, %d infeasible, %d unbounded", count[Optimal], count[Infeasible], count[Unbounded])
}

// planner is the shape the planner builds: pick one combo k (u_k), and for
// every group g one candidate c under that combo (w_gck = u_k), keeping the
// memory row under a limit. Columns: u_0..u_{K-1}, then w in (g, k, c) order.
type planner struct {
	G, K, C   int
	cost, mem [][][]float64 // [g][k][c]
	comp, act []float64     // [k]
	limit     float64
	cheapest  float64 // optimum without the memory row
}

func (pl *planner) w(g, k, c int) int { return pl.K + (g*pl.K+k)*pl.C + c }

// newPlanner draws costs that fall as memory grows (faster kernels hold
// more), so the cheapest choice overflows and the memory row binds.
func newPlanner(seed uint64, G, K, C int) *planner {
	r := rand.New(rand.NewPCG(seed, 7))
	pl := &planner{G: G, K: K, C: C, comp: make([]float64, K), act: make([]float64, K)}
	for k := range K {
		pl.comp[k] = 50 * r.Float64()
		pl.act[k] = 10 * r.Float64()
	}
	for g := range G {
		pl.cost = append(pl.cost, make([][]float64, K))
		pl.mem = append(pl.mem, make([][]float64, K))
		for k := range K {
			for range C {
				m := 1 + 49*r.Float64()
				pl.mem[g][k] = append(pl.mem[g][k], m)
				pl.cost[g][k] = append(pl.cost[g][k], 100-1.5*m+20*r.Float64()+5*float64(k))
			}
		}
	}
	// Halfway between the least memory any plan needs and the memory of
	// the cheapest plan.
	least, cheapest, cheapMem := inf, inf, 0.0
	for k := range K {
		lm, c, cm := pl.act[k], pl.comp[k], pl.act[k]
		for g := range G {
			lm += slices.Min(pl.mem[g][k])
			i := argmin(pl.cost[g][k])
			c += pl.cost[g][k][i]
			cm += pl.mem[g][k][i]
		}
		least = math.Min(least, lm)
		if c < cheapest {
			cheapest, cheapMem = c, cm
		}
	}
	pl.limit = (least + cheapMem) / 2
	pl.cheapest = cheapest
	return pl
}

func argmin(s []float64) int {
	b := 0
	for i, v := range s {
		if v < s[b] {
			b = i
		}
	}
	return b
}

func (pl *planner) problem() *Problem {
	n := pl.K + pl.G*pl.K*pl.C
	p := &Problem{Obj: make([]float64, n), Lower: fill(n, 0.0), Upper: fill(n, 1.0), Integer: fill(n, true)}
	one := Row{Sense: EQ, RHS: 1}
	memRow := Row{Sense: LE, RHS: pl.limit}
	for k := range pl.K {
		p.Obj[k] = pl.comp[k]
		one.Idx, one.Coef = append(one.Idx, k), append(one.Coef, 1)
		memRow.Idx, memRow.Coef = append(memRow.Idx, k), append(memRow.Coef, pl.act[k])
	}
	p.Rows = append(p.Rows, one)
	for g := range pl.G {
		for k := range pl.K {
			link := Row{Idx: []int{k}, Coef: []float64{-1}, Sense: EQ}
			for c := range pl.C {
				j := pl.w(g, k, c)
				p.Obj[j] = pl.cost[g][k][c]
				link.Idx, link.Coef = append(link.Idx, j), append(link.Coef, 1)
				memRow.Idx, memRow.Coef = append(memRow.Idx, j), append(memRow.Coef, pl.mem[g][k][c])
			}
			p.Rows = append(p.Rows, link)
		}
	}
	p.Rows = append(p.Rows, memRow)
	return p
}

// enumerate finds the optimum by trying every combo and, for three groups,
// every candidate triple.
func (pl *planner) enumerate() float64 {
	if pl.G != 3 {
		panic("enumerate handles three groups")
	}
	best := inf
	for k := range pl.K {
		room := pl.limit - pl.act[k]
		cost, mem := pl.cost, pl.mem
		for a := range pl.C {
			for b := range pl.C {
				m2 := mem[0][k][a] + mem[1][k][b]
				c2 := pl.comp[k] + cost[0][k][a] + cost[1][k][b]
				for c := range pl.C {
					if m2+mem[2][k][c] <= room && c2+cost[2][k][c] < best {
						best = c2 + cost[2][k][c]
					}
				}
			}
		}
	}
	return best
}

func TestPlannerShape(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		pl := newPlanner(seed, 3, 8, 121)
		p := pl.problem()
		s, err := Default().Solve(p)
		if err != nil {
			t.Fatal(err)
		}
		want := pl.enumerate()
		if s.Status != Optimal || math.Abs(s.Obj-want) > 1e-6 {
			t.Fatalf("seed %d: %v obj %v after %d nodes, want optimal %v", seed, s.Status, s.Obj, s.Nodes, want)
		}
		if !feasible(p, s.X, 1e-9) {
			t.Fatalf("seed %d: solution infeasible", seed)
		}
		if s.Obj < pl.cheapest+1e-3 {
			t.Fatalf("seed %d: memory row does not bind (%v vs unconstrained %v)", seed, s.Obj, pl.cheapest)
		}
		again, _ := Default().Solve(p)
		if !slices.Equal(s.X, again.X) || s.Nodes != again.Nodes {
			t.Fatalf("seed %d: two solves differ", seed)
		}
		t.Logf("seed %d: obj %.4f in %d nodes", seed, s.Obj, s.Nodes)
	}
}

func BenchmarkPlannerShape(b *testing.B) {
	for _, e := range engines {
		b.Run(e.name, func(b *testing.B) {
			p := newPlanner(1, 3, 8, 121).problem()
			var nodes int
			for b.Loop() {
				s, err := e.Solve(p)
				if err != nil || s.Status != Optimal {
					b.Fatalf("%v %v", s, err)
				}
				nodes = s.Nodes
			}
			b.ReportMetric(float64(nodes), "nodes/op")
		})
	}
}

// TestRandomMILP compares the engines on problems big enough for deep
// trees, where the tableau carries its basis across many nodes.
func TestRandomMILP(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var count [4]int
	var nodesA, nodesB int
	for i := range 30 {
		n := 15 + r.IntN(10)
		p := &Problem{Obj: make([]float64, n), Lower: make([]float64, n), Upper: make([]float64, n), Integer: make([]bool, n)}
		for j := range n {
			p.Obj[j] = math.Round((r.Float64()*20-10)*100) / 100
			p.Upper[j] = 1
			p.Integer[j] = true
			switch r.IntN(6) {
			case 0:
				p.Integer[j] = false
				p.Upper[j] = 5 * r.Float64()
			case 1:
				p.Lower[j], p.Upper[j] = -3, 3
			}
		}
		for range 3 + r.IntN(8) {
			row := Row{Sense: Sense(r.IntN(2))}
			sum := 0.0
			for j := range n {
				if r.IntN(3) == 0 {
					a := float64(r.IntN(19) - 9)
					row.Idx, row.Coef = append(row.Idx, j), append(row.Coef, a)
					sum += math.Abs(a)
				}
			}
			row.RHS = math.Round((r.Float64()*2 - 1) * sum * 0.3)
			if row.Sense == GE {
				row.RHS = -math.Abs(row.RHS)
			} else {
				row.RHS = math.Abs(row.RHS)
			}
			p.Rows = append(p.Rows, row)
		}
		if r.IntN(3) == 0 {
			// An assignment-style equality over a few binaries.
			row := Row{Sense: EQ, RHS: 1}
			for j := range n {
				if p.Lower[j] == 0 && p.Upper[j] == 1 && p.Integer[j] && r.IntN(3) == 0 {
					row.Idx, row.Coef = append(row.Idx, j), append(row.Coef, 1)
				}
			}
			p.Rows = append(p.Rows, row)
		}
		a, err := engines[0].Solve(p)
		if err != nil {
			t.Fatalf("problem %d: tableau: %v", i, err)
		}
		b, err := engines[1].Solve(p)
		if err != nil {
			t.Fatalf("problem %d: gonum: %v", i, err)
		}
		count[a.Status]++
		nodesA, nodesB = nodesA+a.Nodes, nodesB+b.Nodes
		if a.Status != b.Status || a.Status == Optimal && math.Abs(a.Obj-b.Obj) > 1e-6 {
			t.Fatalf("problem %d: tableau %v %v (%d nodes), gonum %v %v (%d nodes)", i, a.Status, a.Obj, a.Nodes, b.Status, b.Obj, b.Nodes)
		}
		if a.Status == Optimal && !feasible(p, a.X, 1e-7) {
			t.Fatalf("problem %d: tableau x=%v infeasible", i, a.X)
		}
	}
	t.Logf("%d optimal, %d infeasible, %d nodes (tableau), %d nodes (gonum)", count[Optimal], count[Infeasible], nodesA, nodesB)
}
