package kernels

import (
	"sync"
	"sync/atomic"
)

// Blocking (GotoBLAS style). Each output element is accumulated in float32
// starting from 0 and adding a[i,p]*b[p,j] for p = 0, 1, ..., k-1: the k
// panels run in order and a register tile is loaded from C before each
// panel, so no blocking choice or worker count changes a single bit.
//
// n is blocked only at the register level (nr-column strips, one hot in
// L1 while it meets every A strip of the block).
//
// The microkernel is 12x32: on amd64 with AVX-512 (kernel_amd64.s)
// twenty-four 16-lane accumulators, with AVX2 and FMA four 6x16 quarters
// of twelve 8-lane accumulators, one fused multiply-add per element per k
// step either way (so the two give the same bits); elsewhere, or built
// with -tags purego, kernelGo computes the same tile as 2x4 blocks of
// scalar multiply-adds, which Go does not fuse at the default GOAMD64=v1.
// The SIMD and portable paths differ only in that rounding: FMA rounds
// a*b+c once, the scalar path twice (kernels/doc.go says by how much).
const (
	mr = 12  // rows of the register tile
	nr = 32  // columns of the register tile
	kc = 384 // k panel (measured on Zen 5: 384 beats 128, 192 and 256 by 3-10 %, 512 ties)
	mc = 96  // rows per work unit: the packed 96x384 A block (144 KB) lives in L2
)

// view addresses a matrix inside a flat buffer: element (i, j) is
// data[i*rs + j*cs], so one packing routine serves a, a^T, b and b^T.
type view struct {
	data   []float32
	rs, cs int
}

// MatMul computes out[m,n] = a[m,k] @ b[k,n] (row-major).
func MatMul(out, a, b []float32, m, k, n int) {
	checkLen("MatMul out", out, m*n)
	checkLen("MatMul a", a, m*k)
	checkLen("MatMul b", b, k*n)
	gemm(Workers(), out, view{a, k, 1}, view{b, n, 1}, m, k, n)
}

// MatMulGradA computes da[m,k] = dy[m,n] @ b[k,n]^T.
func MatMulGradA(da, dy, b []float32, m, k, n int) {
	checkLen("MatMulGradA da", da, m*k)
	checkLen("MatMulGradA dy", dy, m*n)
	checkLen("MatMulGradA b", b, k*n)
	gemm(Workers(), da, view{dy, n, 1}, view{b, 1, n}, m, n, k)
}

// MatMulGradB computes db[k,n] = a[m,k]^T @ dy[m,n], the sum over the m
// rows in row order.
func MatMulGradB(db, a, dy []float32, m, k, n int) {
	checkLen("MatMulGradB db", db, k*n)
	checkLen("MatMulGradB a", a, m*k)
	checkLen("MatMulGradB dy", dy, m*n)
	gemm(Workers(), db, view{a, 1, k}, view{dy, n, 1}, k, m, n)
}

func checkLen(what string, s []float32, n int) {
	if len(s) < n {
		panic("kernels: " + what + ": buffer too short")
	}
}

// MatMulGradBAcc adds a[m,k]^T @ dy[m,n] to db[k,n]: each element goes on
// from its value, adding the m rows in row order, so products over
// consecutive row ranges, in order, give MatMulGradB's bits over all of
// them.
func MatMulGradBAcc(db, a, dy []float32, m, k, n int) {
	checkLen("MatMulGradBAcc db", db, k*n)
	checkLen("MatMulGradBAcc a", a, m*k)
	checkLen("MatMulGradBAcc dy", dy, m*n)
	gemmInto(Workers(), db, view{a, 1, k}, view{dy, n, 1}, k, m, n, true)
}

// gemm overwrites c[m,n] (row-major, contiguous) with A[m,k] @ B[k,n].
func gemm(workers int, c []float32, a, b view, m, k, n int) {
	gemmInto(workers, c, a, b, m, k, n, false)
}

// gemmInto is gemm, or with acc adds the product to c. B is packed once,
// shared read-only; then workers take mc-row blocks of C (or parts of
// them, see chunks) from a counter, each owned by one worker start to
// end.
func gemmInto(workers int, c []float32, a, b view, m, k, n int, acc bool) {
	var pb []float32
	if m > 0 && k > 0 && n > 0 {
		pbp := getF32((n + nr - 1) / nr * k * nr)
		defer putF32(pbp)
		pb = *pbp
		packAll(workers, pb, b, k, n)
	}
	gemmPacked(workers, c, a, pb, m, k, n, acc)
}

