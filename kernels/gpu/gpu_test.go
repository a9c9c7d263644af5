package gpu

import (
	"regexp"
	"strings"
	"testing"
)

// TestKernelTable: Kernels names every extern "C" kernel of ops.cu, and
// MMAKernels every one of mma.cu, in order, with its parameters' kinds.
func TestKernelTable(t *testing.T) {
	for _, c := range []struct {
		file, src string
		table     []Kernel
	}{{"ops.cu", Source, Kernels}, {"mma.cu", MMASource, MMAKernels}} {
		re := regexp.MustCompile(`AMSP_EXTERN_C __global__ void (\w+)\(([^)]*)\)`)
		defs := re.FindAllStringSubmatch(c.src, -1)
		if len(defs) != len(c.table) {
			t.Fatalf("%s defines %d kernels, the table lists %d", c.file, len(defs), len(c.table))
		}
		for i, d := range defs {
			k := c.table[i]
			if d[1] != k.Name {
				t.Errorf("kernel %d: %s has %s, the table %s", i, c.file, d[1], k.Name)
				continue
			}
			var got []Param
			for _, p := range strings.Split(strings.Join(strings.Fields(d[2]), " "), ",") {
				p = strings.TrimSpace(p)
				switch {
				case strings.Contains(p, "*"):
					got = append(got, Ptr)
				case strings.HasPrefix(p, "long long "):
					got = append(got, I64)
				case strings.HasPrefix(p, "float "):
					got = append(got, F32)
				case strings.HasPrefix(p, "double "):
					got = append(got, F64)
				default:
					t.Errorf("%s: parameter %q of a kind the table has no name for", k.Name, p)
				}
			}
			if string(got) != string(k.Params) {
				t.Errorf("%s: %s's parameters are %q, the table says %q", k.Name, c.file, got, k.Params)
			}
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
