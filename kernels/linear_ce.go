package kernels

// LinearCrossEntropy returns CrossEntropy(h @ w, targets) for h [rows, d]
// and w [d, vocab], forming the logits chunk rows at a time (a multiple
// of 64, the loss's partial sums, unless it is all the rows): never
// more than chunk x vocab of them at once. With bf16 the logits are
// rounded to bf16, as a bf16 matmul's stored result is. The bits are
// those of MatMul then CrossEntropy (each logit is a row of h times w in
// one order, and the partial sums are the same groups, added in order).
func LinearCrossEntropy(h, w []float32, targets []int32, rows, d, vocab, chunk int, bf16 bool) (float64, error) {
	checkLen("LinearCrossEntropy h", h, rows*d)
	checkLen("LinearCrossEntropy w", w, d*vocab)
	checkLinearChunk(rows, chunk)
	if err := checkTargets(targets, rows, vocab); err != nil {
		return 0, err
	}
	if rows == 0 {
		return 0, nil
	}
	lp := getF32(min(chunk, rows) * vocab)
	defer putF32(lp)
	pp := getF64((rows + ceChunk - 1) / ceChunk)
	defer putF64(pp)
	partial := *pp
	pw := PackB(w, d, vocab)
	defer pw.Free()
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		logits := (*lp)[:n*vocab]
		MatMulPacked(logits, h[r0*d:(r0+n)*d], pw, n)
		if bf16 {
			roundBF16s(logits)
		}
		lossPartials(partial[r0/ceChunk:], logits, targets[r0:], n, vocab)
	}
	var total float64
	for _, s := range partial {
		total += s
	}
	return total / float64(rows), nil
}

// LinearCrossEntropyGrad writes dh [rows, d] and dw [d, vocab], the
// gradients of LinearCrossEntropy times scale, chunk rows at a time: each
// chunk's logits again, their gradient (CrossEntropyGrad's, scale over
// all the rows; rounded to bf16 with bf16), dh's rows from it, and dw
// accumulated over the chunks in row order (MatMulGradBAcc). The bits
// are those of MatMul, CrossEntropyGrad, MatMulGradA and MatMulGradB.
// Targets must be in range (LinearCrossEntropy has checked them).
func LinearCrossEntropyGrad(dh, dw, h, w []float32, targets []int32, rows, d, vocab, chunk int, bf16 bool, scale float32) {
	checkLen("LinearCrossEntropyGrad dh", dh, rows*d)
	checkLen("LinearCrossEntropyGrad dw", dw, d*vocab)
	checkLen("LinearCrossEntropyGrad h", h, rows*d)
	checkLen("LinearCrossEntropyGrad w", w, d*vocab)
	checkLinearChunk(rows, chunk)
	if err := checkTargets(targets, rows, vocab); err != nil {
		panic("kernels: LinearCrossEntropyGrad: " + err.Error())
	}
	if rows == 0 {
		clear(dw[:d*vocab])
		return
	}
	lp := getF32(min(chunk, rows) * vocab)
	defer putF32(lp)
	pw, pwt := PackB(w, d, vocab), PackBT(w, d, vocab)
	defer pw.Free()
	defer pwt.Free()
	f := float64(scale) / float64(rows)
	for r0 := 0; r0 < rows; r0 += chunk {
		n := min(chunk, rows-r0)
		logits := (*lp)[:n*vocab]
		hc := h[r0*d : (r0+n)*d]
		MatMulPacked(logits, hc, pw, n)
		if bf16 {
			roundBF16s(logits)
		}
		softmaxGrad(logits, logits, targets[r0:], n, vocab, f) // row by row: in place is safe
		if bf16 {
			roundBF16s(logits)
		}
		MatMulGradAPacked(dh[r0*d:(r0+n)*d], logits, pwt, n)
		if r0 == 0 {
			MatMulGradB(dw, hc, logits, n, d, vocab)
		} else {
			MatMulGradBAcc(dw, hc, logits, n, d, vocab)
		}
	}
}

func checkLinearChunk(rows, chunk int) {
	if chunk <= 0 || (chunk < rows && chunk%ceChunk != 0) {
		panic("kernels: linear cross-entropy chunk must be a positive multiple of 64 rows, or all of them")
	}
}

// roundBF16s rounds x's values to bf16 in place (RoundBF16).
func roundBF16s(x []float32) {
	for i, v := range x {
		x[i] = RoundBF16(v)
	}
}
