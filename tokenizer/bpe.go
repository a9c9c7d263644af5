package tokenizer

import "strings"

// byteChar is GPT-2's byte-level alphabet: each byte as a printable
// character (bytes_to_unicode): '!'..'~', '¡'..'¬' and '®'..'ÿ' as
// themselves, the other 68 bytes as U+0100 on, in byte order.
var byteChar, charByte = func() ([256]string, map[rune]byte) {
	var out [256]string
	back := map[rune]byte{}
	n := 0
	for b := range 256 {
		r := rune(b)
		if !(b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF) {
			r = rune(256 + n)
			n++
		}
		out[b] = string(r)
		back[r] = byte(b)
	}
	return out, back
}()

// bpe is a word's ids: its bytes as byte-level characters, the adjacent
// pair of lowest rank merged (the leftmost of equals) until no pair has
// a merge, as Hugging Face's BPE model does.
func (t *Tokenizer) bpe(word string) []int32 {
	syms := make([]string, 0, len(word))
	for i := 0; i < len(word); i++ {
		syms = append(syms, byteChar[word[i]])
	}
	if t.ignoreMerges {
		if id, ok := t.vocab[strings.Join(syms, "")]; ok {
			return []int32{id}
		}
	}
	for len(syms) > 1 {
		best, at := int32(-1), -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[pair{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		// Merge every occurrence of the pair, left to right.
		a, b := syms[at], syms[at+1]
		out := syms[:at]
		for i := at; i < len(syms); {
			if i+1 < len(syms) && syms[i] == a && syms[i+1] == b {
				out = append(out, a+b)
				i += 2
			} else {
				out = append(out, syms[i])
				i++
			}
		}
		syms = out
	}
	ids := make([]int32, 0, len(syms))
	for _, s := range syms {
		if id, ok := t.vocab[s]; ok {
			ids = append(ids, id)
			continue
		}
		// Not in the vocabulary (a byte the vocabulary lacks): nothing
		// can encode it; skip, as Hugging Face's BPE without an unk does.
	}
	return ids
}

// Decode is the text of ids: tokens in the byte-level alphabet mapped
// back to bytes, added tokens as written.
func (t *Tokenizer) Decode(ids []int32) string {
	if t.sp {
		return t.spDecode(ids)
	}
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) {
			continue
		}
		tok := t.tokens[id]
		if t.isAdded(id) {
			b.WriteString(tok)
			continue
		}
		for _, r := range tok {
			if c, ok := charByte[r]; ok {
				b.WriteByte(c)
			}
		}
	}
	return b.String()
}

func (t *Tokenizer) isAdded(id int32) bool { return t.addedID[id] }
