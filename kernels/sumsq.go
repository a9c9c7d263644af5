package kernels

// sumSqChunk is the run of elements SumSquares adds on its own before
// the runs' sums are added in order: the split is fixed, so the result
// does not depend on how many goroutines share the work.
const sumSqChunk = 1 << 14

// SumSquares is the sum of x's squares, in float64: each fixed run of
// sumSqChunk elements summed in order, then the runs' sums in order.
func SumSquares(x []float32) float64 {
	runs := (len(x) + sumSqChunk - 1) / sumSqChunk
	if runs == 0 {
		return 0
	}
	part := make([]float64, runs)
	parallelFor(runs, sumSqChunk, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			var s float64
			for _, v := range x[r*sumSqChunk : min((r+1)*sumSqChunk, len(x))] {
				s += float64(v) * float64(v)
			}
			part[r] = s
		}
	})
	var total float64
	for _, s := range part {
		total += s
	}
	return total
}
