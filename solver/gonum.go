package solver

// The gonum path: each node LP is rebuilt from scratch in standard form and
// handed to lp.Simplex. It needs no state between nodes, which makes it the
// fallback when the tableau (simplex.go) fails numerically and a second
// opinion in tests, but it is 10-100x slower per node: lp.Simplex has no
// warm start, no bounded variables, and hunts for its first basis with a
// condition-number test per column.

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"gonum.org/v1/gonum/mat"
	"gonum.org/v1/gonum/optimize/convex/lp"
)

// stdForm is a node LP in gonum's standard form, min c·y s.t. A y = b,
// y >= 0. Each structural variable y_k stands for a model column:
// x_j = off_j + sign_k·y_k, with off_j = lo_j when lo_j is finite, else
// off_j = hi_j and sign -1 when hi_j is finite, else 0 and a pair y⁺ - y⁻
// (a free column). After the structural variables come one slack per
// inequality row, then one slack per upper-bound row.
type stdForm struct {
	col  []int     // model column of each structural variable
	sign []float64 // ±1
	ub   []float64 // upper bound of y_k, +Inf when none
	rows []mrow    // over structural variables, rhs shifted by the offsets
	ubs  []int     // structural variables whose upper bound needs a row
}

// solveLP solves the LP relaxation of the box [lo, hi]. Before calling the
// dense simplex it substitutes fixed columns, drops rows that the box already
// satisfies, settles columns left in no row, and leaves out upper bounds that
// the rows imply: in the planner every binary's x <= 1 follows from a
// convexity row, so the LP keeps ~30 rows instead of ~3,000.
func (m *model) solveLP(lo, hi []float64) (lpResult, error) {
	n := len(m.obj)
	active := func(j int) bool { return hi[j]-lo[j] > fixTol }

	// Rows over active columns, with fixed columns moved to the right.
	var rows []mrow
	for i := range m.rows {
		r := &m.rows[i]
		row := mrow{sense: r.sense, rhs: r.rhs}
		var act activity
		for k, j := range r.idx {
			c := r.coef[k]
			if !active(j) {
				row.rhs -= c * lo[j]
				continue
			}
			row.idx = append(row.idx, j)
			row.coef = append(row.coef, c)
			act.add(c, lo[j], hi[j])
		}
		tol := scaledTol(feasTol, r.rhs)
		le := r.sense == LE || r.sense == EQ
		ge := r.sense == GE || r.sense == EQ
		if le && act.minInf == 0 && act.min > row.rhs+tol ||
			ge && act.maxInf == 0 && act.max < row.rhs-tol {
			return lpResult{status: lpInfeasible}, nil
		}
		leSlack := !le || act.maxInf == 0 && act.max <= row.rhs+tol
		geSlack := !ge || act.minInf == 0 && act.min >= row.rhs-tol
		if leSlack && geSlack {
			continue // every point of the box satisfies the row
		}
		rows = append(rows, row)
	}

	inRow := make([]bool, n)
	for _, r := range rows {
		for _, j := range r.idx {
			inRow[j] = true
		}
	}
	x := make([]float64, n)
	off := make([]float64, n)
	first := make([]int, n) // first structural variable of column j
	var sf stdForm
	unbounded := false
	for j := 0; j < n; j++ {
		loInf, hiInf := math.IsInf(lo[j], -1), math.IsInf(hi[j], 1)
		switch {
		case !active(j):
			x[j] = lo[j]
		case inRow[j]:
			first[j] = len(sf.col)
			switch {
			case !loInf:
				off[j] = lo[j]
				sf.add(j, 1, hi[j]-lo[j])
			case !hiInf:
				off[j] = hi[j]
				sf.add(j, -1, math.Inf(1))
			default:
				sf.add(j, 1, math.Inf(1))
				sf.add(j, -1, math.Inf(1))
			}
		// Columns in no row sit at their cheaper bound.
		case m.obj[j] > 0 && loInf, m.obj[j] < 0 && hiInf:
			unbounded = true
		case m.obj[j] > 0 || m.obj[j] == 0 && !loInf:
			x[j] = lo[j]
		case m.obj[j] < 0 || !hiInf:
			x[j] = hi[j]
		}
	}
	for _, r := range rows {
		row := mrow{sense: r.sense, rhs: r.rhs}
		for k, j := range r.idx {
			c := r.coef[k]
			row.rhs -= c * off[j]
			for v := first[j]; v < len(sf.col) && sf.col[v] == j; v++ {
				row.idx = append(row.idx, v)
				row.coef = append(row.coef, c*sf.sign[v])
			}
		}
		sf.rows = append(sf.rows, row)
	}

	if len(sf.rows) > 0 {
		sf.upperBounds()
		c := make([]float64, len(sf.col))
		for k, j := range sf.col {
			c[k] = m.obj[j] * sf.sign[k]
		}
		y, st, err := sf.solve(c)
		if err != nil {
			return lpResult{}, err
		}
		if st != lpOptimal {
			return lpResult{status: st}, nil
		}
		for j := range x {
			if active(j) && inRow[j] {
				x[j] = off[j]
			}
		}
		for k, j := range sf.col {
			x[j] += sf.sign[k] * y[k]
		}
		for j := range x {
			x[j] = math.Min(math.Max(x[j], lo[j]), hi[j])
		}
	}
	if unbounded {
		return lpResult{status: lpUnbounded}, nil
	}
	return lpResult{status: lpOptimal, x: x, obj: m.objective(x)}, nil
}

