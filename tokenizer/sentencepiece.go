package tokenizer

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"strings"
)

// SentencePiece-style BPE, as Hugging Face converts Llama 2's, Mistral's
// and TinyLlama's tokenizers: a normalizer that prepends U+2581 and turns
// spaces into it, no pre-tokenizer (the whole text between added tokens
// is one word), BPE over characters, and bytes of a symbol the
// vocabulary lacks as <0xXX> tokens (byte_fallback).

const spSpace = "\u2581"

// spCuttable says whether no token of vocab has U+2581 after another
// character (spEncode).
func spCuttable(vocab map[string]int32) bool {
	for tok := range vocab {
		prev := rune(0)
		for i, r := range tok {
			if r == '\u2581' && i > 0 && prev != '\u2581' {
				return false
			}
			prev = r
		}
	}
	return true
}

// spNormalizer checks that raw is Llama 2's normalizer.
func spNormalizer(raw json.RawMessage) error {
	var n struct {
		Type        string `json:"type"`
		Normalizers []struct {
			Type    string `json:"type"`
			Prepend string `json:"prepend"`
			Pattern struct {
				String *string `json:"String"`
			} `json:"pattern"`
			Content string `json:"content"`
		} `json:"normalizers"`
	}
	if err := json.Unmarshal(raw, &n); err == nil && n.Type == "Sequence" && len(n.Normalizers) == 2 {
		p, r := n.Normalizers[0], n.Normalizers[1]
		if p.Type == "Prepend" && p.Prepend == spSpace && r.Type == "Replace" && r.Pattern.String != nil && *r.Pattern.String == " " && r.Content == spSpace {
			return nil
		}
	}
	return fmt.Errorf("BPE with byte_fallback and normalizer %s is not supported yet (Llama 2's: prepend and replace spaces with U+2581, is)", brief(raw))
}

// spEncode appends the ids of one piece of text (between added tokens).
// Where no token has U+2581 after another character (a vocabulary
// trained with split_by_whitespace, as Llama 2's), no merge crosses the
// place before a U+2581 that follows another character, so the text is
// cut there and each piece merged on its own (and cached): the same ids
// as merging it whole, in time linear in the text.
func (t *Tokenizer) spEncode(out []int32, text string) []int32 {
	if text == "" {
		return out
	}
	word := spSpace + strings.ReplaceAll(text, " ", spSpace)
	if !t.spCut {
		return t.spPiece(out, word)
	}
	start, prevSpace := 0, false
	for i, r := range word {
		space := r == '\u2581'
		if space && !prevSpace && i > start {
			out = t.spCached(out, word[start:i])
			start = i
		}
		prevSpace = space
	}
	return t.spCached(out, word[start:])
}

// spCached is spPiece through the word cache.
func (t *Tokenizer) spCached(out []int32, piece string) []int32 {
	return t.cached(out, piece, func(p string) []int32 { return t.spPiece(nil, p) })
}

// spPiece appends the ids of a normalized piece: merged, then each
// symbol the vocabulary lacks as its bytes' <0xXX> tokens.
func (t *Tokenizer) spPiece(out []int32, word string) []int32 {
	for _, s := range t.mergeRunes(word) {
		if id, ok := t.vocab[s]; ok {
			out = append(out, id)
			continue
		}
		for i := 0; i < len(s); i++ {
			if id, ok := t.vocab[fmt.Sprintf("<0x%02X>", s[i])]; ok {
				out = append(out, id)
			} else if t.unk >= 0 {
				out = append(out, t.unk)
			}
		}
	}
	return out
}

// mergeRunes is BPE over word's characters, in O(n log n): the adjacent
// pair of lowest rank merged first (the leftmost of equals), as Hugging
// Face's BPE model does, on a list with a heap of candidate pairs.
func (t *Tokenizer) mergeRunes(word string) []string {
	var syms []string
	for _, r := range word {
		syms = append(syms, string(r))
	}
	n := len(syms)
	next, prev := make([]int, n), make([]int, n)
	for i := range n {
		next[i], prev[i] = i+1, i-1
	}
	h := &pairHeap{}
	push := func(i int) {
		if i < 0 || next[i] >= n {
			return
		}
		if r, ok := t.ranks[pair{syms[i], syms[next[i]]}]; ok {
			heap.Push(h, cand{rank: r, pos: i, left: syms[i], right: syms[next[i]]})
		}
	}
	for i := range n - 1 {
		push(i)
	}
	for h.Len() > 0 {
		c := heap.Pop(h).(cand)
		j := next[c.pos]
		if syms[c.pos] == "" || j >= n || syms[c.pos] != c.left || syms[j] != c.right {
			continue // stale: a neighbour merged since
		}
		syms[c.pos] += syms[j]
		syms[j] = ""
		next[c.pos] = next[j]
		if next[j] < n {
			prev[next[j]] = c.pos
		}
		push(prev[c.pos])
		push(c.pos)
	}
	out := syms[:0]
	for i := 0; i < n; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

type cand struct {
	rank        int32
	pos         int
	left, right string
}

type pairHeap []cand

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	return h[i].rank < h[j].rank || h[i].rank == h[j].rank && h[i].pos < h[j].pos
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(cand)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// spDecode is the text of ids: <0xXX> tokens as their bytes, U+2581 as a
// space, and the space the normalizer prepended dropped.
func (t *Tokenizer) spDecode(ids []int32) string {
	var b []byte
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			continue
		}
		tok := t.tokens[id]
		if t.isAdded(id) {
			b = append(b, tok...)
			continue
		}
		var x byte
		if len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' {
			if _, err := fmt.Sscanf(tok, "<0x%02X>", &x); err == nil {
				b = append(b, x)
				continue
			}
		}
		b = append(b, strings.ReplaceAll(tok, spSpace, " ")...)
	}
	s := string(b)
	if strings.HasPrefix(s, " ") {
		s = s[1:]
	}
	return s
}
