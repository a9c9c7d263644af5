package kernels

import (
	"fmt"
	"math"
)

// ceChunk is the fixed row count of one partial sum of the cross-entropy
// loss; the partials are added in order, so the mean does not depend on
// the goroutine count.
const ceChunk = 64

// CrossEntropy returns the mean over rows of -log softmax(logits[r])[t_r]
// for logits [rows, vocab]. Each row's log-sum-exp is taken with exp in
// float64 and a float64 sum; the mean is float64. A target outside
// [0, vocab) is a user error naming the target and its position.
func CrossEntropy(logits []float32, targets []int32, rows, vocab int) (float64, error) {
	checkLen("CrossEntropy logits", logits, rows*vocab)
	if err := checkTargets(targets, rows, vocab); err != nil {
		return 0, err
	}
	if rows == 0 {
		return 0, nil
	}
	chunks := (rows + ceChunk - 1) / ceChunk
	pp := getF64(chunks)
	defer putF64(pp)
	partial := *pp
	lossPartials(partial, logits, targets, rows, vocab)
	var total float64
	for _, s := range partial {
		total += s
	}
	return total / float64(rows), nil
}

// lossPartials writes the loss summed over each ceChunk rows into
// partial (one per group, the last one short).
func lossPartials(partial []float64, logits []float32, targets []int32, rows, vocab int) {
	chunks := (rows + ceChunk - 1) / ceChunk
	parallelFor(chunks, ceChunk*vocab*10, func(lo, hi int) {
		for c := lo; c < hi; c++ {
			var s float64
			for r := c * ceChunk; r < min((c+1)*ceChunk, rows); r++ {
				row := logits[r*vocab : (r+1)*vocab]
				s += logSumExp(row) - float64(row[targets[r]])
			}
			partial[c] = s
		}
	})
}

func checkTargets(targets []int32, rows, vocab int) error {
	if len(targets) < rows {
		panic("kernels: CrossEntropy targets: buffer too short")
	}
	for i, t := range targets[:rows] {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("cross_entropy: target %d at position %d is outside [0, %d)", t, i, vocab)
		}
	}
	return nil
}

// logSumExp returns log(sum(exp(x))) of a row, shifted by its max.
func logSumExp(x []float32) float64 {
	mx := maxOf(x)
	var s float64
	var e [expChunk]float64
	for c := 0; c < len(x); c += expChunk {
		xs := x[c:min(c+expChunk, len(x))]
		b := e[:len(xs)]
		for j, v := range xs {
			b[j] = float64(v - mx)
		}
		expInPlace(b)
		for _, v := range b {
			s += v
		}
	}
	return float64(mx) + math.Log(s)
}

// CrossEntropyGrad writes dlogits = (softmax(logits) - onehot(target)) *
// scale / rows, scale being the upstream gradient of the loss (1/(M*dp)
// for a micro-batch of a data-parallel step). Targets must be in range
// (CrossEntropy has checked them); an out-of-range target panics.
func CrossEntropyGrad(dlogits, logits []float32, targets []int32, rows, vocab int, scale float32) {
	checkLen("CrossEntropyGrad dlogits", dlogits, rows*vocab)
	checkLen("CrossEntropyGrad logits", logits, rows*vocab)
	if err := checkTargets(targets, rows, vocab); err != nil {
		panic("kernels: CrossEntropyGrad: " + err.Error())
	}
	softmaxGrad(dlogits, logits, targets, rows, vocab, float64(scale)/float64(rows))
}

// softmaxGrad writes dlogits = (softmax(logits) - onehot(target)) * f.
func softmaxGrad(dlogits, logits []float32, targets []int32, rows, vocab int, f float64) {
	parallelFor(rows, vocab*10, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			row, dr := logits[r*vocab:(r+1)*vocab], dlogits[r*vocab:(r+1)*vocab]
			lse := logSumExp(row)
			t := int(targets[r])
			var e [expChunk]float64
			for c := 0; c < vocab; c += expChunk {
				xs := row[c:min(c+expChunk, vocab)]
				b := e[:len(xs)]
				for j, v := range xs {
					b[j] = float64(v) - lse
				}
				expInPlace(b)
				for j, v := range b {
					if c+j == t {
						v--
					}
					dr[c+j] = float32(v * f)
				}
			}
		}
	})
}
