package solver

import (
	"fmt"
	"math"
	"sync/atomic"
)

// BranchAndBound is a depth-first LP-based branch and bound. The zero value
// is ready to use.
type BranchAndBound struct {
	MaxNodes int     // 0 = default 1e6
	Gap      float64 // relative optimality gap to stop at; 0 = default 1e-9 (effectively exact), smaller values act as 1e-9

	// gonumLP solves every node LP from scratch with gonum's lp.Simplex
	// instead of the warm-started tableau. It is 10-100x slower on the
	// planner's problems and stays as a cross-check in tests.
	gonumLP bool
}

func (b BranchAndBound) Name() string {
	if b.gonumLP {
		return "branch-and-bound (gonum simplex)"
	}
	return "branch-and-bound (dual simplex)"
}

// node is an open subproblem: a box and the LP bound of its parent.
type node struct {
	lo, hi []float64
	bound  float64
}

// Solve minimises p. The search is depth-first (dive on the child nearer the
// LP value, so an incumbent appears early), prunes nodes whose parent bound
// cannot beat the incumbent by more than the gap, and branches on the most
// fractional integer column, lowest index on ties. Each new incumbent also
// fixes, for good, integer columns whose root reduced cost alone would lift
// the bound past it. Nothing depends on map order or randomness, so equal
// inputs give equal outputs.
func (b BranchAndBound) Solve(p *Problem) (*Solution, error) {
	if err := validate(p); err != nil {
		return nil, err
	}
	maxNodes := b.MaxNodes
	if maxNodes <= 0 {
		maxNodes = 1_000_000
	}
	// Below 1e-9 the gap would only chase the LP's rounding noise.
	gap := math.Max(b.Gap, 1e-9)
	m, ok := newModel(p)
	if !ok {
		return &Solution{Status: Infeasible}, nil
	}
	rx := &relaxer{m: m}
	if !b.gonumLP {
		rx.tb = newTableau(m)
	}

	var (
		inc    []float64 // incumbent
		incObj = math.Inf(1)
		nodes  int
		rc     *rootCosts
		glo    []float64 // global bounds: root box tightened by reduced costs
		ghi    []float64
	)
	// cutoff: a node must promise an objective below this to be worth it.
	cutoff := func() float64 {
		if inc == nil {
			return math.Inf(1)
		}
		scale := math.Max(1, math.Abs(incObj))
		c := incObj - gap*scale
		if m.intObj {
			// The next better solution is at least 1 lower; the slack
			// keeps LP noise from pruning a node that reaches it.
			c = math.Min(c, incObj-1+math.Min(0.5, intTol*scale))
		}
		return c
	}

	stack := []node{{lo: m.lo, hi: m.hi, bound: math.Inf(-1)}}
	for len(stack) > 0 {
		nd := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if nd.bound >= cutoff() || glo != nil && !intersect(nd.lo, nd.hi, glo, ghi) {
			continue
		}
		if nodes >= maxNodes {
			return finish(m, Limit, inc, nodes), nil
		}
		nodes++
		if !m.propagate(nd.lo, nd.hi) {
			continue
		}
		res, err := rx.solve(nd.lo, nd.hi)
		if err != nil {
			return nil, fmt.Errorf("solver: node %d: %w", nodes, err)
		}
		switch res.status {
		case lpInfeasible:
			continue
		case lpUnbounded:
			if nodes == 1 {
				return &Solution{Status: Unbounded, Nodes: nodes}, nil
			}
			// A sub-box of a bounded LP cannot be unbounded.
			return nil, fmt.Errorf("solver: node %d: %w: unbounded below a bounded root", nodes, errLP)
		}
		if nodes == 1 {
			glo, ghi = clone(nd.lo), clone(nd.hi)
			rc = rx.rootCosts(res.obj)
		}
		if res.obj >= cutoff() {
			continue
		}
		j, frac := branchColumn(m, res.x)
		if j < 0 {
			x := roundInts(m, res.x)
			if f := m.objective(x); f < incObj {
				inc, incObj = x, f
				rc.fix(glo, ghi, cutoff())
				rx.retire(glo, ghi)
			}
			continue
		}
		// Children: x_j <= floor(v) and x_j >= ceil(v). The far child is
		// pushed first so the near one is explored next; it reuses the
		// parent's slices, which nothing else holds.
		v := res.x[j]
		down := node{lo: clone(nd.lo), hi: clone(nd.hi), bound: res.obj}
		down.hi[j] = math.Floor(v)
		up := node{lo: nd.lo, hi: nd.hi, bound: res.obj}
		up.lo[j] = math.Ceil(v)
		if frac >= 0.5 {
			stack = append(stack, down, up)
		} else {
			stack = append(stack, up, down)
		}
	}
	if inc == nil {
		return &Solution{Status: Infeasible, Nodes: nodes}, nil
	}
	return finish(m, Optimal, inc, nodes), nil
}

