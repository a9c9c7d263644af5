package gpu

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"amspc/kernels/gpu/internal/kernelgen"
)

// TestGeneratedCurrent: kernels_gen.go, hostc/launch_gen.h and
// hostc/launch_gen.go are what kernelgen makes of ops.cu and mma.cu now
// (the tables it generates replace the hand-kept ones a test used to
// check against the sources; kernelgen's own tests check its parsing).
func TestGeneratedCurrent(t *testing.T) {
	files, err := kernelgen.Generate(kernelgen.Source{Name: "ops.cu", Text: Source}, kernelgen.Source{Name: "mma.cu", Text: MMASource})
	if err != nil {
		t.Fatalf("kernelgen: %v", err)
	}
	for _, f := range files {
		name := "kernels/gpu/" + f.Path
		have, err := os.ReadFile(filepath.FromSlash(f.Path))
		switch {
		case err != nil:
			t.Errorf("%s: %v: run go generate ./kernels/gpu", name, err)
		case !bytes.Equal(have, f.Data):
			t.Errorf("%s is not what kernelgen generates from ops.cu and mma.cu: run go generate ./kernels/gpu", name)
		}
	}
}

// TestGeometry: elementwise grids cover n with at most maxGrid blocks;
// row blocks are powers of two from a warp to MaxBlock.
func TestGeometry(t *testing.T) {
	for _, c := range []struct {
		n             int64
		block, max, g int
	}{{1, 256, 4096, 1}, {256, 256, 4096, 1}, {257, 256, 4096, 2}, {1 << 30, 256, 4096, 4096}, {0, 256, 4096, 1}} {
		if g := Grid1D(c.n, c.block, c.max); g != c.g {
			t.Errorf("Grid1D(%d, %d, %d) = %d, want %d", c.n, c.block, c.max, g, c.g)
		}
	}
	for d, want := range map[int64]int{1: 32, 33: 64, 200: 256, 4096: 256} {
		if b := RowBlock(d); b != want {
			t.Errorf("RowBlock(%d) = %d, want %d", d, b, want)
		}
	}
	if len(Hash()) != 64 {
		t.Error("Hash is not hex SHA-256")
	}
}
