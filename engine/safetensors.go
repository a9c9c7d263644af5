package engine

import (
	"amspc/internal/outfile"
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// safetensors (https://huggingface.co/docs/safetensors): an 8-byte
// little-endian header length, a JSON header naming every tensor's dtype,
// shape and byte range in the body, then the body. amspc writes F32 and
// reads F32, BF16 and F16 (the latter two only when importing weights).

// stTensor is one tensor to write.
type stTensor struct {
	Name  string
	Shape []int64
	Data  []float32
}

type tensorInfo struct {
	DType   string  `json:"dtype"`
	Shape   []int64 `json:"shape"`
	Offsets [2]int  `json:"data_offsets"`
}

// writeSafetensors writes tensors (in name order) as F32 with metadata
// into path, atomically (writeAtomic), and returns the file's size and
// SHA-256.
func writeSafetensors(path string, tensors []stTensor, meta map[string]string) (int64, string, error) {
	sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
	header := map[string]any{}
	if meta != nil {
		header["__metadata__"] = meta
	}
	off := 0
	for _, t := range tensors {
		if _, dup := header[t.Name]; dup {
			return 0, "", fmt.Errorf("tensor %s written twice", t.Name)
		}
		n := 4 * len(t.Data)
		header[t.Name] = tensorInfo{DType: "F32", Shape: t.Shape, Offsets: [2]int{off, off + n}}
		off += n
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return 0, "", err
	}
	for len(hb)%8 != 0 {
		hb = append(hb, ' ')
	}
	h := sha256.New()
	var size int64
	err = writeAtomic(path, func(f io.Writer) error {
		cw := &countWriter{w: io.MultiWriter(f, h)}
		w := bufio.NewWriterSize(cw, 1<<20)
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(hb)))
		w.Write(n[:])
		w.Write(hb)
		var word [4]byte
		for _, t := range tensors {
			for _, x := range t.Data {
				binary.LittleEndian.PutUint32(word[:], math.Float32bits(x))
				if _, err := w.Write(word[:]); err != nil {
					return err
				}
			}
		}
		if err := w.Flush(); err != nil {
			return err
		}
		size = cw.n
		return nil
	})
	if err != nil {
		return 0, "", err
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// stFile is a parsed safetensors file.
type stFile struct {
	Meta    map[string]string
	Tensors map[string]tensorInfo
	body    []byte // nil when only the header was read
	size    int64  // of the whole file
}

// Names lists the file's tensors in name order.
func (f *stFile) Names() []string {
	names := make([]string, 0, len(f.Tensors))
	for n := range f.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// F32 decodes a tensor to float32: F32 as stored, BF16 and F16 widened
// exactly.
func (f *stFile) F32(name string) ([]float32, error) {
	ti, ok := f.Tensors[name]
	if !ok {
		return nil, fmt.Errorf("no tensor %s", name)
	}
	raw := f.body[ti.Offsets[0]:ti.Offsets[1]]
	switch ti.DType {
	case "F32":
		out := make([]float32, len(raw)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case "BF16":
		out := make([]float32, len(raw)/2)
		for i := range out {
			out[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[2*i:])) << 16)
		}
		return out, nil
	case "F16":
		out := make([]float32, len(raw)/2)
		for i := range out {
			out[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %s has dtype %s; amspc reads F32, BF16 and F16", name, ti.DType)
}

// halfToFloat widens an IEEE 754 binary16 value exactly.
func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	frac := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // Inf, NaN
		return math.Float32frombits(sign | 0xff<<23 | frac<<13)
	case exp == 0 && frac == 0:
		return math.Float32frombits(sign)
	case exp == 0: // subnormal: frac x 2^-24
		v := float32(frac) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | frac<<13)
}

var dtypeSize = map[string]int{"F32": 4, "BF16": 2, "F16": 2}

// parseSafetensors checks and indexes a safetensors file's bytes,
// refusing anything malformed: a header past the end, bad JSON, a tensor
// whose byte range is outside the body or disagrees with its dtype and
// shape, or tensors that overlap.
func parseSafetensors(data []byte) (*stFile, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("truncated (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint64(data)
	if n > uint64(len(data)-8) {
		return nil, fmt.Errorf("header of %d bytes runs past the end of the file", n)
	}
	f, err := parseHeader(data[8:8+n], int64(len(data))-8-int64(n))
	if err != nil {
		return nil, err
	}
	f.body, f.size = data[8+n:], int64(len(data))
	return f, nil
}

// readHeader reads and checks a safetensors file's header alone (the
// body is not read), refusing a file of more than limit bytes.
func readHeader(path string, limit int64) (*stFile, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d expected", path, fi.Size(), limit)
	}
	var nb [8]byte
	if _, err := io.ReadFull(fh, nb[:]); err != nil {
		return nil, fmt.Errorf("%s: truncated (%d bytes)", path, fi.Size())
	}
	n := binary.LittleEndian.Uint64(nb[:])
	if n > maxManifest {
		return nil, fmt.Errorf("%s: header of %d bytes, more than the %d amspc reads", path, n, maxManifest)
	}
	if n > uint64(fi.Size()-8) {
		return nil, fmt.Errorf("%s: header of %d bytes runs past the end of the file", path, n)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(fh, hb); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	f, err := parseHeader(hb, fi.Size()-8-int64(n))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	f.size = fi.Size()
	return f, nil
}

// parseHeader checks and indexes a safetensors header, for a body of
// bodyLen bytes.
func parseHeader(header []byte, bodyLen int64) (*stFile, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(header, &raw); err != nil {
		return nil, fmt.Errorf("header: %v", err)
	}
	f := &stFile{Tensors: map[string]tensorInfo{}}
	type span struct {
		a, b int
		name string
	}
	var spans []span
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &f.Meta); err != nil {
				return nil, fmt.Errorf("__metadata__: %v", err)
			}
			continue
		}
		var ti tensorInfo
		if err := json.Unmarshal(msg, &ti); err != nil {
			return nil, fmt.Errorf("tensor %s: %v", name, err)
		}
		size, ok := dtypeSize[ti.DType]
		if !ok {
			return nil, fmt.Errorf("tensor %s: dtype %s; amspc reads F32, BF16 and F16", name, ti.DType)
		}
		elems, okShape := ir64(ti.Shape)
		a, b := ti.Offsets[0], ti.Offsets[1]
		if a < 0 || b < a || int64(b) > bodyLen || !okShape || int64(b-a) != elems*int64(size) {
			return nil, fmt.Errorf("tensor %s: offsets [%d, %d) do not hold a %s tensor of shape %v in a body of %d bytes", name, a, b, ti.DType, ti.Shape, bodyLen)
		}
		f.Tensors[name] = ti
		spans = append(spans, span{a, b, name})
	}
	sort.Slice(spans, func(i, j int) bool {
		return spans[i].a < spans[j].a || spans[i].a == spans[j].a && spans[i].name < spans[j].name
	})
	for i := 1; i < len(spans); i++ {
		if spans[i].a < spans[i-1].b {
			return nil, fmt.Errorf("tensors %s and %s overlap", spans[i-1].name, spans[i].name)
		}
	}
	return f, nil
}

