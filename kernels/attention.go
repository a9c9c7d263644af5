package kernels

import "math"

// attnBlock is the query rows one attention unit takes at a time: its
// scores block is attnBlock x seq.
const attnBlock = 64

// Attention computes softmax(q k^T / sqrt(hd)) v per head. q and out are
// [batch, seq, heads*hd], k and v [batch, seq, kvHeads*hd]; query head h
// reads kv head h/(heads/kvHeads); causal masks keys after the query. lse
// [batch, heads, seq] receives each row's log-sum-exp of the scaled
// scores, which is all AttentionGrad needs besides q, k, v and out (the
// seq x seq probabilities are never stored).
//
// A unit is a block of attnBlock query rows of one head: its scores
// S = Q K^T and its output P V are two matmuls on the gemm microkernel,
// over the keys up to the block's last row when causal (the blocks above
// the diagonal are skipped). Scores are float32 k-order sums; the softmax
// subtracts the row max in float32, takes exp in float64 rounded to
// float32, and sums in float64; the output row is P V times the
// reciprocal of that sum.
func Attention(out, lse, q, k, v []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	checkAttention(q, k, v, batch, seq, heads, kvHeads, hd)
	checkLen("Attention out", out, batch*seq*heads*hd)
	checkLen("Attention lse", lse, batch*heads*seq)
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	qs, kvs := heads*hd, kvHeads*hd // row strides
	blocks := (seq + attnBlock - 1) / attnBlock
	// Each unit writes its own out rows and lse entries, so any split is
	// deterministic.
	parallelFor(batch*heads*blocks, 4*attnBlock*seq*hd, func(lo, hi int) {
		sp, op := getF32(attnBlock*seq), getF32(attnBlock*hd)
		defer putF32(sp)
		defer putF32(op)
		for u := lo; u < hi; u++ {
			b, h, blk := u/(heads*blocks), u/blocks%heads, u%blocks
			g := h / group
			i0 := blk * attnBlock
			rows := min(attnBlock, seq-i0)
			n := seq
			if causal {
				n = i0 + rows
			}
			s, o := (*sp)[:rows*n], (*op)[:rows*hd]
			kb, vb := k[b*seq*kvs+g*hd:], v[b*seq*kvs+g*hd:]
			gemm(1, s, view{q[(b*seq+i0)*qs+h*hd:], qs, 1}, view{kb, 1, kvs}, rows, hd, n)
			var sums [attnBlock]float64
			for r := range rows {
				row := s[r*n : (r+1)*n]
				m := n
				if causal {
					m = i0 + r + 1
				}
				mx := scaleMax(row[:m], scale)
				var sum float64
				var e [expChunk]float64
				for c := 0; c < m; c += expChunk {
					xs := row[c:min(c+expChunk, m)]
					b := e[:len(xs)]
					for j, v := range xs {
						b[j] = float64(v - mx)
					}
					expInPlace(b)
					for j, v := range b {
						p := float32(v)
						xs[j] = p
						sum += float64(p)
					}
				}
				clear(row[m:])
				sums[r] = sum
				lse[(b*heads+h)*seq+i0+r] = float32(float64(mx) + math.Log(sum))
			}
			gemm(1, o, view{s, n, 1}, view{vb, kvs, 1}, rows, n, hd)
			for r := range rows {
				inv := float32(1 / sums[r])
				oi := out[(b*seq+i0+r)*qs+h*hd:][:hd]
				for e, x := range o[r*hd : (r+1)*hd] {
					oi[e] = x * inv
				}
			}
		}
	})
}

