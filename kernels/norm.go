package kernels

import "math"

// colBlock is the column width of the float64 accumulators that reduce
// over rows (norm weight gradients, broadcast gradients): a stack array, so
// the reduction allocates nothing and each column block belongs to one
// goroutine.
const colBlock = 64

// RMSNorm computes out = x / sqrt(mean(x^2) + eps) * w over rows of d.
func RMSNorm(out, x, w []float32, rows, d int, eps float32) {
	checkLen("RMSNorm out", out, rows*d)
	checkLen("RMSNorm x", x, rows*d)
	checkLen("RMSNorm w", w, d)
	w = w[:d]
	parallelFor(rows, 4*d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			rmsNormRow(out[r*d:(r+1)*d], x[r*d:(r+1)*d], w, eps)
		}
	})
}

func rmsNormRow(out, x, w []float32, eps float32) {
	rs := rmsRstd(x, eps)
	for j, v := range x {
		out[j] = v * rs * w[j]
	}
}

// AddRMSNorm is Add then RMSNorm, row by row while each row is in cache:
// y = x + r (rounded to bfloat16 when bf16, as y is stored), then h =
// RMSNorm(y): the unfused ops' bits.
func AddRMSNorm(y, h, x, r, w []float32, rows, d int, eps float32, bf16 bool) {
	checkLen("AddRMSNorm y", y, rows*d)
	checkLen("AddRMSNorm h", h, rows*d)
	checkLen("AddRMSNorm x", x, rows*d)
	checkLen("AddRMSNorm r", r, rows*d)
	checkLen("AddRMSNorm w", w, d)
	w = w[:d]
	parallelFor(rows, 5*d, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			yr, xr, rr := y[i*d:(i+1)*d], x[i*d:(i+1)*d], r[i*d:(i+1)*d]
			for j := range yr {
				yr[j] = xr[j] + rr[j]
			}
			if bf16 {
				for j, v := range yr {
					yr[j] = RoundBF16(v)
				}
			}
			rmsNormRow(h[i*d:(i+1)*d], yr, w, eps)
		}
	})
}

// rmsRstd is 1/sqrt(mean(x^2)+eps), accumulated in float64.
func rmsRstd(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// RMSNormGrad computes dx and dw from dy. With xh = x*rstd:
// dx = rstd * (dy*w - xh * mean(dy*w*xh)), dw = sum over rows of dy*xh.
func RMSNormGrad(dx, dw, x, w, dy []float32, rows, d int, eps float32) {
	rmsNormGrad("RMSNormGrad", dx, dw, x, w, dy, nil, rows, d, eps, false)
}

// AddRMSNormGrad is the backward of AddRMSNorm given the gradients dh of
// h and dy of y: RMSNormGrad(y, w, dh)'s dx (rounded to bfloat16 when
// bf16, as it would be stored) plus dy, row by row, and its dw: the bits
// of RMSNormGrad then Add.
func AddRMSNormGrad(dx, dw, y, w, dh, dy []float32, rows, d int, eps float32, bf16 bool) {
	checkLen("AddRMSNormGrad dy", dy, rows*d)
	rmsNormGrad("AddRMSNormGrad", dx, dw, y, w, dh, dy, rows, d, eps, bf16)
}

// rmsNormGrad is RMSNormGrad, each row's dx then rounded to bfloat16 when
// bf16 and added to add's row when add is not nil (AddRMSNormGrad).
func rmsNormGrad(name string, dx, dw, x, w, dy, add []float32, rows, d int, eps float32, bf16 bool) {
	checkLen(name+" dx", dx, rows*d)
	checkLen(name+" dw", dw, d)
	checkLen(name+" x", x, rows*d)
	checkLen(name+" w", w, d)
	checkLen(name+" dy", dy, rows*d)
	w = w[:d]
	rstdp := getF32(rows)
	defer putF32(rstdp)
	rstd := *rstdp
	parallelFor(rows, 9*d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			dxr := dx[r*d : (r+1)*d]
			rstd[r] = rmsNormGradRow(dxr, x[r*d:(r+1)*d], w, dy[r*d:(r+1)*d], eps)
			if add == nil {
				continue
			}
			if bf16 {
				for j, v := range dxr {
					dxr[j] = RoundBF16(v)
				}
			}
			for j, a := range add[r*d : (r+1)*d] {
				dxr[j] += a
			}
		}
	})
	rmsNormGradW(dw, x, dy, rstd, rows, d)
}

// rmsNormGradRow is RMSNormGrad's dx of one row; it returns the row's
// rstd.
func rmsNormGradRow(dx, x, w, dy []float32, eps float32) float32 {
	rs := rmsRstd(x, eps)
	var dot float64
	for j, v := range x {
		dot += float64(dy[j]*w[j]) * float64(v*rs)
	}
	c := float32(dot / float64(len(x)))
	for j, v := range x {
		dx[j] = rs * (dy[j]*w[j] - v*rs*c)
	}
	return rs
}

