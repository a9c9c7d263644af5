package runtime

// SharedGatherBuffers is how many of rank 0's buffers a shared all-gather
// can fill (for tests in package runtime_test).
func SharedGatherBuffers(r *Run) int {
	n := 0
	for _, ok := range r.ranks[0].shareable {
		if ok {
			n++
		}
	}
	return n
}