func (sf *stdForm) add(j int, sign, ub float64) {
	sf.col = append(sf.col, j)
	sf.sign = append(sf.sign, sign)
	sf.ub = append(sf.ub, ub)
}

// upperBounds decides which finite upper bounds need a row. A bound is left
// out when the rows imply it from bounds that stay in the LP. Dropping in
// sequence keeps that sound: each dropped bound is derived from bounds still
// present at that moment, so the derivations form a chain with no cycle.
// Bounds implied by rows and y >= 0 alone (x <= 1 from a convexity row) are
// dropped last, since the others may lean on them first.
func (sf *stdForm) upperBounds() {
	nv := len(sf.col)
	ub := clone(sf.ub)
	zero := make([]float64, nv)
	acts := make([]activity, len(sf.rows))
	// Per variable, its (row, coefficient) entries in row order.
	type entry struct {
		row  int
		coef float64
	}
	entries := make([][]entry, nv)
	var pos, neg []int // per row: positive / negative coefficient counts
	for i := range sf.rows {
		r := &sf.rows[i]
		acts[i] = rowActivity(r, zero, ub)
		np, nn := 0, 0
		for t, v := range r.idx {
			entries[v] = append(entries[v], entry{i, r.coef[t]})
			if r.coef[t] > 0 {
				np++
			} else {
				nn++
			}
		}
		pos, neg = append(pos, np), append(neg, nn)
	}
	// implied returns the tightest upper bound on y_k the rows give. Its
	// own term in the relevant activity is 0 (y_k sits at 0), so nothing
	// needs taking back. With noUB every upper bound counts as infinite.
	implied := func(k int, noUB bool) float64 {
		best := math.Inf(1)
		for _, e := range entries[k] {
			r, a := &sf.rows[e.row], acts[e.row]
			le := r.sense == LE || r.sense == EQ
			ge := r.sense == GE || r.sense == EQ
			switch {
			case le && e.coef > 0 && noUB && neg[e.row] == 0:
				best = math.Min(best, r.rhs/e.coef)
			case le && e.coef > 0 && !noUB && a.minInf == 0:
				best = math.Min(best, (r.rhs-a.min)/e.coef)
			}
			switch {
			case ge && e.coef < 0 && noUB && pos[e.row] == 0:
				best = math.Min(best, r.rhs/e.coef)
			case ge && e.coef < 0 && !noUB && a.maxInf == 0:
				best = math.Min(best, (r.rhs-a.max)/e.coef)
			}
		}
		return best
	}
	covered := func(k int, v float64) bool { return v <= ub[k]+scaledTol(fixTol, ub[k]) }

	selfContained := make([]bool, nv)
	for k := range nv {
		selfContained[k] = !math.IsInf(ub[k], 1) && covered(k, implied(k, true))
	}
	for k := range nv {
		if math.IsInf(ub[k], 1) || selfContained[k] {
			continue
		}
		if !covered(k, implied(k, false)) {
			sf.ubs = append(sf.ubs, k)
			continue
		}
		for _, e := range entries[k] {
			if e.coef > 0 {
				acts[e.row].max -= e.coef * ub[k]
				acts[e.row].maxInf++
			} else {
				acts[e.row].min -= e.coef * ub[k]
				acts[e.row].minInf++
			}
		}
		ub[k] = math.Inf(1)
	}
}

// errLP marks a numerical failure of the LP engine (as opposed to a
// verdict of infeasible or unbounded).
var errLP = errors.New("LP relaxation failed")

