package tokenizer

import (
	"encoding/json"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// gpt2Pattern is GPT-2's pre-tokenizer regex (the ByteLevel
// pre-tokenizer's with use_regex), which splitGPT2 implements (Go's
// regexp has no lookahead).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// preTokenizer is the word splitter of a tokenizer.json's pre_tokenizer.
func preTokenizer(raw json.RawMessage) (func(string, func(string)), error) {
	var p struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("pre_tokenizer %s is not supported yet (byte-level's is)", brief(raw))
	}
	switch {
	case p.Type != "ByteLevel":
		return nil, fmt.Errorf("pre_tokenizer %s is not supported yet (byte-level's is)", brief(raw))
	case p.AddPrefixSpace:
		return nil, fmt.Errorf("ByteLevel with add_prefix_space is not supported yet")
	case p.UseRegex != nil && !*p.UseRegex:
		return nil, fmt.Errorf("ByteLevel without its regex is not supported yet")
	}
	return splitGPT2, nil
}

// isSpace is \s in the JavaScript and Rust regex engines the references
// use: Unicode's White_Space (Go's unicode.IsSpace) less U+0085, which
// ECMAScript does not count, plus U+FEFF, which it does.
func isSpace(r rune) bool {
	return r == '\uFEFF' || r != '\u0085' && unicode.IsSpace(r)
}

func isLetter(r rune) bool { return unicode.IsLetter(r) }
func isNumber(r rune) bool { return unicode.IsNumber(r) }

// isOther is [^\s\p{L}\p{N}].
func isOther(r rune) bool { return !isSpace(r) && !isLetter(r) && !isNumber(r) }

// splitGPT2 calls emit with each match of gpt2Pattern in s, in order (the
// matches cover s: every character belongs to one of the alternatives).
func splitGPT2(s string, emit func(string)) {
	for i := 0; i < len(s); {
		n := matchGPT2(s[i:])
		emit(s[i : i+n])
		i += n
	}
}

// matchGPT2 is the length of gpt2Pattern's match at the start of s
// (non-empty s), trying the alternatives in order as the regex does.
func matchGPT2(s string) int {
	if s[0] == '\'' {
		for _, c := range [...]string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"} {
			if len(s) >= len(c) && s[:len(c)] == c {
				return len(c)
			}
		}
	}
	r, w := utf8.DecodeRuneInString(s)
	start := 0
	if r == ' ' && len(s) > 1 {
		next, _ := utf8.DecodeRuneInString(s[1:])
		if !isSpace(next) { // " ?" then a class of next's
			start, r = 1, next
		}
	}
	switch {
	case isLetter(r):
		return start + run(s[start:], isLetter)
	case isNumber(r):
		return start + run(s[start:], isNumber)
	case !isSpace(r):
		return start + run(s[start:], isOther)
	}
	// \s+(?!\S), else \s+: a whitespace run gives its last character to
	// a following non-space (which then takes it as " ?" or by itself).
	n := run(s, isSpace)
	if n < len(s) && n > w {
		_, last := utf8.DecodeLastRuneInString(s[:n])
		return n - last
	}
	return n
}

// run is the length of the longest prefix of s whose runes satisfy f.
func run(s string, f func(rune) bool) int {
	n := 0
	for n < len(s) {
		r, w := utf8.DecodeRuneInString(s[n:])
		if !f(r) {
			break
		}
		n += w
	}
	return n
}
