package solver

import (
	"errors"
	"fmt"
	"math"

	"gonum.org/v1/gonum/mat"
)

// tableau is a bounded-variable simplex over a dense tableau, kept alive
// for the whole branch and bound so each node starts from the last basis.
//
// Row i of the model reads a_i·x + r_i = 0, where the logical r_i carries
// the row's sense as bounds (a·x <= b becomes r >= -b). The columns are the
// n structurals, then the m logicals, so [A | I] has full row rank and the
// logicals form the first basis. A node only changes column bounds, which
// keeps the basis dual feasible: the dual simplex repairs primal
// feasibility in a few pivots. When a nonbasic column would need an
// infinite bound to stay dual feasible (a free or half-bounded column with
// the wrong reduced cost), its cost is shifted to make the reduced cost 0,
// the dual simplex runs, then the true costs come back and the primal
// simplex finishes — so no separate phase 1 is needed.
//
// Columns fixed for good (reduced-cost fixing in bb.go) are retired: their
// contribution moves into one extra column, fixed at 1, and the loops skip
// them. In the planner ~90% of the columns retire after the first good
// incumbent, and pivots get that much cheaper.
type tableau struct {
	m, n, nc int       // rows, structurals, n+m+1 (the last is the fold)
	a        []float64 // [A | I | fold], m×nc row-major, for reinversion
	rows     []mrow    // the same rows, sparse, for residual checks
	t        []float64 // B⁻¹[A | I]
	orig     []float64 // n model costs
	cost     []float64 // nc costs in use (shifted while repairing); logicals 0
	lb, ub   []float64 // nc
	x        []float64 // nc; nonbasic columns sit at a bound (or 0 when free)
	d        []float64 // nc reduced costs for the costs in use
	head     []int     // basic column of each row
	row      []int     // row of a basic column, -1 when nonbasic
	live     []int     // columns the loops visit, ascending
	pending  []int     // columns to retire once nonbasic

	since int // pivots since the last reinversion
	bland bool
}

const (
	primTol  = 1e-9  // bound violation, scaled by max(1, |bound|)
	dualTol  = 1e-9  // reduced cost
	pivotTol = 1e-9  // smallest usable tableau entry
	refactor = 100   // pivots between reinversions
	stallMax = 50    // degenerate pivots in a row before Bland's rule
	condMax  = 1e12  // basis condition number treated as singular
	iterMul  = 20    // iteration limit per solve: iterMul·(m+nc) + 1000
	bigValue = 1e300 // guards against overflow in ratio tests
)

var errSimplex = errors.New("simplex failed")

// forceBland makes every solve use Bland's rule from the first pivot, so
// tests can cover the anti-cycling paths.
var forceBland bool

func newTableau(m *model) *tableau {
	nr, n := len(m.rows), len(m.obj)
	nc := n + nr + 1
	tb := &tableau{
		m: nr, n: n, nc: nc,
		a:    make([]float64, nr*nc),
		rows: m.rows,
		cost: make([]float64, nc),
		lb:   make([]float64, nc),
		ub:   make([]float64, nc),
		x:    make([]float64, nc),
		d:    make([]float64, nc),
		head: make([]int, nr),
		row:  make([]int, nc),
	}
	tb.orig = clone(m.obj)
	copy(tb.cost, m.obj)
	for i, r := range m.rows {
		for k, j := range r.idx {
			tb.a[i*nc+j] = r.coef[k]
		}
		tb.a[i*nc+n+i] = 1
		l := n + i
		switch r.sense {
		case LE:
			tb.lb[l], tb.ub[l] = -r.rhs, math.Inf(1)
		case GE:
			tb.lb[l], tb.ub[l] = math.Inf(-1), -r.rhs
		case EQ:
			tb.lb[l], tb.ub[l] = -r.rhs, -r.rhs
		}
	}
	fold := nc - 1
	tb.lb[fold], tb.ub[fold], tb.x[fold] = 1, 1, 1
	for j := range nc {
		tb.live = append(tb.live, j)
	}
	tb.t = make([]float64, len(tb.a))
	tb.reset()
	return tb
}

// reset returns to the all-logical basis, which is perfectly conditioned.
func (tb *tableau) reset() {
	for j := range tb.row {
		tb.row[j] = -1
	}
	for i := range tb.m {
		tb.head[i] = tb.n + i
		tb.row[tb.n+i] = i
	}
	copy(tb.t, tb.a)
	copy(tb.cost, tb.orig)
	clear(tb.cost[tb.n:])
	copy(tb.d, tb.cost)
	tb.since = 0
}

