package solver

import "math"

// activity is the range of a row's left-hand side over a box. Infinite
// terms are counted rather than summed so that one of them can be taken
// back out (the bound a row implies on that very column).
type activity struct {
	min, max       float64 // finite parts
	minInf, maxInf int     // columns contributing -Inf / +Inf
}

// terms returns column j's contributions c·x_j to the minimum and maximum
// of a row over lo <= x_j <= hi.
func terms(c, lo, hi float64) (tmin, tmax float64) {
	if c > 0 {
		return c * lo, c * hi
	}
	return c * hi, c * lo
}

func (a *activity) add(c, lo, hi float64) {
	tmin, tmax := terms(c, lo, hi)
	if math.IsInf(tmin, 0) {
		a.minInf++
	} else {
		a.min += tmin
	}
	if math.IsInf(tmax, 0) {
		a.maxInf++
	} else {
		a.max += tmax
	}
}

// without returns a finite activity sum with one term taken out, or false
// when some other column still contributes an infinity.
func without(sum float64, nInf int, term float64) (float64, bool) {
	if math.IsInf(term, 0) {
		return sum, nInf == 1
	}
	return sum - term, nInf == 0
}

func rowActivity(r *mrow, lo, hi []float64) activity {
	var a activity
	for k, j := range r.idx {
		a.add(r.coef[k], lo[j], hi[j])
	}
	return a
}

// propagate tightens the bounds of integer columns from row activities
// (for a·x <= b: a_j·x_j <= b - min of the other terms, and the mirror
// image for >=) until nothing changes, and reports false when some row
// cannot be met. Only integer columns are tightened: rounding makes each
// step exact and finite, where tightening continuous bounds would add float
// noise for little gain. Typical effect in the planner: fixing one
// candidate to 1 forces the rest of its group to 0.
func (m *model) propagate(lo, hi []float64) bool {
	for pass := 0; pass < 20; pass++ {
		changed := false
		for i := range m.rows {
			r := &m.rows[i]
			act := rowActivity(r, lo, hi)
			tol := scaledTol(feasTol, r.rhs)
			le := r.sense == LE || r.sense == EQ
			ge := r.sense == GE || r.sense == EQ
			if le && act.minInf == 0 && act.min > r.rhs+tol ||
				ge && act.maxInf == 0 && act.max < r.rhs-tol {
				return false
			}
			for k, j := range r.idx {
				if !m.isInt[j] || hi[j]-lo[j] < 0.5 {
					continue
				}
				// act was summed with these bounds; updates made below
				// must not leak into the take-back.
				c := r.coef[k]
				tmin, tmax := terms(c, lo[j], hi[j])
				// limit: c·x_j <= v (upper) or c·x_j >= v (lower).
				tighten := func(v float64, upper bool) {
					if upper == (c > 0) {
						if nb := math.Floor(v/c + intTol); nb < hi[j] {
							hi[j], changed = nb, true
						}
					} else if nb := math.Ceil(v/c - intTol); nb > lo[j] {
						lo[j], changed = nb, true
					}
				}
				if rest, ok := without(act.min, act.minInf, tmin); le && ok {
					tighten(r.rhs-rest, true)
				}
				if rest, ok := without(act.max, act.maxInf, tmax); ge && ok {
					tighten(r.rhs-rest, false)
				}
				if lo[j] > hi[j] {
					return false
				}
			}
		}
		if !changed {
			return true
		}
	}
	return true
}
