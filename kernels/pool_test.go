package kernels

import "testing"

// TestSizeClass: every request's class holds it with at most a quarter
// to spare, classes grow with the request, and a class's capacity maps
// back to the class (what putF32 relies on to pool a slice).
func TestSizeClass(t *testing.T) {
	prev := -1
	check := func(n int) {
		c, size := sizeClass(n)
		if size < n || (n > 16 && 4*size > 5*n+8) {
			t.Fatalf("request %d: capacity %d", n, size)
		}
		if c < prev || c >= numClasses {
			t.Fatalf("request %d: class %d after %d", n, c, prev)
		}
		if c2, s2 := sizeClass(size); c2 != c || s2 != size {
			t.Fatalf("request %d: class %d of capacity %d, but capacity %d is class %d of %d", n, c, size, size, c2, s2)
		}
		prev = c
	}
	for n := 0; n < 1<<20; n++ {
		check(n)
	}
	for n := 1 << 20; n < 1<<34; n += n/3 + 1 {
		check(n)
	}
}
