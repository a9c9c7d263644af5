package engine

import "testing"

// TestElemRanges: the union that findOverwritten keeps of what a buffer's
// first uses wrote.
func TestElemRanges(t *testing.T) {
	var r elemRanges
	r.add(elemRange{10, 20})
	r.add(elemRange{30, 40})
	for _, c := range []struct {
		x    elemRange
		want bool
	}{{elemRange{10, 20}, true}, {elemRange{12, 15}, true}, {elemRange{15, 25}, false}, {elemRange{0, 5}, false}, {elemRange{20, 30}, false}, {elemRange{5, 5}, true}} {
		if got := r.cover(c.x); got != c.want {
			t.Errorf("cover(%v) of %v = %v, want %v", c.x, r, got, c.want)
		}
	}
	r.add(elemRange{20, 30}) // adjacent on both sides: one range
	if len(r) != 1 || r[0] != (elemRange{10, 40}) || !r.cover(elemRange{10, 40}) {
		t.Errorf("after filling the gap: %v, want [{10 40}]", r)
	}
	r.add(elemRange{0, 50})
	if len(r) != 1 || r[0] != (elemRange{0, 50}) {
		t.Errorf("after a covering add: %v", r)
	}
}
