package kernels

import "fmt"

// Embed copies table row ids[i] (table is [vocab, d]) into row i of out.
// An id outside [0, vocab) is a user error naming the id and its position;
// rows before it have been written.
func Embed(out []float32, ids []int32, table []float32, vocab, d int) error {
	checkLen("Embed out", out, len(ids)*d)
	checkLen("Embed table", table, vocab*d)
	for i, id := range ids {
		if id < 0 || int(id) >= vocab {
			return fmt.Errorf("embed: id %d at position %d is outside [0, %d)", id, i, vocab)
		}
		copy(out[i*d:(i+1)*d], table[int(id)*d:])
	}
	return nil
}

// EmbedGrad zeroes dtable [vocab, d] and adds row i of dy into row ids[i],
// in position order. Goroutines split the columns, so repeated ids add in
// the same order whatever the split. Ids must be in range (Embed has
// checked them); an out-of-range id panics.
func EmbedGrad(dtable []float32, ids []int32, dy []float32, vocab, d int) {
	checkLen("EmbedGrad dtable", dtable, vocab*d)
	checkLen("EmbedGrad dy", dy, len(ids)*d)
	parallelFor(vocab, d, func(lo, hi int) { clear(dtable[lo*d : hi*d]) })
	blocks := (d + colBlock - 1) / colBlock
	parallelFor(blocks, len(ids)*colBlock, func(lo, hi int) {
		j0, j1 := lo*colBlock, min(hi*colBlock, d)
		for i, id := range ids {
			if id < 0 || int(id) >= vocab {
				panic(fmt.Sprintf("kernels: EmbedGrad: id %d at position %d is outside [0, %d)", id, i, vocab))
			}
			dst, src := dtable[int(id)*d+j0:int(id)*d+j1], dy[i*d+j0:]
			for j, v := range dst {
				dst[j] = v + src[j]
			}
		}
	})
}
