// Package tokenizer reads Hugging Face tokenizer.json files and encodes
// text with them: byte-level BPE, its words split by GPT-2's pre-tokenizer
// or by Llama 3's (a Split on its regex, then ByteLevel without its own;
// also GPT-4's cl100k). Other models (SentencePiece-style BPE with byte
// fallback: Llama 2, Mistral), normalizers and pre-tokenizers are
// refused by name as not supported yet.
package tokenizer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Tokenizer is a loaded tokenizer.json.
type Tokenizer struct {
	tokens []string         // by id: the token in the model's alphabet (byte-level characters)
	vocab  map[string]int32 // token -> id
	ranks  map[pair]int32   // a merge's rank: lower merges first
	split  func(string, func(string))
	// ignoreMerges: a word that is a token is that token, whatever the
	// merges would make of it (Llama 3's BPE).
	ignoreMerges bool
	// sp: SentencePiece-style BPE with byte fallback (sentencepiece.go);
	// unk is its unknown token's id (-1: none).
	sp      bool
	spCut   bool // spEncode may cut before U+2581
	unk     int32
	added   []added // sorted longest first, then by content
	addedID map[int32]bool
	byFirst [256][]int // added tokens by their first byte
	hash    string
	mu      sync.Mutex
	cache   map[string][]int32
	maxSize int
}

type pair struct{ a, b string }

type added struct {
	content string
	id      int32
	special bool
}