// intersect narrows a node's box to the global bounds and reports whether
// anything is left.
func intersect(lo, hi, glo, ghi []float64) bool {
	for j := range lo {
		lo[j] = math.Max(lo[j], glo[j])
		hi[j] = math.Min(hi[j], ghi[j])
		if lo[j] > hi[j] {
			return false
		}
	}
	return true
}

// lpStatus is the verdict on one node LP.
type lpStatus uint8

const (
	lpOptimal lpStatus = iota
	lpInfeasible
	lpUnbounded
)

// lpResult is the LP relaxation of one node. x lies within the node's box.
type lpResult struct {
	status lpStatus
	x      []float64
	obj    float64
}

// relaxer solves node LPs: the warm-started tableau, or gonum from scratch.
type relaxer struct {
	m       *model
	tb      *tableau // nil: gonum only
	retired []bool
}

// retire hands the tableau the columns the global bounds now fix.
func (rx *relaxer) retire(glo, ghi []float64) {
	if rx.tb == nil {
		return
	}
	if rx.retired == nil {
		rx.retired = make([]bool, len(glo))
	}
	var cols []int
	for j := range glo {
		if glo[j] == ghi[j] && !rx.retired[j] {
			rx.retired[j] = true
			cols = append(cols, j)
		}
	}
	rx.tb.retire(cols)
}

func (rx *relaxer) solve(lo, hi []float64) (lpResult, error) {
	tb := rx.tb
	if tb == nil {
		return rx.m.solveLP(lo, hi)
	}
	st, err := tb.solve(lo, hi)
	if err != nil {
		// A drifted or ill-conditioned basis: start over from the
		// logicals, then as a last resort build the LP for gonum.
		tb.reset()
		st, err = tb.solve(lo, hi)
	}
	if err != nil {
		tb.reset()
		fallbacks.Add(1)
		res, gerr := rx.m.solveLP(lo, hi)
		if gerr != nil {
			return lpResult{}, fmt.Errorf("%w; gonum fallback: %w", err, gerr)
		}
		return res, nil
	}
	if st != lpOptimal {
		return lpResult{status: st}, nil
	}
	x := clone(tb.x[:tb.n])
	for j := range x {
		x[j] = math.Min(math.Max(x[j], lo[j]), hi[j])
	}
	return lpResult{status: lpOptimal, x: x, obj: rx.m.objective(x)}, nil
}

// fallbacks counts node LPs the tableau gave up on; tests expect none.
var fallbacks atomic.Int64

// rootCosts holds the root LP's reduced costs of nonbasic integer columns.
// For any point in the root box, obj >= rootObj + d_j·(x_j - x̄_j) summed
// over nonbasic columns, each term >= 0; one column moving k units off its
// bound alone costs |d_j|·k.
type rootCosts struct {
	obj  float64
	cols []int
	d    []float64 // > 0: column sat at its lower bound; < 0: at its upper
}

func (rx *relaxer) rootCosts(obj float64) *rootCosts {
	rc := &rootCosts{obj: obj}
	tb := rx.tb
	if tb == nil {
		return rc // gonum gives no reduced costs
	}
	for j := range tb.n {
		if !rx.m.isInt[j] || tb.row[j] >= 0 || tb.lb[j] == tb.ub[j] {
			continue
		}
		dj := tb.d[j]
		if dj > dualTol && tb.x[j] == tb.lb[j] || dj < -dualTol && tb.x[j] == tb.ub[j] {
			rc.cols = append(rc.cols, j)
			rc.d = append(rc.d, dj)
		}
	}
	return rc
}

// fix tightens the global bounds: an improving solution must have
// rootObj + |d_j|·k < cutoff, so column j moves at most k units.
func (rc *rootCosts) fix(glo, ghi []float64, cutoff float64) {
	room := cutoff - rc.obj
	for t, j := range rc.cols {
		d := rc.d[t]
		k := math.Floor(room/math.Abs(d) + intTol)
		if d > 0 {
			ghi[j] = math.Min(ghi[j], glo[j]+k)
		} else {
			glo[j] = math.Max(glo[j], ghi[j]-k)
		}
	}
}

// branchColumn picks the integer column whose LP value is furthest from an
// integer; it returns -1 when x is integral. frac is x_j - floor(x_j).
func branchColumn(m *model, x []float64) (int, float64) {
	best, bj, bf := intTol, -1, 0.0
	for j, isInt := range m.isInt {
		if !isInt {
			continue
		}
		f := x[j] - math.Floor(x[j])
		if d := math.Min(f, 1-f); d > best {
			best, bj, bf = d, j, f
		}
	}
	return bj, bf
}

func roundInts(m *model, x []float64) []float64 {
	out := clone(x)
	for j, isInt := range m.isInt {
		if isInt {
			out[j] = math.Round(out[j])
		}
	}
	return out
}

func finish(m *model, st Status, inc []float64, nodes int) *Solution {
	s := &Solution{Status: st, Nodes: nodes}
	if inc != nil {
		s.X = inc
		s.Obj = m.objective(inc)
	}
	return s
}

func clone(s []float64) []float64 { return append([]float64(nil), s...) }