// ir64 is the element count of a shape, false when a dim is negative or
// the count overflows.
func ir64(shape []int64) (int64, bool) {
	n := int64(1)
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt64/8/d) {
			return 0, false
		}
		n *= d
	}
	return n, true
}

// readSafetensors reads and parses a safetensors file of at most limit
// bytes; a non-empty sum is the SHA-256 it must have.
func readSafetensors(path string, limit int64, sum string) (*stFile, error) {
	data, err := readFileBounded(path, limit)
	if err != nil {
		return nil, err
	}
	if sum != "" {
		got := sha256.Sum256(data)
		if hex.EncodeToString(got[:]) != sum {
			return nil, fmt.Errorf("%s: its SHA-256 is not the one the checkpoint recorded (corrupted, or from another save)", path)
		}
	}
	f, err := parseSafetensors(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return f, nil
}

// readFileBounded reads a file, refusing one larger than limit bytes
// before reading it.
func readFileBounded(path string, limit int64) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s has %d bytes, more than the %d expected", path, fi.Size(), limit)
	}
	return os.ReadFile(path)
}

// writeAtomic writes a file through write under a temporary name in the
// same directory, syncs it and renames it into place, then syncs the
// directory; on any failure the temporary file is removed.
func writeAtomic(path string, write func(io.Writer) error) error {
	return outfile.Write(path, nil, write)
}