// file is what the reader takes of tokenizer.json.
type file struct {
	AddedTokens []struct {
		ID      int32  `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type                    string           `json:"type"`
		Vocab                   map[string]int32 `json:"vocab"`
		Merges                  json.RawMessage  `json:"merges"`
		ByteFallback            bool             `json:"byte_fallback"`
		ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
		Dropout                 *float64         `json:"dropout"`
		IgnoreMerges            bool             `json:"ignore_merges"`
		UnkToken                *string          `json:"unk_token"`
	} `json:"model"`
}

// Load reads a tokenizer.json.
func Load(data []byte) (*Tokenizer, error) {
	var f file
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("not a tokenizer.json: %v", err)
	}
	m := &f.Model
	switch {
	case m.Type != "BPE":
		return nil, fmt.Errorf("model type %q is not supported yet (byte-level BPE is)", m.Type)
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("BPE dropout %v is not supported (it makes encodings random)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "", m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("BPE with subword prefixes or word suffixes is not supported yet")
	case !m.ByteFallback && len(f.Normalizer) > 0 && string(f.Normalizer) != "null":
		return nil, fmt.Errorf("normalizer %s is not supported yet", brief(f.Normalizer))
	}
	t := &Tokenizer{vocab: m.Vocab, ranks: map[pair]int32{}, ignoreMerges: m.IgnoreMerges, cache: map[string][]int32{}, maxSize: 1 << 16, unk: -1}
	if m.ByteFallback {
		if err := spNormalizer(f.Normalizer); err != nil {
			return nil, err
		}
		if len(f.PreTokenizer) > 0 && string(f.PreTokenizer) != "null" {
			return nil, fmt.Errorf("BPE with byte_fallback after pre_tokenizer %s is not supported yet (Llama 2's has none)", brief(f.PreTokenizer))
		}
		t.sp, t.spCut = true, spCuttable(m.Vocab)
		if m.UnkToken != nil {
			id, ok := m.Vocab[*m.UnkToken]
			if !ok {
				return nil, fmt.Errorf("unk_token %q is not in the vocabulary", *m.UnkToken)
			}
			t.unk = id
		}
	} else {
		split, err := preTokenizer(f.PreTokenizer)
		if err != nil {
			return nil, err
		}
		t.split = split
	}
	n := int32(0)
	for _, id := range m.Vocab {
		n = max(n, id+1)
	}
	for _, a := range f.AddedTokens {
		n = max(n, a.ID+1)
	}
	t.tokens = make([]string, n)
	for tok, id := range m.Vocab {
		if id < 0 {
			return nil, fmt.Errorf("token %q has id %d", tok, id)
		}
		t.tokens[id] = tok
	}
	merges, err := readMerges(m.Merges)
	if err != nil {
		return nil, err
	}
	for i, p := range merges {
		if _, ok := m.Vocab[p.a+p.b]; !ok {
			return nil, fmt.Errorf("merge %d (%q %q) makes %q, which is not in the vocabulary", i, p.a, p.b, p.a+p.b)
		}
		if _, dup := t.ranks[p]; !dup {
			t.ranks[p] = int32(i)
		}
	}
	for _, a := range f.AddedTokens {
		t.added = append(t.added, added{a.Content, a.ID, a.Special})
		if t.tokens[a.ID] == "" {
			t.tokens[a.ID] = a.Content
		}
	}
	sort.Slice(t.added, func(i, j int) bool {
		if len(t.added[i].content) != len(t.added[j].content) {
			return len(t.added[i].content) > len(t.added[j].content)
		}
		return t.added[i].content < t.added[j].content
	})
	t.addedID = map[int32]bool{}
	for i, a := range t.added {
		t.addedID[a.id] = true
		if a.content == "" {
			return nil, fmt.Errorf("added token %d is empty", a.id)
		}
		t.byFirst[a.content[0]] = append(t.byFirst[a.content[0]], i)
	}
	sum := sha256.Sum256(data)
	t.hash = hex.EncodeToString(sum[:])
	return t, nil
}

// readMerges reads merges as "a b" strings or [a, b] pairs.
func readMerges(raw json.RawMessage) ([]pair, error) {
	var strs []string
	if err := json.Unmarshal(raw, &strs); err == nil {
		out := make([]pair, len(strs))
		for i, s := range strs {
			a, b, ok := strings.Cut(s, " ")
			if !ok {
				return nil, fmt.Errorf("merge %d %q is not two tokens", i, s)
			}
			out[i] = pair{a, b}
		}
		return out, nil
	}
	var pairs [][2]string
	if err := json.Unmarshal(raw, &pairs); err != nil {
		return nil, fmt.Errorf("merges are neither \"a b\" strings nor [a, b] pairs: %v", err)
	}
	out := make([]pair, len(pairs))
	for i, p := range pairs {
		out[i] = pair{p[0], p[1]}
	}
	return out, nil
}

func brief(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}

// Hash is the SHA-256 of the tokenizer.json read.
func (t *Tokenizer) Hash() string { return t.hash }

// VocabSize is one more than the largest id.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// ID is a token's id (an added token's content, or a vocabulary entry).
func (t *Tokenizer) ID(token string) (int32, bool) {
	for _, a := range t.added {
		if a.content == token {
			return a.id, true
		}
	}
	id, ok := t.vocab[token]
	return id, ok
}

// Encode is text's ids: added tokens where they appear (longest first),
// the text between them pre-tokenized into words, each word's bytes in
// the byte-level alphabet merged by rank.
func (t *Tokenizer) Encode(text string) []int32 {
	var out []int32
	for len(text) > 0 {
		at, a := t.nextAdded(text)
		if t.sp {
			out = t.spEncode(out, text[:at])
		} else {
			t.split(text[:at], func(word string) { out = t.word(out, word) })
		}
		if a == nil {
			break
		}
		out = append(out, a.id)
		text = text[at+len(a.content):]
	}
	return out
}

// nextAdded finds the first added token in text (the longest of those
// starting there), or returns len(text) and nil.
func (t *Tokenizer) nextAdded(text string) (int, *added) {
	if len(t.added) == 0 {
		return len(text), nil
	}
	for i := 0; i < len(text); i++ {
		for _, j := range t.byFirst[text[i]] { // longest first
			if a := &t.added[j]; strings.HasPrefix(text[i:], a.content) {
				return i, a
			}
		}
	}
	return len(text), nil
}

// word appends one pre-tokenized word's ids to out.
func (t *Tokenizer) word(out []int32, word string) []int32 {
	return t.cached(out, word, t.bpe)
}

// cached appends the ids of key, from the cache or by compute (then
// kept: words repeat; the cache is dropped whole when full).
func (t *Tokenizer) cached(out []int32, key string, compute func(string) []int32) []int32 {
	t.mu.Lock()
	ids, ok := t.cache[key]
	t.mu.Unlock()
	if !ok {
		ids = compute(key)
		t.mu.Lock()
		if len(t.cache) >= t.maxSize {
			clear(t.cache)
		}
		t.cache[key] = ids
		t.mu.Unlock()
	}
	return append(out, ids...)
}
