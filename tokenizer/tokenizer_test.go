package tokenizer

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

func load(t testing.TB, dir string) *Tokenizer {
	t.Helper()
	b, err := os.ReadFile("../testdata/tokenizers/" + dir + "/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	tk, err := Load(b)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestGPT2Cases: GPT-2's tokenizer.json (made from gpt-tokenizer's
// r50k_base ranks by make.py) encodes every r50k_base test case of
// gpt-tokenizer to its ids, and decodes them back to the text.
func TestGPT2Cases(t *testing.T) {
	tk := load(t, "gpt2")
	b, err := os.ReadFile("../testdata/tokenizers/gpt2/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Text string
		IDs  []int32
	}
	if err := json.Unmarshal(b, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 50 {
		t.Fatalf("%d cases", len(cases))
	}
	for _, c := range cases {
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
	tk := load(t, "gpt2")
	text, err := os.ReadFile("../testdata/tokenizers/mixed.txt")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("../testdata/tokenizers/gpt2/mixed.ids")
	if err != nil {
		t.Fatal(err)
	}
	want := make([]int32, len(raw)/2)
	for i := range want {
		want[i] = int32(raw[2*i]) | int32(raw[2*i+1])<<8
	}
	got := tk.Encode(string(text))
	if !slices.Equal(got, want) {
		i := 0
		for i < min(len(got), len(want)) && got[i] == want[i] {
			i++
		}
		lo := max(0, i-3)
		t.Fatalf("%d ids, gpt-tokenizer %d; first difference at %d: %v against %v (%q against %q)", len(got), len(want), i,
			got[lo:min(len(got), i+5)], want[lo:min(len(want), i+5)], tk.Decode(got[lo:min(len(got), i+5)]), tk.Decode(want[lo:min(len(want), i+5)]))
	}
	if back := tk.Decode(got); back != string(text) {
		t.Errorf("the ids decode to another text")
	}
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

// BenchmarkEncode: GPT-2 encoding of mixed.txt repeated to 4 MB on one
// goroutine, with the word cache warm after the first pass (b.SetBytes:
// go test -bench Encode reports MB/s).
func BenchmarkEncode(b *testing.B) {
	tk := load(b, "gpt2")
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