// packAll packs all of B into pb, split by strips when big. B is always
// packed: reading a row-major B's strips in place instead wins only while
// B is hot in cache (15 % at m = 256 on Zen 5 with one B reused); a
// layer's weights in a training step are cold, and then in-place strips
// (each k step a new row, every A block again) are 10-30 % slower than
// packing once (256x512x1376 with 24 Bs in rotation: 75 against 108
// GFLOP/s on a Xeon with AVX-512).
func packAll(workers int, pb []float32, b view, k, n int) {
	nStrips := (n + nr - 1) / nr
	parallelForWorkers(workers, nStrips, k*nr, func(lo, hi int) {
		for s := lo; s < hi; s++ {
			packB(pb[s*k*nr:(s+1)*k*nr], b, k, s*nr, min(nr, n-s*nr))
		}
	})
}

// PackedB is the B operand of a product packed once for several: local
// ranks that read one gathered weight share its packing.
type PackedB struct {
	data []float32
	buf  *[]float32 // data's pooled buffer
	k, n int
}

// Free gives the packing's memory back for reuse; p is not used after.
func (p *PackedB) Free() {
	if p.buf != nil {
		putF32(p.buf)
		p.buf, p.data = nil, nil
	}
}

// PackB packs b[k,n] as MatMul's B; PackBT packs b[k,n] as MatMulGradA's
// (b^T).
func PackB(b []float32, k, n int) *PackedB {
	checkLen("PackB b", b, k*n)
	return packed(view{b, n, 1}, k, n)
}

func PackBT(b []float32, k, n int) *PackedB {
	checkLen("PackBT b", b, k*n)
	return packed(view{b, 1, n}, n, k)
}

func packed(b view, k, n int) *PackedB {
	buf := getF32((n + nr - 1) / nr * k * nr)
	p := &PackedB{data: *buf, buf: buf, k: k, n: n}
	if k > 0 && n > 0 {
		packAll(Workers(), p.data, b, k, n)
	}
	return p
}

// MatMulPacked is MatMul with B packed by PackB (the same bits).
func MatMulPacked(out, a []float32, b *PackedB, m int) {
	checkLen("MatMulPacked out", out, m*b.n)
	checkLen("MatMulPacked a", a, m*b.k)
	gemmPacked(Workers(), out, view{a, b.k, 1}, b.data, m, b.k, b.n, false)
}

// MatMulGradAPacked is MatMulGradA with b packed by PackBT (the same
// bits): da[m,k] = dy[m,n] @ b^T.
func MatMulGradAPacked(da, dy []float32, b *PackedB, m int) {
	checkLen("MatMulGradAPacked da", da, m*b.n)
	checkLen("MatMulGradAPacked dy", dy, m*b.k)
	gemmPacked(Workers(), da, view{dy, b.k, 1}, b.data, m, b.k, b.n, false)
}

