package tokenizer

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
)

func readGzip(path string) ([]byte, error) {
	z, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	r, err := gzip.NewReader(bytes.NewReader(z))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func load(t testing.TB, dir string) *Tokenizer {
	t.Helper()
	b, err := os.ReadFile("../testdata/tokenizers/" + dir + "/tokenizer.json")
	if os.IsNotExist(err) {
		b, err = readGzip("../testdata/tokenizers/" + dir + "/tokenizer.json.gz")
	}
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Load(b)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// cases reads a directory's cases.json.
func cases(t *testing.T, dir string) []struct {
	Text string
	IDs  []int32
} {
	b, err := os.ReadFile("../testdata/tokenizers/" + dir + "/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var out []struct {
		Text string
		IDs  []int32
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// mixedIDs reads a directory's mixed.ids (little-endian, width bytes an id).
func mixedIDs(t *testing.T, dir string, width int) []int32 {
	raw, err := os.ReadFile("../testdata/tokenizers/" + dir + "/mixed.ids")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, len(raw)/width)
	for i := range want {
		for k := width - 1; k >= 0; k-- {
			want[i] = want[i]<<8 | int32(raw[width*i+k])
		}
	}
	return want
}

// checkMixed encodes mixed.txt and compares with want, naming the first
// difference.
func checkMixed(t *testing.T, tk *Tokenizer, want []int32) {
	text, err := os.ReadFile("../testdata/tokenizers/mixed.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := tk.Encode(string(text))
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		lo := max(0, i-3)
		t.Fatalf("%d ids, the reference %d; first difference at %d: %v against %v (%q against %q)", len(got), len(want), i,
			got[lo:min(len(got), i+5)], want[lo:min(len(want), i+5)], tk.Decode(got[lo:min(len(got), i+5)]), tk.Decode(want[lo:min(len(want), i+5)]))
	}
	if back := tk.Decode(got); back != string(text) {
		t.Errorf("the ids decode to another text")
	}
}

// TestLlama3: Llama 3's tokenizer.json (rebuilt from llama3-tokenizer-js
// 1.2.0's data by make.py) encodes every string the package's own tests
// encode (special tokens and strings that look like them among them),
// two of ours, and the mixed text to the package's ids.
func TestLlama3(t *testing.T) {
	tk := load(t, "llama3")
	for _, c := range cases(t, "llama3") {
		if got := tk.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("%q: %v, llama3-tokenizer-js %v", c.Text, got, c.IDs)
		}
	}
	checkMixed(t, tk, mixedIDs(t, "llama3", 4))
}

// TestGPT2Cases: GPT-2's tokenizer.json (made from gpt-tokenizer's
// r50k_base ranks by make.py) encodes every r50k_base test case of
// gpt-tokenizer to its ids, and decodes them back to the text.
func TestGPT2Cases(t *testing.T) {
	tk := load(t, "gpt2")
	cs := cases(t, "gpt2")
	if len(cs) < 50 {
		t.Fatalf("%d cases", len(cs))
	}
	for _, c := range cs {
		got := tk.Encode(c.Text)
		if !slices.Equal(got, c.IDs) {
			t.Errorf("%q: %v, gpt-tokenizer %v", c.Text, got, c.IDs)
		}
		if back := tk.Decode(got); back != c.Text {
			t.Errorf("%q decodes to %q", c.Text, back)
		}
	}
}

// TestGPT2Mixed: on testdata/tokenizers/mixed.txt (Go source, markdown,
// and words of many scripts, emoji, digits, contractions and the special
// token between runs of every kind of whitespace), the ids are
// gpt-tokenizer's (r50k_base, special tokens allowed: mixed.ids, uint16
// little-endian), and they decode back to the text.
func TestGPT2Mixed(t *testing.T) {
	checkMixed(t, load(t, "gpt2"), mixedIDs(t, "gpt2", 2))
}

// TestAddedTokens: an added token in the text is its id (Hugging Face
// matches added tokens before pre-tokenizing), the text around it
// encoded on its own; a partial one is text.
func TestAddedTokens(t *testing.T) {
	tk := load(t, "gpt2")
	a, b := tk.Encode("a"), tk.Encode("b")
	want := append(append(append([]int32{}, a...), 50256), b...)
	if got := tk.Encode("a<|endoftext|>b"); !slices.Equal(got, want) {
		t.Errorf("a<|endoftext|>b: %v, want %v", got, want)
	}
	if got := tk.Encode("<|endoftext"); slices.Contains(got, 50256) {
		t.Errorf("<|endoftext: %v", got)
	}
	if id, ok := tk.ID("<|endoftext|>"); !ok || id != 50256 {
		t.Errorf("ID(<|endoftext|>) = %d, %v", id, ok)
	}
}

// BenchmarkEncode: GPT-2's, Llama 3's and Llama 2's encoding of mixed.txt repeated
// to 4 MB on one goroutine, with the word cache warm after the first pass
// (b.SetBytes: go test -bench Encode reports MB/s).
func BenchmarkEncode(b *testing.B) {
	for _, dir := range []string{"gpt2", "llama3", "llama2"} {
		b.Run(dir, func(b *testing.B) { benchEncode(b, dir) })
	}
}

func benchEncode(b *testing.B, dir string) {
	tk := load(b, dir)
	text, err := os.ReadFile("../testdata/tokenizers/mixed.txt")
	if err != nil {
		b.Fatal(err)
	}
	big := string(slices.Repeat(text, 4<<20/len(text)))
	b.SetBytes(int64(len(big)))
	for b.Loop() {
		tk.Encode(big)
	}
}

// TestLlama2: Llama 2's tokenizer.json (rebuilt from llama-tokenizer-js
// 1.2.2's data by make.py: SentencePiece-style BPE with byte fallback)
// encodes every string the package's own tests encode, two of ours, and
// the mixed text to its ids, cut before spaces (spCut) and merged whole
// alike.
func TestLlama2(t *testing.T) {
	tk := load(t, "llama2")
	if !tk.spCut {
		t.Fatal("Llama 2's vocabulary has a token with U+2581 after another character")
	}
	defer func() { tk.spCut = true }()
	tk.spCut = false
	checkMixed(t, tk, mixedIDs(t, "llama2", 2))
	tk.spCut = true
	for _, c := range cases(t, "llama2") {
		if got := tk.Encode(c.Text); !slices.Equal(got, c.IDs) {
			t.Errorf("%q: %v, llama-tokenizer-js %v", c.Text, got, c.IDs)
		}
		if back := tk.Decode(tk.Encode(c.Text)); back != c.Text {
			t.Errorf("%q decodes to %q", c.Text, back)
		}
	}
	checkMixed(t, tk, mixedIDs(t, "llama2", 2))
}

// bigText is 3 MB of varied text, the same bytes every run: lines of
// mixed.txt (code, markdown, many scripts, emoji, contractions, every
// kind of whitespace) picked by a linear congruential generator and
// joined by runs of spaces, tabs, newlines and other whitespace.
func bigText(t testing.TB) string {
	mixed, err := os.ReadFile("../testdata/tokenizers/mixed.txt")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(mixed), "\n")
	seps := []string{"", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", "    ", "\u00a0", "\u3000 "}
	var b strings.Builder
	x := uint64(20261127)
	next := func(n int) int {
		x = x*6364136223846793005 + 1442695040888963407
		return int(x>>33) % n
	}
	for b.Len() < 3<<20 {
		b.WriteString(lines[next(len(lines))])
		b.WriteString(seps[next(len(seps))])
	}
	return b.String()
}

// TestBigText: on 3 MB of varied text (bigText), each tokenizer's ids
// are its reference's: their count and SHA-256 (of the ids as uint32
// little-endian) as gpt-tokenizer, llama3-tokenizer-js and
// llama-tokenizer-js computed them (testdata/tokenizers/big.json; with
// AMSPC_BIG_TEXT=FILE the test writes the text there for them).
func TestBigText(t *testing.T) {
	text := bigText(t)
	if out := os.Getenv("AMSPC_BIG_TEXT"); out != "" {
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile("../testdata/tokenizers/big.json")
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]struct {
		Count  int
		SHA256 string
	}
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"gpt2", "llama3", "llama2"} {
		ids := load(t, dir).Encode(text)
		h := sha256.New()
		for _, id := range ids {
			binary.Write(h, binary.LittleEndian, uint32(id))
		}
		if got := hex.EncodeToString(h.Sum(nil)); len(ids) != want[dir].Count || got != want[dir].SHA256 {
			t.Errorf("%s: %d ids (SHA-256 %s), the reference %d (%s)", dir, len(ids), got, want[dir].Count, want[dir].SHA256)
		}
	}
}
