package tokenizer

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"slices"
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
// 1.2.0's data by make.py) encodes the package's test strings (special
// tokens among them) and the mixed text to the package's ids.
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
// encodes the package's test strings and the mixed text to its ids, cut
// before spaces (spCut) and merged whole alike.
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