// solve minimises over the box lo <= x <= hi (structurals only), starting
// from the current basis.
func (tb *tableau) solve(lo, hi []float64) (lpStatus, error) {
	copy(tb.lb, lo)
	copy(tb.ub, hi)
	tb.bland = forceBland
	// Shift the cost of any column that cannot be placed dual feasibly.
	shifted := false
	for _, j := range tb.live {
		if tb.row[j] >= 0 {
			continue
		}
		if !tb.place(j) {
			tb.cost[j] -= tb.d[j]
			tb.d[j] = 0
			tb.place(j)
			shifted = true
		}
	}
	tb.retirePending()
	tb.computeX()
	st, err := tb.dual()
	if err != nil || st != lpOptimal {
		if shifted {
			tb.restoreCost()
		}
		return st, err
	}
	if shifted {
		tb.restoreCost()
		st, err = tb.primal()
		if err != nil || st != lpOptimal {
			return st, err
		}
	}
	return lpOptimal, nil
}

// retire marks columns fixed for the rest of the search (lb == ub in every
// later box).
func (tb *tableau) retire(cols []int) { tb.pending = append(tb.pending, cols...) }

// retirePending folds each pending nonbasic column's fixed value into the
// fold column (x_fold = 1, so its column becomes Σ v_j·a_j) and drops it
// from the loops. Basic ones wait until they leave the basis.
func (tb *tableau) retirePending() {
	if len(tb.pending) == 0 {
		return
	}
	nc, fold := tb.nc, tb.nc-1
	dead := make([]bool, nc)
	keep := tb.pending[:0]
	for _, j := range tb.pending {
		if tb.row[j] >= 0 {
			keep = append(keep, j)
			continue
		}
		if v := tb.x[j]; v != 0 {
			for i := range tb.m {
				tb.t[i*nc+fold] += v * tb.t[i*nc+j]
				tb.a[i*nc+fold] += v * tb.a[i*nc+j]
			}
		}
		dead[j] = true
	}
	tb.pending = keep
	live := tb.live[:0]
	for _, j := range tb.live {
		if !dead[j] {
			live = append(live, j)
		}
	}
	tb.live = live
}

// restoreCost puts back the model's costs after a shift.
func (tb *tableau) restoreCost() {
	copy(tb.cost, tb.orig)
	for j := tb.n; j < tb.nc; j++ {
		tb.cost[j] = 0
	}
	tb.computeD()
}

// place puts nonbasic column j at the bound its reduced cost asks for and
// reports false when that bound is infinite.
func (tb *tableau) place(j int) bool {
	l, u, dj := tb.lb[j], tb.ub[j], tb.d[j]
	switch {
	case l == u:
		tb.x[j] = l
	case dj > dualTol:
		tb.x[j] = l
		return !math.IsInf(l, -1)
	case dj < -dualTol:
		tb.x[j] = u
		return !math.IsInf(u, 1)
	case !math.IsInf(l, -1):
		tb.x[j] = l
	case !math.IsInf(u, 1):
		tb.x[j] = u
	default:
		tb.x[j] = 0
	}
	return true
}

// computeX sets the basic values from the nonbasic ones: x_B = -B⁻¹N x_N.
func (tb *tableau) computeX() {
	for i := range tb.m {
		tb.x[tb.head[i]] = 0
	}
	for i := range tb.m {
		ti := tb.t[i*tb.nc : (i+1)*tb.nc]
		s := 0.0
		for _, j := range tb.live {
			if v := ti[j]; v != 0 && tb.row[j] < 0 {
				s += v * tb.x[j]
			}
		}
		tb.x[tb.head[i]] = -s
	}
}

// computeD sets d = c - c_B B⁻¹[A | I].
func (tb *tableau) computeD() {
	copy(tb.d, tb.cost)
	for i := range tb.m {
		cb := tb.cost[tb.head[i]]
		if cb == 0 {
			continue
		}
		ti := tb.t[i*tb.nc : (i+1)*tb.nc]
		for _, j := range tb.live {
			tb.d[j] -= cb * ti[j]
		}
	}
	for i := range tb.m {
		tb.d[tb.head[i]] = 0
	}
}

// pivot makes column q basic in row r. Only live columns are updated,
// and only where the pivot row is non-zero.
func (tb *tableau) pivot(r, q int) {
	nc := tb.nc
	tr := tb.t[r*nc : (r+1)*nc]
	p := tr[q]
	nz := make([]int, 0, len(tb.live))
	for _, j := range tb.live {
		if tr[j] != 0 {
			tr[j] /= p
			nz = append(nz, j)
		}
	}
	tr[q] = 1
	for i := range tb.m {
		if i == r {
			continue
		}
		ti := tb.t[i*nc : (i+1)*nc]
		f := ti[q]
		if f == 0 {
			continue
		}
		for _, j := range nz {
			ti[j] -= f * tr[j]
		}
		ti[q] = 0
	}
	if dq := tb.d[q]; dq != 0 {
		for _, j := range nz {
			tb.d[j] -= dq * tr[j]
		}
		tb.d[q] = 0
	}
	leave := tb.head[r]
	tb.row[leave] = -1
	tb.head[r] = q
	tb.row[q] = r
	tb.since++
}

