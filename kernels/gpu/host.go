package gpu

import "math"

// The host's side of some kernels: what a launcher prepares or finishes
// on the CPU, the same for the GPU and the host shim.

// Positions lists, for each id in [0, vocab), the positions where it
// occurs in ids, ascending: pos[start[v]:start[v+1]] (embed_grad_f32).
// ids must be in range (embed_f32 has checked them).
func Positions(ids []int32, vocab int) (start, pos []int32) {
	start = make([]int32, vocab+1)
	for _, id := range ids {
		start[id+1]++
	}
	for v := range vocab {
		start[v+1] += start[v]
	}
	pos = make([]int32, len(ids))
	next := append([]int32(nil), start[:vocab]...)
	for t, id := range ids {
		pos[next[id]] = int32(t)
		next[id]++
	}
	return start, pos
}

// ceChunk is kernels.CrossEntropy's chunk of rows.
const ceChunk = 64

// MeanLoss is the mean of cross_entropy_f32's per-row losses, added as
// kernels.CrossEntropy adds them: rows in order within chunks of 64, the
// chunks' sums in order.
func MeanLoss(loss []float64) float64 {
	if len(loss) == 0 {
		return 0
	}
	var total float64
	for c := 0; c < len(loss); c += ceChunk {
		var s float64
		for _, v := range loss[c:min(c+ceChunk, len(loss))] {
			s += v
		}
		total += s
	}
	return total / float64(len(loss))
}

// AdamWArgs are adamw_f32's last eight arguments for optimizer step t
// (from 1): beta1, 1-beta1, beta2, 1-beta2, the bias-corrected step size,
// sqrt(1-beta2^t), eps, and the decayed elements' factor 1-lr*wd, as
// kernels.AdamW computes them.
func AdamWArgs(t int, lr, beta1, beta2, eps, weightDecay float64) [8]float64 {
	ft := float64(t)
	return [8]float64{beta1, 1 - beta1, beta2, 1 - beta2, lr / (1 - math.Pow(beta1, ft)), math.Sqrt(1 - math.Pow(beta2, ft)), eps, 1 - lr*weightDecay}
}