// solve builds the dense standard form and runs gonum's simplex, retrying
// after removing dependent equality rows and then with the columns reversed
// (gonum picks its starting basis from the last columns and breaks ties by
// index, so the reversed order takes a different path).
func (sf *stdForm) solve(obj []float64) ([]float64, lpStatus, error) {
	reduced := false
	if sf.eqCount() > len(sf.col) {
		st, ok := sf.dropDependentEq()
		if !ok {
			return nil, st, nil
		}
		reduced = true
	}
	var firstErr error
	for attempt := 0; attempt < 3; attempt++ {
		reverse := attempt == 2
		c, A, b := sf.dense(obj, reverse)
		y, err := simplex(c, A, b)
		switch {
		case err == nil:
			if sf.check(A, b, y) {
				if reverse {
					slices.Reverse(y)
				}
				return y, lpOptimal, nil
			}
			err = errors.New("simplex returned a point that violates the rows")
		case errors.Is(err, lp.ErrInfeasible):
			return nil, lpInfeasible, nil
		case errors.Is(err, lp.ErrUnbounded):
			return nil, lpUnbounded, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if attempt == 0 && !reduced {
			reduced = true
			st, ok := sf.dropDependentEq()
			if !ok {
				return nil, st, nil
			}
		}
	}
	return nil, 0, fmt.Errorf("%w: %d rows x %d columns: %v", errLP, len(sf.rows)+len(sf.ubs), len(sf.col), firstErr)
}

// simplex calls gonum, turning its panics (it panics on shapes it dislikes)
// into errors.
func simplex(c []float64, A *mat.Dense, b []float64) (y []float64, err error) {
	defer func() {
		if r := recover(); r != nil {
			y, err = nil, fmt.Errorf("gonum simplex panicked: %v", r)
		}
	}()
	_, y, err = lp.Simplex(c, A, b, 1e-10, nil)
	return y, err
}

func (sf *stdForm) eqCount() int {
	n := 0
	for _, r := range sf.rows {
		if r.sense == EQ {
			n++
		}
	}
	return n
}

// dense lays out c, A, b; reverse flips the column order.
func (sf *stdForm) dense(obj []float64, reverse bool) ([]float64, *mat.Dense, []float64) {
	nStruct := len(sf.col)
	ncol := nStruct + len(sf.rows) - sf.eqCount() + len(sf.ubs)
	nrow := len(sf.rows) + len(sf.ubs)
	col := func(k int) int {
		if reverse {
			return ncol - 1 - k
		}
		return k
	}
	c := make([]float64, ncol)
	for k, v := range obj {
		c[col(k)] = v
	}
	A := mat.NewDense(nrow, ncol, nil)
	b := make([]float64, nrow)
	slack := nStruct
	for i, r := range sf.rows {
		for t, k := range r.idx {
			A.Set(i, col(k), r.coef[t])
		}
		b[i] = r.rhs
		switch r.sense {
		case LE:
			A.Set(i, col(slack), 1)
			slack++
		case GE:
			A.Set(i, col(slack), -1)
			slack++
		}
	}
	for t, k := range sf.ubs {
		i := len(sf.rows) + t
		A.Set(i, col(k), 1)
		A.Set(i, col(slack), 1)
		slack++
		b[i] = sf.ub[k]
	}
	return c, A, b
}

// check guards against the simplex reporting success on a point that does
// not solve the system (it can after an ill-conditioned basis change).
func (sf *stdForm) check(A *mat.Dense, b, y []float64) bool {
	for _, v := range y {
		if v < -1e-7 {
			return false
		}
	}
	yv := mat.NewVecDense(len(y), y)
	for i := range b {
		if s := mat.Dot(A.RowView(i), yv); math.Abs(s-b[i]) > scaledTol(1e-6, b[i]) {
			return false
		}
	}
	return true
}

// dropDependentEq removes equality rows that are linear combinations of
// earlier ones (gonum needs full row rank). ok is false when such a row
// contradicts the others; the LP is then infeasible.
func (sf *stdForm) dropDependentEq() (lpStatus, bool) {
	n := len(sf.col)
	type pivot struct {
		col int
		row []float64 // reduced row, last entry is the rhs
	}
	var pivots []pivot
	var kept []mrow
	for _, r := range sf.rows {
		if r.sense != EQ {
			kept = append(kept, r)
			continue
		}
		v := make([]float64, n+1)
		scale := 0.0
		for t, k := range r.idx {
			v[k] = r.coef[t]
			scale = math.Max(scale, math.Abs(r.coef[t]))
		}
		v[n] = r.rhs
		for _, p := range pivots {
			if f := v[p.col] / p.row[p.col]; f != 0 {
				for t := range v {
					v[t] -= f * p.row[t]
				}
			}
		}
		best, bi := 0.0, -1
		for t := 0; t < n; t++ {
			if a := math.Abs(v[t]); a > best {
				best, bi = a, t
			}
		}
		if best <= 1e-9*scale {
			if math.Abs(v[n]) > scaledTol(feasTol, r.rhs) {
				return lpInfeasible, false
			}
			continue
		}
		pivots = append(pivots, pivot{bi, v})
		kept = append(kept, r)
	}
	sf.rows = kept
	return lpOptimal, true
}