// reinvert recomputes B⁻¹[A | I] from the original rows with an LU
// factorisation, then the reduced costs and basic values.
func (tb *tableau) reinvert() error {
	m, nc := tb.m, tb.nc
	B := mat.NewDense(m, m, nil)
	for i := range m {
		for k, j := range tb.head {
			B.Set(i, k, tb.a[i*nc+j])
		}
	}
	var lu mat.LU
	lu.Factorize(B)
	if c := lu.Cond(); c > condMax || math.IsNaN(c) {
		return fmt.Errorf("%w: basis condition number %.3g", errSimplex, c)
	}
	var T mat.Dense
	if err := lu.SolveTo(&T, false, mat.NewDense(m, nc, tb.a)); err != nil {
		return fmt.Errorf("%w: %v", errSimplex, err)
	}
	raw := T.RawMatrix()
	for i := range m {
		copy(tb.t[i*nc:(i+1)*nc], raw.Data[i*raw.Stride:i*raw.Stride+nc])
	}
	for i, j := range tb.head {
		for k := range m {
			tb.t[k*nc+j] = 0
		}
		tb.t[i*nc+j] = 1
	}
	tb.computeD()
	tb.computeX()
	tb.since = 0
	return nil
}

func (tb *tableau) maybeReinvert() error {
	if tb.since >= refactor {
		return tb.reinvert()
	}
	return nil
}

// violation of basic row i: positive below lb (need increase) or above ub
// (need decrease); 0 when within tolerance.
func (tb *tableau) violation(i int) float64 {
	j := tb.head[i]
	v := tb.x[j]
	if l := tb.lb[j]; v < l-scaledTol(primTol, l) {
		return l - v
	}
	if u := tb.ub[j]; v > u+scaledTol(primTol, u) {
		return u - v
	}
	return 0
}

// dual runs the dual simplex from a dual feasible basis.
func (tb *tableau) dual() (lpStatus, error) {
	nc := tb.nc
	limit := iterMul*(tb.m+nc) + 1000
	stall := 0
	verified := false
	for it := 0; it < limit; it++ {
		if err := tb.maybeReinvert(); err != nil {
			return 0, err
		}
		// Leaving row: largest violation (Bland: lowest basic column).
		r, best := -1, 0.0
		for i := range tb.m {
			v := tb.violation(i)
			if v == 0 {
				continue
			}
			if tb.bland {
				if r < 0 || tb.head[i] < tb.head[r] {
					r = i
				}
			} else if math.Abs(v) > best {
				r, best = i, math.Abs(v)
			}
		}
		if r < 0 {
			if done, err := tb.verify(&verified); !done {
				if err != nil {
					return 0, err
				}
				continue
			}
			return lpOptimal, nil
		}
		increase := tb.violation(r) > 0
		leave := tb.head[r]
		target := tb.ub[leave]
		if increase {
			target = tb.lb[leave]
		}
		// Entering column: x_leave moves by -α_j·Δ_j when x_j moves by
		// Δ_j; keep every reduced cost's sign (ratio |d_j/α_j|).
		tr := tb.t[r*nc : (r+1)*nc]
		q, ratio, qa := -1, math.Inf(1), 0.0
		for _, j := range tb.live {
			alpha := tr[j]
			if tb.row[j] >= 0 || math.Abs(alpha) <= pivotTol || tb.lb[j] == tb.ub[j] {
				continue
			}
			// Direction x_j must move so x_leave moves the right way.
			up := (alpha < 0) == increase
			if up && tb.x[j] >= tb.ub[j] || !up && tb.x[j] <= tb.lb[j] {
				continue
			}
			dj := tb.d[j]
			if up {
				dj = math.Max(dj, 0)
			} else {
				dj = math.Max(-dj, 0)
			}
			rt := dj / math.Abs(alpha)
			switch {
			case q < 0 || rt < ratio-1e-12:
			case tb.bland && rt <= ratio+1e-12 && j < q:
			case !tb.bland && rt <= ratio+1e-12 && math.Abs(alpha) > math.Abs(qa):
			default:
				continue
			}
			q, ratio, qa = j, rt, alpha
		}
		if q < 0 {
			return lpInfeasible, nil
		}
		if ratio < 1e-12 {
			stall++
			if stall > stallMax {
				tb.bland = true
			}
		} else {
			stall = 0
		}
		delta := (tb.x[leave] - target) / qa
		tb.move(q, delta)
		tb.pivot(r, q)
		tb.x[leave] = target
	}
	return 0, fmt.Errorf("%w: dual simplex: iteration limit %d", errSimplex, limit)
}

