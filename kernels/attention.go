package kernels

import "math"

// Attention computes softmax(q k^T / sqrt(hd)) v per head. q and out are
// [batch, seq, heads*hd], k and v [batch, seq, kvHeads*hd]; query head h
// reads kv head h/(heads/kvHeads); causal masks keys after the query. lse
// [batch, heads, seq] receives each row's log-sum-exp of the scaled
// scores, which is all AttentionGrad needs besides q, k, v and out (the
// seq x seq probabilities are never stored).
//
// Scores are float32 dot products; the softmax subtracts the row max in
// float32, takes exp in float64 rounded to float32, and sums in float64.
func Attention(out, lse, q, k, v []float32, batch, seq, heads, kvHeads, hd int, causal bool) {
	checkAttention(q, k, v, batch, seq, heads, kvHeads, hd)
	checkLen("Attention out", out, batch*seq*heads*hd)
	checkLen("Attention lse", lse, batch*heads*seq)
	group := heads / kvHeads
	scale := float32(1 / math.Sqrt(float64(hd)))
	qs, kvs := heads*hd, kvHeads*hd // row strides
	// One unit is one query row of one head; each writes its own out row
	// and lse entry, so any split is deterministic.
	parallelFor(batch*heads*seq, 4*seq*hd, func(lo, hi int) {
		sp := getF32(seq)
		defer putF32(sp)
		s := *sp
		for u := lo; u < hi; u++ {
			b, h, i := u/(heads*seq), u/seq%heads, u%seq
			g := h / group
			qi := q[(b*seq+i)*qs+h*hd:][:hd]
			oi := out[(b*seq+i)*qs+h*hd:][:hd]
			kb, vb := k[b*seq*kvs+g*hd:], v[b*seq*kvs+g*hd:]
			n := seq
			if causal {
				n = i + 1
			}
			mx := float32(math.Inf(-1))
			for j := range n {
				s[j] = dot(qi, kb[j*kvs:j*kvs+hd]) * scale
				mx = max(mx, s[j])
			}
			var sum float64
			for j := range n {
				p := float32(math.Exp(float64(s[j] - mx)))
				s[j] = p
				sum += float64(p)
			}
			clear(oi)
			for j := range n {
				axpy(oi, s[j], vb[j*kvs:j*kvs+hd])
			}
			inv := float32(1 / sum)
			for e := range oi {
				oi[e] *= inv
			}
			lse[(b*heads+h)*seq+i] = float32(float64(mx) + math.Log(sum))
		}
	})
}

// AttentionGrad computes dq, dk, dv from dout, flash-attention style: the
// probabilities are recomputed as p = exp(s - lse), and with
// D = dout . out per row, ds = p * (dout . v_j - D).
//
// A unit is one (batch, kv head): it owns dq of the query heads in its
// group and dk, dv of its kv head, summing over those query heads and then
// over query rows in order. So dk and dv are never shared between
// goroutines; the parallelism is batch*kvHeads.
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
	parallelFor(batch*kvHeads, 8*group*seq*seq*hd, func(lo, hi int) {
		for u := lo; u < hi; u++ {
			b, g := u/kvHeads, u%kvHeads
			kb, vb := k[b*seq*kvs+g*hd:], v[b*seq*kvs+g*hd:]
			dkb, dvb := dk[b*seq*kvs+g*hd:], dv[b*seq*kvs+g*hd:]
			for j := range seq {
				clear(dkb[j*kvs : j*kvs+hd])
				clear(dvb[j*kvs : j*kvs+hd])
			}
			for h := g * group; h < (g+1)*group; h++ {
				for i := range seq {
					row := (b*seq+i)*qs + h*hd
					qi, oi, doi := q[row:row+hd], out[row:row+hd], dout[row:row+hd]
					dqi := dq[row : row+hd]
					clear(dqi)
					l := lse[(b*heads+h)*seq+i]
					d := dot(doi, oi)
					n := seq
					if causal {
						n = i + 1
					}
					for j := range n {
						kj, vj := kb[j*kvs:j*kvs+hd], vb[j*kvs:j*kvs+hd]
						p := float32(math.Exp(float64(dot(qi, kj)*scale - l)))
						ds := p * (dot(doi, vj) - d) * scale
						axpy(dqi, ds, kj)
						axpy(dkb[j*kvs:j*kvs+hd], ds, qi)
						axpy(dvb[j*kvs:j*kvs+hd], p, doi)
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