// AttentionGrad computes dq, dk, dv from dout, flash-attention style: the
// probabilities are recomputed as p = exp(s - lse), and with
// D = dout . out per row, ds = p * (dout . v_j - D).
//
// A unit is one (batch, kv head): it owns dq of the query heads in its
// group and dk, dv of its kv head. Per query block of each head (heads,
// then blocks, in order) five matmuls: S = Q K^T, dP = dO V^T, dQ = dS K,
// and the block's dK += dS^T Q and dV += P^T dO, added into dk and dv in
// that fixed order. So dk and dv are never shared between goroutines and
// their sums do not depend on the worker count; the parallelism is
// batch*kvHeads.
func AttentionGrad(dq, dk, dv, q, k, v, out, lse, dout []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	checkAttention(q, k, v, batch, seq, heads, kvHeads, hd)
	nq, nkv := batch*seq*heads*hd, batch*seq*kvHeads*hd
	checkLen("AttentionGrad dq", dq, nq)
	checkLen("AttentionGrad dk", dk, nkv)
	checkLen("AttentionGrad dv", dv, nkv)
	checkLen("AttentionGrad out", out, nq)
	checkLen("AttentionGrad dout", dout, nq)
	checkLen("AttentionGrad lse", lse, batch*heads*seq)
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	qs, kvs := heads*hd, kvHeads*hd
	blocks := (seq + attnBlock - 1) / attnBlock
	parallelFor(batch*kvHeads, 10*group*seq*seq*hd, func(lo, hi int) {
		sp, dpp := getF32(attnBlock*seq), getF32(attnBlock*seq)
		tp := getF32(max(seq, attnBlock) * hd)
		defer putF32(sp)
		defer putF32(dpp)
		defer putF32(tp)
		for u := lo; u < hi; u++ {
			b, g := u/kvHeads, u%kvHeads
			kb, vb := k[b*seq*kvs+g*hd:], v[b*seq*kvs+g*hd:]
			dkb, dvb := dk[b*seq*kvs+g*hd:], dv[b*seq*kvs+g*hd:]
			for j := range seq {
				clear(dkb[j*kvs : j*kvs+hd])
				clear(dvb[j*kvs : j*kvs+hd])
			}
			for h := g * group; h < (g+1)*group; h++ {
				for blk := range blocks {
					i0 := blk * attnBlock
					rows := min(attnBlock, seq-i0)
					n := seq
					if causal {
						n = i0 + rows
					}
					row0 := (b*seq+i0)*qs + h*hd
					qv, dov := view{q[row0:], qs, 1}, view{dout[row0:], qs, 1}
					s, dp := (*sp)[:rows*n], (*dpp)[:rows*n]
					gemm(1, s, qv, view{kb, 1, kvs}, rows, hd, n)
					gemm(1, dp, dov, view{vb, 1, kvs}, rows, hd, n)
					// s becomes P, dp becomes dS (both zero past the mask).
					for r := range rows {
						i := i0 + r
						m := n
						if causal {
							m = i + 1
						}
						l := lse[(b*heads+h)*seq+i]
						d := dot(dout[(b*seq+i)*qs+h*hd:][:hd], out[(b*seq+i)*qs+h*hd:][:hd])
						ps, ds := s[r*n:(r+1)*n], dp[r*n:(r+1)*n]
						var e [expChunk]float64
						for c := 0; c < m; c += expChunk {
							xs, dxs := ps[c:min(c+expChunk, m)], ds[c:]
							b := e[:len(xs)]
							for j, v := range xs {
								b[j] = float64(v*scale - l)
							}
							expInPlace(b)
							for j, v := range b {
								p := float32(v)
								xs[j] = p
								dxs[j] = p * (dxs[j] - d) * scale
							}
						}
						clear(ps[m:])
						clear(ds[m:])
					}
					t := (*tp)[:rows*hd]
					gemm(1, t, view{dp, n, 1}, view{kb, kvs, 1}, rows, n, hd)
					for r := range rows {
						copy(dq[row0+r*qs:][:hd], t[r*hd:(r+1)*hd])
					}
					t = (*tp)[:n*hd]
					gemm(1, t, view{dp, 1, n}, qv, n, rows, hd)
					for j := range n {
						axpy(dkb[j*kvs:j*kvs+hd], 1, t[j*hd:(j+1)*hd])
					}
					gemm(1, t, view{s, 1, n}, dov, n, rows, hd)
					for j := range n {
						axpy(dvb[j*kvs:j*kvs+hd], 1, t[j*hd:(j+1)*hd])
					}
				}
			}
		}
	})
}

func checkAttention(q, k, v []float32, batch, seq, heads, kvHeads, hd int) {
	if heads <= 0 || kvHeads <= 0 || heads%kvHeads != 0 {
		panic("kernels: Attention: kvHeads must divide heads")
	}
	checkLen("Attention q", q, batch*seq*heads*hd)
	checkLen("Attention k", k, batch*seq*kvHeads*hd)
	checkLen("Attention v", v, batch*seq*kvHeads*hd)
}

// dot is a float32 dot product with four partial sums (fixed order:
// ((s0+s1)+(s2+s3)) + tail), which keeps four adds in flight.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+4 <= len(a); i += 4 {
		s0 += a[i] * b[i]
		s1 += a[i+1] * b[i+1]
		s2 += a[i+2] * b[i+2]
		s3 += a[i+3] * b[i+3]
	}
	s := (s0 + s1) + (s2 + s3)
	for ; i < len(a); i++ {
		s += a[i] * b[i]
	}
	return s
}

// axpy computes y += alpha*x.
func axpy(y []float32, alpha float32, x []float32) {
	x = x[:len(y)]
	for i, v := range x {
		y[i] += alpha * v
	}
}

// scaleMax multiplies x by scale in place and returns the largest
// result (-Inf for none).
func scaleMax(x []float32, scale float32) float32 {
	for i := range x {
		x[i] *= scale
	}
	return maxOf(x)
}

// maxOf is the largest of x (-Inf for none), with four running maxima:
// max is exact, so the order does not change it. A NaN is skipped here
// and caught downstream (exp of it is NaN, and so is the row's sum).
func maxOf(x []float32) float32 {
	m0, m1, m2, m3 := float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1)), float32(math.Inf(-1))
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		if v[0] > m0 {
			m0 = v[0]
		}
		if v[1] > m1 {
			m1 = v[1]
		}
		if v[2] > m2 {
			m2 = v[2]
		}
		if v[3] > m3 {
			m3 = v[3]
		}
	}
	for ; i < len(x); i++ {
		if x[i] > m0 {
			m0 = x[i]
		}
	}
	if m1 > m0 {
		m0 = m1
	}
	if m3 > m2 {
		m2 = m3
	}
	if m2 > m0 {
		m0 = m2
	}
	return m0
}
