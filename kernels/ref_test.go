package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// Test scaffolding: float64 reference implementations of every forward op,
// written as the plainest loops of NUMERICS.md, and central finite
// differences of L = sum(ref(inputs) * r) for the backward checks.

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x6b65726e656c73)) }

// randVec returns n standard normal values as float32 and the same values
// widened to float64.
func randVec(rng *rand.Rand, n int) ([]float32, []float64) {
	f := make([]float32, n)
	d := make([]float64, n)
	for i := range f {
		f[i] = float32(rng.NormFloat64())
		d[i] = float64(f[i])
	}
	return f, d
}

func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}

// checkClose fails unless |got-want| <= rtol*(|want| + mean|want|) element
// by element: relative where values are large, absolute at the scale of the
// tensor where they are near zero.
func checkClose(t *testing.T, name string, got []float32, want []float64, rtol float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	var mean float64
	for _, w := range want {
		mean += math.Abs(w)
	}
	mean /= float64(max(len(want), 1))
	bad := 0
	for i := range want {
		g, w := float64(got[i]), want[i]
		if !(math.Abs(g-w) <= rtol*(math.Abs(w)+mean)) {
			if bad < 5 {
				t.Errorf("%s[%d] = %.8g, want %.8g (rtol %g)", name, i, g, w, rtol)
			}
			bad++
		}
	}
	if bad > 5 {
		t.Errorf("%s: %d of %d values off", name, bad, len(want))
	}
}

// numGrads returns dL/d(in[i]) for every input by central differences,
// L = sum(f(in) * r), with step 1e-3 relative to the value (at least 1e-3).
func numGrads(f func([][]float64) []float64, in [][]float64, r []float64) [][]float64 {
	loss := func() float64 {
		var s float64
		for i, v := range f(in) {
			s += v * r[i]
		}
		return s
	}
	g := make([][]float64, len(in))
	for i, x := range in {
		g[i] = make([]float64, len(x))
		for j := range x {
			old := x[j]
			h := 1e-3 * max(1, math.Abs(old))
			x[j] = old + h
			lp := loss()
			x[j] = old - h
			lm := loss()
			x[j] = old
			g[i][j] = (lp - lm) / (2 * h)
		}
	}
	return g
}

func refMatMul(a, b []float64, m, k, n int) []float64 {
	out := make([]float64, m*n)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				s += a[i*k+p] * b[p*n+j]
			}
			out[i*n+j] = s
		}
	}
	return out
}

func refEmbed(ids []int32, table []float64, d int) []float64 {
	out := make([]float64, 0, len(ids)*d)
	for _, id := range ids {
		out = append(out, table[int(id)*d:int(id+1)*d]...)
	}
	return out
}

func refRMSNorm(x, w []float64, d int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		var ms float64
		for _, v := range row {
			ms += v * v
		}
		ms /= float64(d)
		for j, v := range row {
			out[r*d+j] = v / math.Sqrt(ms+eps) * w[j]
		}
	}
	return out
}

func refLayerNorm(x, w, b []float64, d int, eps float64) []float64 {
	out := make([]float64, len(x))
	for r := 0; r < len(x)/d; r++ {
		row := x[r*d : (r+1)*d]
		var mean, vr float64
		for _, v := range row {
			mean += v
		}
		mean /= float64(d)
		for _, v := range row {
			vr += (v - mean) * (v - mean)
		}
		vr /= float64(d)
		for j, v := range row {
			out[r*d+j] = (v-mean)/math.Sqrt(vr+eps)*w[j] + b[j]
		}
	}
	return out
}

func refRoPE(x []float64, batch, seq, heads, hd int, theta float64) []float64 {
	out := make([]float64, len(x))
	half := hd / 2
	for b := range batch {
		for p := range seq {
			for h := range heads {
				base := ((b*seq+p)*heads + h) * hd
				for i := range half {
					ang := float64(p) * math.Pow(theta, -2*float64(i)/float64(hd))
					x1, x2 := x[base+i], x[base+i+half]
					out[base+i] = x1*math.Cos(ang) - x2*math.Sin(ang)
					out[base+i+half] = x2*math.Cos(ang) + x1*math.Sin(ang)
				}
			}
		}
	}
	return out
}

// refAttention returns the output and the per-row log-sum-exp.
func refAttention(q, k, v []float64, batch, seq, heads, kvHeads, hd int, causal bool) ([]float64, []float64) {
	out := make([]float64, len(q))
	lse := make([]float64, batch*heads*seq)
	scale := 1 / math.Sqrt(float64(hd))
	for b := range batch {
		for h := range heads {
			g := h / (heads / kvHeads)
			for i := range seq {
				qi := q[((b*seq+i)*heads+h)*hd:][:hd]
				n := seq
				if causal {
					n = i + 1
				}
				s := make([]float64, n)
				mx := math.Inf(-1)
				for j := range n {
					kj := k[((b*seq+j)*kvHeads+g)*hd:][:hd]
					for e := range hd {
						s[j] += qi[e] * kj[e]
					}
					s[j] *= scale
					mx = max(mx, s[j])
				}
				var sum float64
				for j := range n {
					s[j] = math.Exp(s[j] - mx)
					sum += s[j]
				}
				o := out[((b*seq+i)*heads+h)*hd:][:hd]
				for j := range n {
					vj := v[((b*seq+j)*kvHeads+g)*hd:][:hd]
					for e := range hd {
						o[e] += s[j] / sum * vj[e]
					}
				}
				lse[(b*heads+h)*seq+i] = mx + math.Log(sum)
			}
		}
	}
	return out, lse
}

func refSiLU(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = v / (1 + math.Exp(-v))
	}
	return out
}

func refGELU(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = 0.5 * v * (1 + math.Erf(v/math.Sqrt2))
	}
	return out
}

func refGELUTanh(x []float64) []float64 {
	out := make([]float64, len(x))
	for i, v := range x {
		out[i] = 0.5 * v * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(v+0.044715*v*v*v)))
	}
	return out
}

// refBinary applies op elementwise, broadcasting b over the last dim when
// it is shorter.
func refBinary(a, b []float64, op func(x, y float64) float64) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = op(a[i], b[i%len(b)])
	}
	return out
}

// refCrossEntropy returns the mean over rows of -log softmax[target].
func refCrossEntropy(logits []float64, targets []int32, rows, vocab int) float64 {
	var total float64
	for r := range rows {
		row := logits[r*vocab : (r+1)*vocab]
		mx := math.Inf(-1)
		for _, v := range row {
			mx = max(mx, v)
		}
		var s float64
		for _, v := range row {
			s += math.Exp(v - mx)
		}
		total += mx + math.Log(s) - row[targets[r]]
	}
	return total / float64(rows)
}
