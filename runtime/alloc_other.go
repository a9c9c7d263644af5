//go:build !linux

package runtime

// makeF32 allocates n zeroed float32s.
func makeF32(n int64) []float32 { return make([]float32, n) }
