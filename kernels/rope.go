package kernels

import (
	"math"
	"sync"
)

// RoPEFreq says the rotation's frequencies: theta^(-2i/hd) for pair i,
// and, when Factor is not 0, Llama 3's scaling of them (Hugging Face's
// rope_type "llama3"): over the original context of Original positions,
// a frequency whose wavelength is shorter than Original/High stays, one
// longer than Original/Low is divided by Factor, and those between blend
// the two linearly in Original/wavelength.
type RoPEFreq struct {
	Theta             float64
	Factor, Low, High float64
	Original          int
}

// Freqs is f's frequency of each of a head's hd/2 pairs, in float64:
// the one computation of them, which the GPU's kernels read from memory.
func (f RoPEFreq) Freqs(hd int) []float64 {
	out := make([]float64, hd/2)
	for i := range out {
		inv := math.Pow(f.Theta, -2*float64(i)/float64(hd))
		if f.Factor != 0 {
			wavelen := 2 * math.Pi / inv
			lowWave, highWave := float64(f.Original)/f.Low, float64(f.Original)/f.High
			switch {
			case wavelen < highWave:
			case wavelen > lowWave:
				inv /= f.Factor
			default:
				smooth := (float64(f.Original)/wavelen - f.Low) / (f.High - f.Low)
				inv = (1-smooth)*inv/f.Factor + smooth*inv
			}
		}
		out[i] = inv
	}
	return out
}

// RoPE rotates x [batch, seq, heads*hd] in the rotate-half layout: for i in
// [0, hd/2) the pair (x[i], x[i+hd/2]) of every head at position p (from 0
// in each sequence) turns by p * f's frequency of i. Angles, sines and
// cosines are float64, rounded once to float32.
func RoPE(out, x []float32, batch, seq, heads, hd int, f RoPEFreq) {
	rope(out, x, batch, seq, heads, hd, f, 1)
}

// RoPEGrad is the transposed rotation (the inverse): dx = R(p)^T dy.
func RoPEGrad(dx, dy []float32, batch, seq, heads, hd int, f RoPEFreq) {
	rope(dx, dy, batch, seq, heads, hd, f, -1)
}

func rope(out, x []float32, batch, seq, heads, hd int, f RoPEFreq, sign float32) {
	n := batch * seq * heads * hd
	checkLen("RoPE out", out, n)
	checkLen("RoPE x", x, n)
	if hd%2 != 0 {
		panic("kernels: RoPE needs an even head dim")
	}
	half := hd / 2
	width := heads * hd
	tab := ropeTable(seq, hd, f)
	// Positions are the parallel unit: one sin/cos row serves every batch
	// entry and head at that position.
	parallelFor(seq, batch*width*3, func(lo, hi int) {
		bufp := getF32(half)
		defer putF32(bufp)
		sin := *bufp
		for p := lo; p < hi; p++ {
			cos := tab.cos[p*half : (p+1)*half]
			for i, s := range tab.sin[p*half : (p+1)*half] {
				sin[i] = sign * s // exact: a sign flip
			}
			for b := range batch {
				base := (b*seq + p) * width
				xr, or := x[base:base+width], out[base:base+width]
				for h := 0; h < width; h += hd {
					x1, x2 := xr[h:h+half], xr[h+half:h+hd]
					o1, o2 := or[h:h+half], or[h+half:h+hd]
					for i := range half {
						u, v := x1[i], x2[i]
						o1[i] = u*cos[i] - v*sin[i]
						o2[i] = v*cos[i] + u*sin[i]
					}
				}
			}
		}
	})
}

// A ropeTab holds cos and sin of p * theta^(-2i/hd), rounded to float32,
// at [p*hd/2 + i] for positions p < seq.
type ropeTab struct {
	cos, sin []float32
}

type ropeKey struct {
	hd int
	f  RoPEFreq
}

// ropeTabs caches one table per head dim and theta, grown to the longest
// sequence asked for: every call of a step (each layer's q and k, forward
// and backward, every rank) shares it instead of recomputing seq*hd/2
// powers and sines, which at small micro-batches cost as much as the
// rotation. A table's entries never change once written, so readers need
// no lock after lookup.
var ropeTabs struct {
	sync.Mutex
	m map[ropeKey]*ropeTab
}

func ropeTable(seq, hd int, f RoPEFreq) *ropeTab {
	half := hd / 2
	key := ropeKey{hd, f}
	ropeTabs.Lock()
	defer ropeTabs.Unlock()
	t := ropeTabs.m[key]
	if t != nil && len(t.cos) >= seq*half {
		return t
	}
	if ropeTabs.m == nil {
		ropeTabs.m = make(map[ropeKey]*ropeTab)
	}
	nt := &ropeTab{cos: make([]float32, seq*half), sin: make([]float32, seq*half)}
	freqs := f.Freqs(hd)
	for p := range seq {
		for i, fr := range freqs {
			ang := float64(p) * fr
			s, c := math.Sincos(ang)
			nt.cos[p*half+i], nt.sin[p*half+i] = float32(c), float32(s)
		}
	}
	ropeTabs.m[key] = nt
	return nt
}
