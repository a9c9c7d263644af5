package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// gpt2Pattern is GPT-2's pre-tokenizer regex (the ByteLevel
// pre-tokenizer's with use_regex), which splitGPT2 implements (Go's
// regexp has no lookahead).
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// llama3Pattern is Llama 3's (and GPT-4's cl100k) pre-tokenizer regex,
// which splitLlama3 implements.
const llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// preStep is one pre-tokenizer of a tokenizer.json.
type preStep struct {
	Type           string          `json:"type"`
	AddPrefixSpace bool            `json:"add_prefix_space"`
	UseRegex       *bool           `json:"use_regex"`
	Pattern        json.RawMessage `json:"pattern"`
	Behavior       string          `json:"behavior"`
	Invert         bool            `json:"invert"`
	Pretokenizers  []preStep       `json:"pretokenizers"`
}

// preTokenizer is the word splitter of a tokenizer.json's pre_tokenizer:
// GPT-2's ByteLevel (with its regex), or Llama 3's Sequence of a Split on
// its regex (isolated) and ByteLevel without a regex.
func preTokenizer(raw json.RawMessage) (func(string, func(string)), error) {
	var p preStep
	if err := json.Unmarshal(raw, &p); err != nil || len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("pre_tokenizer %s is not supported yet (byte-level's is)", brief(raw))
	}
	byteLevel := func(q preStep, regex bool) error {
		switch {
		case q.Type != "ByteLevel":
			return fmt.Errorf("pre_tokenizer %s is not supported yet (byte-level's is)", brief(raw))
		case q.AddPrefixSpace:
			return fmt.Errorf("ByteLevel with add_prefix_space is not supported yet")
		case regex && q.UseRegex != nil && !*q.UseRegex:
			return fmt.Errorf("ByteLevel without its regex and no Split before it is not supported yet")
		case !regex && (q.UseRegex == nil || *q.UseRegex):
			return fmt.Errorf("ByteLevel with its own regex after a Split is not supported yet")
		}
		return nil
	}
	if p.Type != "Sequence" {
		if err := byteLevel(p, true); err != nil {
			return nil, err
		}
		return splitGPT2, nil
	}
	if len(p.Pretokenizers) != 2 || p.Pretokenizers[0].Type != "Split" {
		return nil, fmt.Errorf("pre_tokenizer %s is not supported yet (a Split and ByteLevel is)", brief(raw))
	}
	sp := p.Pretokenizers[0]
	var pat struct{ Regex string }
	if err := json.Unmarshal(sp.Pattern, &pat); err != nil || pat.Regex != llama3Pattern || sp.Behavior != "Isolated" || sp.Invert {
		return nil, fmt.Errorf("Split %s is not supported yet (Llama 3's regex, isolated, is)", brief(sp.Pattern))
	}
	if err := byteLevel(p.Pretokenizers[1], false); err != nil {
		return nil, err
	}
	return splitLlama3, nil
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

// splitLlama3 calls emit with each match of llama3Pattern in s, in order.
func splitLlama3(s string, emit func(string)) {
	for i := 0; i < len(s); {
		n := matchLlama3(s[i:])
		emit(s[i : i+n])
		i += n
	}
}

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

// matchLlama3 is the length of llama3Pattern's match at the start of s
// (non-empty s), trying the alternatives in order as the regex does.
func matchLlama3(s string) int {
	if s[0] == '\'' && len(s) > 1 { // (?i:'s|'t|'re|'ve|'m|'ll|'d)
		for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
			if len(s) > len(c) && strings.EqualFold(s[1:1+len(c)], c) {
				return 1 + len(c)
			}
		}
	}
	r, w := utf8.DecodeRuneInString(s)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if isLetter(r) {
		return run(s, isLetter)
	}
	if !isNewline(r) && !isNumber(r) && w < len(s) {
		if next, _ := utf8.DecodeRuneInString(s[w:]); isLetter(next) {
			return w + run(s[w:], isLetter)
		}
	}
	// \p{N}{1,3}
	if isNumber(r) {
		n := 0
		for k := 0; k < 3 && n < len(s); k++ {
			c, cw := utf8.DecodeRuneInString(s[n:])
			if !isNumber(c) {
				break
			}
			n += cw
		}
		return n
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	start := 0
	if r == ' ' && w < len(s) {
		if next, _ := utf8.DecodeRuneInString(s[1:]); isOther(next) {
			start = 1
		}
	}
	if o := run(s[start:], isOther); o > 0 {
		n := start + o
		return n + run(s[n:], isNewline)
	}
	// \s*[\r\n]+: the whitespace run up to its last newline.
	n := run(s, isSpace)
	if k := strings.LastIndexAny(s[:n], "\r\n"); k >= 0 {
		return k + 1
	}
	// \s+(?!\S), else \s+
	if n < len(s) && n > w {
		_, last := utf8.DecodeLastRuneInString(s[:n])
		return n - last
	}
	return n
}