// move changes nonbasic x_q by delta and the basic values with it.
func (tb *tableau) move(q int, delta float64) {
	if delta == 0 {
		return
	}
	nc := tb.nc
	for i := range tb.m {
		if v := tb.t[i*nc+q]; v != 0 {
			tb.x[tb.head[i]] -= v * delta
		}
	}
	tb.x[q] += delta
}

// primal runs the primal simplex from a primal feasible basis.
func (tb *tableau) primal() (lpStatus, error) {
	nc := tb.nc
	limit := iterMul*(tb.m+nc) + 1000
	stall := 0
	verified := false
	for it := 0; it < limit; it++ {
		if err := tb.maybeReinvert(); err != nil {
			return 0, err
		}
		// Entering column: most attractive reduced cost (Bland: lowest).
		q, best, dir := -1, 0.0, 0.0
		for _, j := range tb.live {
			if tb.row[j] >= 0 || tb.lb[j] == tb.ub[j] {
				continue
			}
			dj := tb.d[j]
			var s float64
			switch {
			case dj < -dualTol && tb.x[j] < tb.ub[j]:
				s = 1
			case dj > dualTol && tb.x[j] > tb.lb[j]:
				s = -1
			default:
				continue
			}
			if tb.bland {
				q, dir = j, s
				break
			}
			if math.Abs(dj) > best {
				q, best, dir = j, math.Abs(dj), s
			}
		}
		if q < 0 {
			if done, err := tb.verify(&verified); !done {
				if err != nil {
					return 0, err
				}
				continue
			}
			return lpOptimal, nil
		}
		// Ratio test: x_B,i moves by g_i·θ with g_i = -t_iq·dir; the
		// entering column itself may reach its other bound first.
		theta := tb.ub[q] - tb.lb[q]
		r, ra := -1, 0.0
		for i := range tb.m {
			g := -tb.t[i*nc+q] * dir
			if math.Abs(g) <= pivotTol {
				continue
			}
			j := tb.head[i]
			var lim float64
			if g < 0 {
				lim = (tb.x[j] - tb.lb[j]) / -g
			} else {
				lim = (tb.ub[j] - tb.x[j]) / g
			}
			lim = math.Max(lim, 0)
			if math.IsInf(lim, 1) || math.IsNaN(lim) {
				continue
			}
			switch {
			case lim < theta-1e-12:
			case lim <= theta+1e-12 && r >= 0 && (tb.bland && j < tb.head[r] || !tb.bland && math.Abs(g) > math.Abs(ra)):
			default:
				continue
			}
			r, theta, ra = i, lim, g
		}
		if math.IsInf(theta, 1) || theta > bigValue {
			return lpUnbounded, nil
		}
		if theta < 1e-12 {
			stall++
			if stall > stallMax {
				tb.bland = true
			}
		} else {
			stall = 0
		}
		tb.move(q, dir*theta)
		if r < 0 {
			// Bound flip: the entering column crossed its whole range.
			if dir > 0 {
				tb.x[q] = tb.ub[q]
			} else {
				tb.x[q] = tb.lb[q]
			}
			continue
		}
		leave := tb.head[r]
		tb.pivot(r, q)
		if ra < 0 {
			tb.x[leave] = tb.lb[leave]
		} else {
			tb.x[leave] = tb.ub[leave]
		}
	}
	return 0, fmt.Errorf("%w: primal simplex: iteration limit %d", errSimplex, limit)
}

// verify checks an apparently optimal point against the original rows.
// On drift it reinverts once and asks the caller to iterate again; drift
// that survives a reinversion is an error.
func (tb *tableau) verify(verified *bool) (done bool, err error) {
	if tb.residualOK() {
		return true, nil
	}
	if *verified {
		return false, fmt.Errorf("%w: rows violated after reinversion", errSimplex)
	}
	*verified = true
	return false, tb.reinvert()
}

// residualOK checks the rows against the original (sparse) coefficients.
func (tb *tableau) residualOK() bool {
	for i, r := range tb.rows {
		s := tb.x[tb.n+i]
		scale := math.Max(1, math.Abs(s))
		for k, j := range r.idx {
			v := r.coef[k] * tb.x[j]
			s += v
			scale = math.Max(scale, math.Abs(v))
		}
		if math.Abs(s) > 1e-9*scale {
			return false
		}
	}
	return true
}