// gemmPacked is gemmInto after B's packing: pb holds B[k,n]'s strips.
func gemmPacked(workers int, c []float32, a view, pb []float32, m, k, n int, acc bool) {
	if m == 0 || n == 0 {
		return
	}
	c = c[:m*n]
	if k == 0 {
		if !acc {
			clear(c)
		}
		return
	}
	nStrips := (n + nr - 1) / nr

	blocks := (m + mc - 1) / mc
	if m*k*n < minParallelWork*8 {
		workers = 1
	}
	// Few row blocks (small m, or a small k in MatMulGradB) leave workers
	// idle; then column ranges of at least 16 strips split the blocks too.
	// Units still own disjoint parts of C, so the bits do not change.
	chunks := 1
	if workers > 1 && blocks < 4*workers {
		chunks = max(1, min((4*workers+blocks-1)/blocks, nStrips/16))
	}
	units := blocks * chunks
	workers = min(workers, units)
	var next atomic.Int64
	work := func() {
		pap := getF32(mc * kc)
		defer putF32(pap)
		for {
			u := int(next.Add(1)) - 1
			if u >= units {
				return
			}
			blk, ch := u/chunks, u%chunks
			i0 := blk * mc
			gemmBlock(c, a, pb, *pap, i0, min(mc, m-i0), k, n, nStrips*ch/chunks, nStrips*(ch+1)/chunks, acc)
		}
	}
	if workers <= 1 {
		work()
		return
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// gemmBlock computes rows [i0, i0+rows) of C in the column strips
// [s0, s1). With a SIMD kernel, full row strips of a row-major or a
// transposed A are read in place instead of packed (packing costs as much
// as the product when n is small).
func gemmBlock(c []float32, a view, pb, pa []float32, i0, rows, k, n, s0, s1 int, acc bool) {
	var tile [mr * nr]float32
	rStrips := (rows + mr - 1) / mr
	// A's full row strips are read in place when A is row-major (rows
	// a.rs apart) or a transpose (MatMulGradB's a^T: a strip's mr values
	// of a step are contiguous, steps a.cs apart, as in a packed strip;
	// 10-25 % faster than packing it, also at rows 4 or 8 KiB apart).
	direct := simd && (a.cs == 1 || a.rs == 1)
	for p0 := 0; p0 < k; p0 += kc {
		kb := min(kc, k-p0)
		zero := p0 == 0 && !acc // the tile starts from 0, not from C
		for r := 0; r < rStrips; r++ {
			if ni := min(mr, rows-r*mr); !direct || ni < mr {
				packA(pa[r*kb*mr:(r+1)*kb*mr], a, i0+r*mr, ni, p0, kb)
			}
		}
		for s := s0; s < s1; s++ {
			j0 := s * nr
			nj := min(nr, n-j0)
			bs, bks := pb[(s*k+p0)*nr:(s*k+p0+kb)*nr], nr
			for r := 0; r < rStrips; r++ {
				ri := i0 + r*mr
				ni := min(mr, i0+rows-ri)
				as, ars, aks := pa[r*kb*mr:(r+1)*kb*mr], 1, mr
				switch {
				case !direct || ni < mr:
				case a.cs == 1:
					as, ars, aks = a.data[ri*a.rs+p0:], a.rs, 1
				default:
					as, ars, aks = a.data[ri+p0*a.cs:], 1, a.cs
				}
				if ni == mr && nj == nr && microKernelC(as, ars, aks, bs, bks, kb, c[ri*n+j0:], n, zero) {
					continue
				}
				// Load the tile (zero on the first panel), run the
				// panel, store back: exactly the naive k order.
				if zero {
					tile = [mr * nr]float32{}
				} else {
					for ii := 0; ii < ni; ii++ {
						copy(tile[ii*nr:ii*nr+nj], c[(ri+ii)*n+j0:])
					}
				}
				if !microKernelEdge(as, ars, aks, bs, bks, kb, tile[:], nr, ni) {
					kernelGo(as, bs, kb, &tile)
				}
				for ii := 0; ii < ni; ii++ {
					copy(c[(ri+ii)*n+j0:(ri+ii)*n+j0+nj], tile[ii*nr:])
				}
			}
		}
	}
}

// packA copies A[i0:i0+ni, p0:p0+kb] into dst as kb groups of mr values
// (row i0+ii of step p at dst[p*mr+ii]); rows past ni are zero.
func packA(dst []float32, a view, i0, ni, p0, kb int) {
	if ni < mr {
		clear(dst)
	}
	switch {
	case a.cs == 1:
		for ii := 0; ii < ni; ii++ {
			src := a.data[(i0+ii)*a.rs+p0:][:kb]
			for p, v := range src {
				dst[p*mr+ii] = v
			}
		}
	case a.rs == 1:
		// A is a transpose (MatMulGradB's a^T): the mr values of a step
		// are contiguous.
		for p := 0; p < kb; p++ {
			copy(dst[p*mr:p*mr+ni], a.data[i0+(p0+p)*a.cs:])
		}
	default:
		for ii := 0; ii < ni; ii++ {
			src := a.data[(i0+ii)*a.rs+p0*a.cs:]
			for p := 0; p < kb; p++ {
				dst[p*mr+ii] = src[p*a.cs]
			}
		}
	}
}

// packB copies B[0:k, j0:j0+nj] into dst as k groups of nr values;
// columns past nj are zero.
func packB(dst []float32, b view, k, j0, nj int) {
	if nj < nr {
		clear(dst)
	}
	if b.cs == 1 && nj == nr {
		for p := 0; p < k; p++ {
			copy(dst[p*nr:p*nr+nr], b.data[p*b.rs+j0:])
		}
		return
	}
	if b.rs == 1 && nj == nr && packBT(dst, b.data[j0*b.cs:], b.cs, k) {
		return // B is a transpose (MatMulGradA's b^T): 8x8 blocks in registers
	}
	for jj := 0; jj < nj; jj++ {
		src := b.data[(j0+jj)*b.cs:]
		for p := 0; p < k; p++ {
			dst[p*nr+jj] = src[p*b.rs]
		}
	}
}

// kernelGo is the portable microkernel: the tile as 2x4 blocks, each a
// k-order loop of eight scalar accumulators (two a and four b values and
// eight sums nearly fit amd64's sixteen float registers).
func kernelGo(a, b []float32, kb int, t *[mr * nr]float32) {
	for i0 := 0; i0 < mr; i0 += 2 {
		for j0 := 0; j0 < nr; j0 += 4 {
			block2x4(a[i0:], b[j0:], kb, t, i0*nr+j0)
		}
	}
}

func block2x4(a, b []float32, kb int, t *[mr * nr]float32, o int) {
	c00, c01, c02, c03 := t[o], t[o+1], t[o+2], t[o+3]
	c10, c11, c12, c13 := t[o+nr], t[o+nr+1], t[o+nr+2], t[o+nr+3]
	for p := 0; p < kb; p++ {
		ap := a[p*mr:][:2]
		bp := b[p*nr:][:4]
		a0, a1 := ap[0], ap[1]
		b0, b1, b2, b3 := bp[0], bp[1], bp[2], bp[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
	}
	t[o], t[o+1], t[o+2], t[o+3] = c00, c01, c02, c03
	t[o+nr], t[o+nr+1], t[o+nr+2], t[o+nr+3] = c10, c11, c12, c13
}
