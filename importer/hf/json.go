package hf

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"amspc/ir"
)

// A node is one JSON value with the byte offset of its first byte, so an
// error about a field can point at it. encoding/json's Unmarshal forgets
// where things were; its Decoder's tokens and InputOffset do not.
type node struct {
	off    int
	kind   nodeKind
	str    string      // kindString
	num    json.Number // kindNumber
	b      bool        // kindBool
	fields []field     // kindObject, in file order
	elems  []*node     // kindArray
}

type nodeKind int

const (
	kindNull nodeKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k nodeKind) String() string {
	return [...]string{"null", "a boolean", "a number", "a string", "an array", "an object"}[k]
}

// A field is one key of an object, with the offset of its key.
type field struct {
	key    string
	keyOff int
	val    *node
}

// source is a config file's text, for turning offsets into positions.
type source struct {
	name string
	text []byte
}

// pos is the 1-based line and column (in runes) of a byte offset.
func (s *source) pos(off int) ir.Pos {
	off = min(max(off, 0), len(s.text))
	before := s.text[:off]
	line := 1 + bytes.Count(before, []byte{'\n'})
	col := 1 + utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:])
	return ir.Pos{File: s.name, Line: line, Col: col}
}

// errAt is a parse error at an offset.
type errAt struct {
	off int
	msg string
}

func (e *errAt) Error() string { return e.msg }

// parseJSON reads one JSON object (a config.json) with the offsets of its
// values. A syntax error, a duplicate key (which json.Unmarshal would
// resolve silently to the last) or anything after the object is an
// *errAt.
func parseJSON(src *source) (*node, error) {
	text := src.text
	if !utf8.Valid(text) {
		off := 0
		for off < len(text) {
			r, n := utf8.DecodeRune(text[off:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			off += n
		}
		return nil, &errAt{off, "invalid UTF-8"}
	}
	p := &jsonParser{src: src, text: text, dec: json.NewDecoder(bytes.NewReader(text))}
	p.dec.UseNumber()
	root, err := p.value()
	if err != nil {
		return nil, err
	}
	if root.kind != kindObject {
		return nil, &errAt{root.off, fmt.Sprintf("a config.json is an object, not %s", root.kind)}
	}
	if off := p.next(); off < len(text) {
		return nil, &errAt{off, "text after the config's closing brace"}
	}
	return root, nil
}

type jsonParser struct {
	src  *source
	text []byte
	dec  *json.Decoder
}

// next is the offset of the next token: the decoder's position past
// white space and the separators it has not consumed yet.
func (p *jsonParser) next() int {
	off := int(p.dec.InputOffset())
	for off < len(p.text) {
		switch p.text[off] {
		case ' ', '\t', '\n', '\r', ',', ':':
			off++
			continue
		}
		break
	}
	return off
}

func (p *jsonParser) token() (json.Token, int, error) {
	off := p.next()
	tok, err := p.dec.Token()
	if err != nil {
		var syn *json.SyntaxError
		switch {
		case errors.As(err, &syn):
			// The offset is past the byte at fault.
			return nil, off, &errAt{max(int(syn.Offset)-1, off), "invalid JSON: " + syn.Error()}
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			return nil, off, &errAt{len(p.text), "invalid JSON: unexpected end of file"}
		}
		return nil, off, &errAt{off, "invalid JSON: " + err.Error()}
	}
	return tok, off, nil
}

func (p *jsonParser) value() (*node, error) {
	tok, off, err := p.token()
	if err != nil {
		return nil, err
	}
	n := &node{off: off}
	switch t := tok.(type) {
	case nil:
		n.kind = kindNull
	case bool:
		n.kind, n.b = kindBool, t
	case json.Number:
		n.kind, n.num = kindNumber, t
	case string:
		n.kind, n.str = kindString, t
	case json.Delim:
		switch t {
		case '{':
			n.kind = kindObject
			return n, p.object(n)
		case '[':
			n.kind = kindArray
			for p.dec.More() {
				e, err := p.value()
				if err != nil {
					return nil, err
				}
				n.elems = append(n.elems, e)
			}
			_, _, err := p.token() // ]
			return n, err
		}
		return nil, &errAt{off, fmt.Sprintf("invalid JSON: unexpected %q", t)}
	}
	return n, nil
}

func (p *jsonParser) object(n *node) error {
	seen := map[string]int{}
	for p.dec.More() {
		tok, off, err := p.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string) // the decoder only gives strings here
		if first, dup := seen[key]; dup {
			at := p.src.pos(first)
			return &errAt{off, fmt.Sprintf("%s: given twice (first at %d:%d)", key, at.Line, at.Col)}
		}
		seen[key] = off
		v, err := p.value()
		if err != nil {
			return err
		}
		n.fields = append(n.fields, field{key: key, keyOff: off, val: v})
	}
	_, _, err := p.token() // }
	return err
}