// rmsNormGradW is RMSNormGrad's dw from the rows' rstd.
func rmsNormGradW(dw, x, dy, rstd []float32, rows, d int) {
	reduceRows(dw[:d], nil, rows, d, func(r, j0 int, acc, _ *[colBlock]float64) {
		rs := rstd[r]
		xr := x[r*d+j0 : r*d+min(j0+colBlock, d)]
		dyr := dy[r*d+j0:]
		for j, v := range xr {
			acc[j] += float64(dyr[j] * (v * rs))
		}
	})
}

// LayerNorm computes out = (x - mean) / sqrt(var + eps) * w + b over rows
// of d, with the biased variance.
func LayerNorm(out, x, w, b []float32, rows, d int, eps float32) {
	checkLen("LayerNorm out", out, rows*d)
	checkLen("LayerNorm x", x, rows*d)
	checkLen("LayerNorm w", w, d)
	checkLen("LayerNorm b", b, d)
	w, b = w[:d], b[:d]
	parallelFor(rows, 6*d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, or := x[r*d:(r+1)*d], out[r*d:(r+1)*d]
			mean, rs := lnStats(xr, eps)
			for j, v := range xr {
				or[j] = (v-mean)*rs*w[j] + b[j]
			}
		}
	})
}

// lnStats returns the mean and 1/sqrt(var+eps) of x, two-pass in float64.
func lnStats(x []float32, eps float32) (mean, rstd float32) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	m := s / float64(len(x))
	var ss float64
	for _, v := range x {
		c := float64(v) - m
		ss += c * c
	}
	return float32(m), float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// LayerNormGrad computes dx, dw and db from dy. With xh = (x-mean)*rstd and
// g = dy*w: dx = rstd * (g - mean(g) - xh*mean(g*xh)), dw = sum dy*xh,
// db = sum dy (sums over rows).
func LayerNormGrad(dx, dw, db, x, w, dy []float32, rows, d int, eps float32) {
	checkLen("LayerNormGrad dx", dx, rows*d)
	checkLen("LayerNormGrad dw", dw, d)
	checkLen("LayerNormGrad db", db, d)
	checkLen("LayerNormGrad x", x, rows*d)
	checkLen("LayerNormGrad w", w, d)
	checkLen("LayerNormGrad dy", dy, rows*d)
	w = w[:d]
	statp := getF32(2 * rows)
	defer putF32(statp)
	means, rstd := (*statp)[:rows], (*statp)[rows:]
	parallelFor(rows, 10*d, func(lo, hi int) {
		for r := lo; r < hi; r++ {
			xr, dyr, dxr := x[r*d:(r+1)*d], dy[r*d:(r+1)*d], dx[r*d:(r+1)*d]
			mean, rs := lnStats(xr, eps)
			means[r], rstd[r] = mean, rs
			var sg, sgx float64
			for j, v := range xr {
				g := dyr[j] * w[j]
				sg += float64(g)
				sgx += float64(g) * float64((v-mean)*rs)
			}
			mg, mgx := float32(sg/float64(d)), float32(sgx/float64(d))
			for j, v := range xr {
				dxr[j] = rs * (dyr[j]*w[j] - mg - (v-mean)*rs*mgx)
			}
		}
	})
	reduceRows(dw[:d], db[:d], rows, d, func(r, j0 int, aw, ab *[colBlock]float64) {
		mean, rs := means[r], rstd[r]
		xr := x[r*d+j0 : r*d+min(j0+colBlock, d)]
		dyr := dy[r*d+j0:]
		for j, v := range xr {
			aw[j] += float64(dyr[j] * ((v - mean) * rs))
			ab[j] += float64(dyr[j])
		}
	})
}

// reduceRows fills dst1 (and dst2 unless nil), each of length d, with sums
// over rows: add(r, j0, acc1, acc2) adds row r's contribution to columns
// [j0, j0+colBlock) into the accumulators. Work is split by column blocks
// and each block sums its rows in order, so the result does not depend on
// the goroutine count.
func reduceRows(dst1, dst2 []float32, rows, d int, add func(r, j0 int, acc1, acc2 *[colBlock]float64)) {
	blocks := (d + colBlock - 1) / colBlock
	parallelFor(blocks, 2*rows*colBlock, func(lo, hi int) {
		for blk := lo; blk < hi; blk++ {
			j0 := blk * colBlock
			var acc1, acc2 [colBlock]float64
			for r := range rows {
				add(r, j0, &acc1, &acc2)
			}
			n := min(colBlock, d-j0)
			for j := range n {
				dst1[j0+j] = float32(acc1[j])
			}
			if dst2 != nil {
				for j := range n {
					dst2[j0+j] = float32(acc2[j])
				}
			}
		}
	})
}
