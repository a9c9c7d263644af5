package tokenizer

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"
)

// TestTokenFiles: token files round-trip at 2 and 4 bytes a token; one
// cut short, of another version, or holding an id past its vocabulary
// is refused; llm.c's .bin reads by its header; extensions match in any
// case.
func TestTokenFiles(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	for _, vocab := range []int{50257, 128256} {
		ids := []int32{0, 5, int32(vocab - 1), 7}
		data, err := EncodeFile(ids, vocab, hash)
		if err != nil {
			t.Fatal(err)
		}
		if want := 64 + len(ids)*map[bool]int{true: 2, false: 4}[vocab <= 1<<16]; len(data) != want {
			t.Errorf("vocab %d: %d bytes, want %d", vocab, len(data), want)
		}
		got, fi, err := DecodeFile(data)
		if err != nil || !slices.Equal(got, ids) || fi.Hash != hash || fi.Vocab != vocab || fi.Count != len(ids) {
			t.Errorf("vocab %d: %v %+v %v", vocab, got, fi, err)
		}
		if _, _, err := DecodeFile(data[:len(data)-1]); err == nil || !strings.Contains(err.Error(), "cut short") {
			t.Errorf("cut short: %v", err)
		}
	}
	data, _ := EncodeFile([]int32{3}, 4, hash)
	binary.LittleEndian.PutUint16(data[64:], 9)
	if _, _, err := DecodeFile(data); err == nil || !strings.Contains(err.Error(), "outside the file's vocabulary") {
		t.Errorf("an id past the vocabulary: %v", err)
	}
	binary.LittleEndian.PutUint32(data[8:], 2)
	if _, _, err := DecodeFile(data); err == nil || !strings.Contains(err.Error(), "version 2") {
		t.Errorf("version 2: %v", err)
	}

	llmc := make([]byte, 1024, 1030)
	binary.LittleEndian.PutUint32(llmc, llmcMagic)
	binary.LittleEndian.PutUint32(llmc[4:], 1)
	binary.LittleEndian.PutUint32(llmc[8:], 3)
	llmc = binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint16(llmc, 50256), 1), 2)
	if got, err := DecodeLLMC(llmc); err != nil || !IsLLMC(llmc) || !slices.Equal(got, []int32{50256, 1, 2}) {
		t.Errorf("llm.c: %v %v", got, err)
	}
	if _, err := DecodeLLMC(llmc[:1029]); err == nil {
		t.Error("llm.c cut short: no error")
	}
	for path, want := range map[string]string{"a/b.BIN": ".bin", "x.Tok": ".tok", "dir.d/file": "", "f": ""} {
		if got := Ext(path); got != want {
			t.Errorf("Ext(%q) = %q, want %q", path, got, want)
		}
	}
}

// TestRefusals: tokenizer.json files of models and pieces not supported
// yet are refused by name.
func TestRefusals(t *testing.T) {
	for _, c := range []struct{ json, want string }{
		{`{"model": {"type": "WordPiece", "vocab": {}}}`, `model type "WordPiece" is not supported yet`},
		{`{"model": {"type": "BPE", "vocab": {}, "merges": [], "byte_fallback": true}, "pre_tokenizer": null}`, "byte_fallback"},
		{`{"normalizer": {"type": "NFC"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, "normalizer"},
		{`{"pre_tokenizer": {"type": "Metaspace"}, "model": {"type": "BPE", "vocab": {}, "merges": []}}`, "pre_tokenizer"},
		{`{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a a"]}}`, `makes "aa", which is not in the vocabulary`},
		{`not json`, "not a tokenizer.json"},
	} {
		if _, err := Load([]byte(c.json)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.json, err, c.want)
		}
	}
}
