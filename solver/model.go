package solver

import "math"

// Tolerances shared by presolve, LP and branching.
const (
	intTol  = 1e-6  // |x - round(x)| below this counts as integral
	fixTol  = 1e-9  // hi - lo below this fixes a column at lo
	feasTol = 1e-7  // row violation allowed, scaled by max(1, |rhs|)
	zeroTol = 1e-12 // coefficients below this (after merging) are dropped
)

// model is the internal form of a Problem: rows hold merged non-zero
// coefficients and integer bounds are rounded inwards. Columns keep the
// caller's numbering; infinite bounds are dealt with per node LP (lp.go), so
// branching always acts on the caller's columns.
type model struct {
	obj    []float64
	lo, hi []float64
	isInt  []bool
	rows   []mrow

	// intObj: every solution's objective is an integer (integer columns
	// with integer costs, continuous columns with zero cost), so an
	// improving solution must beat the incumbent by at least 1.
	intObj bool
}

type mrow struct {
	idx   []int
	coef  []float64
	sense Sense
	rhs   float64
}

// newModel converts p, which must have passed validate. It reports false
// when rounding integer bounds leaves a column with no integer value.
func newModel(p *Problem) (*model, bool) {
	n := len(p.Obj)
	m := &model{
		obj:    clone(p.Obj),
		lo:     clone(p.Lower),
		hi:     clone(p.Upper),
		isInt:  append([]bool(nil), p.Integer...),
		intObj: true,
	}
	ok := true
	for j := 0; j < n; j++ {
		if !m.isInt[j] {
			if m.obj[j] != 0 {
				m.intObj = false
			}
			continue
		}
		if m.obj[j] != math.Round(m.obj[j]) {
			m.intObj = false
		}
		m.lo[j] = math.Ceil(m.lo[j] - intTol)
		m.hi[j] = math.Floor(m.hi[j] + intTol)
		if m.lo[j] > m.hi[j] {
			ok = false
		}
	}
	// Merge repeated indices through a dense scratch row; the merged row
	// keeps the order of first appearance, so it is deterministic.
	acc := make([]float64, n)
	seen := make([]bool, n)
	for _, r := range p.Rows {
		row := mrow{sense: r.Sense, rhs: r.RHS}
		var idx []int
		for k, j := range r.Idx {
			if !seen[j] {
				seen[j] = true
				idx = append(idx, j)
			}
			acc[j] += r.Coef[k]
		}
		for _, j := range idx {
			if math.Abs(acc[j]) > zeroTol {
				row.idx = append(row.idx, j)
				row.coef = append(row.coef, acc[j])
			}
			acc[j], seen[j] = 0, false
		}
		m.rows = append(m.rows, row)
	}
	return m, ok
}

func (m *model) objective(x []float64) float64 {
	f := 0.0
	for j, c := range m.obj {
		f += c * x[j]
	}
	return f
}

func scaledTol(tol, v float64) float64 { return tol * math.Max(1, math.Abs(v)) }
