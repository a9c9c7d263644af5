// Package solver solves small mixed-integer linear programs for the planner.
//
// In: a Problem — minimise Obj·x over sparse rows (<=, >=, ==), column
// bounds (Lower may be -Inf, Upper +Inf) and integrality flags. Out: a
// Solution with a Status, the best x found (integer columns rounded), its
// objective and the number of branch-and-bound nodes explored. Solve returns
// an error only for a malformed problem (length mismatch, NaN or infinite
// data, Lower > Upper, bad row index or sense) or when the LP engine fails
// numerically; infeasible and unbounded problems are statuses, not errors.
//
// We carry our own branch and bound because the project's intended solver,
// HiGHS through github.com/bartolsthoorn/gohighs, is not reachable from the
// module proxy (403) and Debian 12 ships no HiGHS. Callers code against the
// Solver interface, so a HiGHS binding can drop in later without touching
// them.
//
// Files: bb.go is the search, presolve.go the bound propagation run at every
// node, simplex.go the LP engine (a bounded dual simplex on a dense tableau,
// warm-started from node to node, gonum's LU for reinversion), gonum.go the
// fallback that rebuilds each node LP for gonum's lp.Simplex. The first
// design used lp.Simplex for every node; with no warm start, no bounded
// variables and no duals (so no reduced-cost fixing) it took 0.8-2 s per
// planner-shaped problem (2,912 columns), against ~35 ms for the tableau.
// BenchmarkPlannerShape runs both.
package solver

import (
	"errors"
	"fmt"
	"math"
)

// Sense of a constraint row.
type Sense uint8

const (
	LE Sense = iota // Row·x <= RHS
	GE              // Row·x >= RHS
	EQ              // Row·x == RHS
)

func (s Sense) String() string {
	switch s {
	case LE:
		return "<="
	case GE:
		return ">="
	case EQ:
		return "=="
	}
	return fmt.Sprintf("Sense(%d)", uint8(s))
}

// Problem: minimise Obj·x subject to Rows, Lower <= x <= Upper and x[j]
// integral where Integer[j].
type Problem struct {
	Obj     []float64 // length n
	Lower   []float64 // length n (use 0 for binaries); -Inf allowed
	Upper   []float64 // length n; +Inf allowed
	Integer []bool    // length n
	Rows    []Row
}

// Row is one sparse constraint. Repeated column indices are summed.
type Row struct {
	Idx   []int // column indices
	Coef  []float64
	Sense Sense
	RHS   float64
}

// Status of a solve.
type Status uint8

const (
	Optimal    Status = iota // X is optimal (within BranchAndBound.Gap)
	Infeasible               // no point satisfies rows, bounds and integrality
	Unbounded                // the LP relaxation is unbounded (the MILP is unbounded or infeasible)
	Limit                    // node limit hit; X is the best found (may be nil)
)

func (s Status) String() string {
	switch s {
	case Optimal:
		return "optimal"
	case Infeasible:
		return "infeasible"
	case Unbounded:
		return "unbounded"
	case Limit:
		return "limit"
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// Solution of a Problem. X and Obj are meaningful for Optimal, and for Limit
// when X is non-nil.
type Solution struct {
	Status Status
	X      []float64
	Obj    float64
	Nodes  int // branch-and-bound nodes explored
}

// Solver solves a MILP. Implementations: BranchAndBound (pure Go, default).
type Solver interface {
	Name() string
	// Solve returns an error only for malformed problems (length
	// mismatches, NaN, lower > upper) or a numerical failure of the LP
	// engine.
	Solve(p *Problem) (*Solution, error)
}

// Default returns the solver the planner should use.
func Default() Solver { return BranchAndBound{} }

// ErrMalformed is wrapped by every error about the shape or values of a
// Problem.
var ErrMalformed = errors.New("malformed problem")

// validate checks p; the messages name the offending column or row.
func validate(p *Problem) error {
	if p == nil {
		return fmt.Errorf("solver: %w: nil problem", ErrMalformed)
	}
	n := len(p.Obj)
	bad := func(format string, args ...any) error {
		return fmt.Errorf("solver: %w: "+format, append([]any{ErrMalformed}, args...)...)
	}
	if len(p.Lower) != n || len(p.Upper) != n || len(p.Integer) != n {
		return bad("len(Obj)=%d, len(Lower)=%d, len(Upper)=%d, len(Integer)=%d",
			n, len(p.Lower), len(p.Upper), len(p.Integer))
	}
	for j := 0; j < n; j++ {
		c, l, u := p.Obj[j], p.Lower[j], p.Upper[j]
		switch {
		case math.IsNaN(c) || math.IsInf(c, 0):
			return bad("column %d: objective coefficient %v", j, c)
		case math.IsNaN(l) || math.IsInf(l, 1):
			return bad("column %d: lower bound %v", j, l)
		case math.IsNaN(u) || math.IsInf(u, -1):
			return bad("column %d: upper bound %v", j, u)
		case l > u:
			return bad("column %d: lower bound %v > upper bound %v", j, l, u)
		}
	}
	for i, r := range p.Rows {
		if len(r.Idx) != len(r.Coef) {
			return bad("row %d: %d indices but %d coefficients", i, len(r.Idx), len(r.Coef))
		}
		if r.Sense > EQ {
			return bad("row %d: sense %d", i, uint8(r.Sense))
		}
		if math.IsNaN(r.RHS) || math.IsInf(r.RHS, 0) {
			return bad("row %d: right-hand side %v", i, r.RHS)
		}
		for k, j := range r.Idx {
			if j < 0 || j >= n {
				return bad("row %d: column index %d out of range [0,%d)", i, j, n)
			}
			if a := r.Coef[k]; math.IsNaN(a) || math.IsInf(a, 0) {
				return bad("row %d: coefficient %v on column %d", i, a, j)
			}
		}
	}
	return nil
}
