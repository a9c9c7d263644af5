package frontend

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/alecthomas/participle/v2"
	"github.com/alecthomas/participle/v2/lexer"

	"amspc/ir"
)

// MaxErrors is how many errors a report shows before "too many errors".
const MaxErrors = 10

// Error is one user error at a source position.
type Error struct {
	Pos ir.Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// ErrorList is the user errors of one load, sorted by position.
type ErrorList []*Error

func (l ErrorList) Error() string {
	var b strings.Builder
	for i, e := range l {
		if i > 0 {
			b.WriteByte('\n')
		}
		if i == MaxErrors {
			b.WriteString("too many errors")
			break
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// diag collects errors, dropping exact repeats (a mistake inside a repeat
// block would otherwise be reported once per layer).
type diag struct {
	errs ErrorList
	seen map[Error]bool
}

func (d *diag) errorf(pos ir.Pos, format string, args ...any) {
	e := Error{Pos: pos, Msg: fmt.Sprintf(format, args...)}
	if d.seen[e] {
		return
	}
	if d.seen == nil {
		d.seen = map[Error]bool{}
	}
	d.seen[e] = true
	d.errs = append(d.errs, &e)
}

func (d *diag) failed() bool { return len(d.errs) > 0 }

// err returns the sorted list, or nil when there is none.
func (d *diag) err() error {
	if len(d.errs) == 0 {
		return nil
	}
	sort.SliceStable(d.errs, func(i, j int) bool {
		a, b := d.errs[i].Pos, d.errs[j].Pos
		if a.File != b.File {
			return a.File < b.File
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	return d.errs
}

func pos(p lexer.Position) ir.Pos {
	return ir.Pos{File: p.Filename, Line: p.Line, Col: p.Column}
}

// syntaxError turns a participle error into our form: a position and a
// lower-case message that names what was found and what was expected.
func syntaxError(src Source, err error) *Error {
	var lerr *lexer.Error
	if errors.As(err, &lerr) {
		return &Error{Pos: srcPos(src, lerr.Pos), Msg: badChar(src.Text, lerr.Pos.Offset)}
	}
	var uerr *participle.UnexpectedTokenError
	if errors.As(err, &uerr) {
		tok := uerr.Unexpected
		p, what := tok.Pos, strconv.Quote(tok.Value)
		if tok.EOF() {
			// The end of the file is usually a line or more below the
			// mistake; point just after the last token instead, where the
			// missing text belongs.
			p, what = endOfLastToken(src, p), "end of file"
		}
		if next, ok := danglingOperator(src, tok); ok {
			what := strconv.Quote(next.Value)
			if next.EOF() {
				what = "end of file"
			}
			return &Error{Pos: srcPos(src, next.Pos), Msg: fmt.Sprintf("unexpected %s after %q, expected an expression", what, tok.Value)}
		}
		if name, ok := missingValue(src, tok); ok {
			return &Error{Pos: srcPos(src, name.Pos), Msg: fmt.Sprintf("missing value before %q", name.Value+" =")}
		}
		msg := "unexpected " + what
		switch exp := expectedSymbol(uerr.Message()); {
		case exp != "":
			msg += ", expected " + exp
		case !strings.Contains(uerr.Message(), "(expected"):
			// Only text after the last section comes without an
			// expectation: the file rule matched all it could.
			msg += ", expected a section (model, cluster, train or shard)"
		}
		return &Error{Pos: srcPos(src, p), Msg: msg}
	}
	var perr participle.Error
	if errors.As(err, &perr) {
		return &Error{Pos: srcPos(src, perr.Position()), Msg: lowerFirst(perr.Message())}
	}
	return &Error{Pos: ir.Pos{File: src.Name, Line: 1, Col: 1}, Msg: lowerFirst(err.Error())}
}

func srcPos(src Source, p lexer.Position) ir.Pos {
	out := pos(p)
	if out.File == "" {
		out.File = src.Name
	}
	if out.Line < 1 {
		out.Line, out.Col = 1, 1
	}
	if out.Col < 1 {
		out.Col = 1
	}
	return out
}

// badChar describes the text the lexer could not match at off: a quote
// that starts no string is an unterminated one (strings end on their line).
func badChar(text []byte, off int) string {
	if off < 0 || off >= len(text) {
		return "invalid character"
	}
	r, _ := utf8.DecodeRune(text[off:])
	switch {
	case r == '"':
		return "unterminated string"
	case r < utf8.RuneSelf && unicode.IsPrint(r):
		return "invalid character " + strconv.Quote(string(r))
	}
	return fmt.Sprintf("invalid character %s (U+%04X)", strconv.Quote(string(r)), r)
}

// tokens lexes src again, dropping comments and spaces; only error paths
// need it, to look around the token participle stopped at.
func tokens(src Source) []lexer.Token {
	lx, err := amspLexer.Lex(src.Name, bytes.NewReader(src.Text))
	if err != nil {
		return nil
	}
	syms := amspLexer.Symbols()
	var out []lexer.Token
	for {
		tok, err := lx.Next()
		if err != nil || tok.EOF() {
			return out
		}
		if tok.Type != syms["Comment"] && tok.Type != syms["Whitespace"] {
			out = append(out, tok)
		}
	}
}

// endOfLastToken is the position just after the last token before eof,
// or eof itself in a file without tokens.
func endOfLastToken(src Source, eof lexer.Position) lexer.Position {
	toks := tokens(src)
	if len(toks) == 0 {
		return eof
	}
	end := toks[len(toks)-1].Pos
	end.Advance(toks[len(toks)-1].Value)
	return end
}

// danglingOperator recognises a binary operator after an operand whose
// right operand is missing, as in `x = a + )`. With one token of
// lookahead the parser gives up on `+ term` and blames the operator; the
// mistake is the token after it, which it returns.
func danglingOperator(src Source, at lexer.Token) (lexer.Token, bool) {
	if len(at.Value) != 1 || !strings.Contains("+-*/@", at.Value) {
		return lexer.Token{}, false
	}
	toks := tokens(src)
	for i := 1; i < len(toks); i++ {
		if toks[i].Pos.Offset != at.Pos.Offset {
			continue
		}
		prev := toks[i-1]
		syms := amspLexer.Symbols()
		if prev.Type != syms["Ident"] && prev.Type != syms["Number"] && prev.Value != ")" {
			return lexer.Token{}, false
		}
		if i+1 == len(toks) {
			return lexer.Token{Type: lexer.EOF, Pos: endOfLastToken(src, at.Pos)}, true
		}
		// If the next token could start an operand, the operator itself
		// is out of place (as in a setting: nodes = 2 - 1).
		next := toks[i+1]
		startsOperand := next.Type == syms["Ident"] || next.Type == syms["Number"] || next.Value == "(" || next.Value == "-"
		return next, !startsOperand
	}
	return lexer.Token{}, false
}

// missingValue recognises `NAME =` where the parser wanted more of the
// previous line: newlines are spaces, so in `seq_len =` followed by
// `micro_batch = 1` the parser reads micro_batch as seq_len's value and
// trips on the second "=". It returns the position of NAME.
func missingValue(src Source, at lexer.Token) (lexer.Token, bool) {
	if at.Value != "=" {
		return lexer.Token{}, false
	}
	toks := tokens(src)
	for i := 2; i < len(toks); i++ {
		if toks[i].Pos.Offset == at.Pos.Offset {
			// NAME must have been read as a value: after "=" or an
			// operator, not as in `init ones =`.
			name, before := toks[i-1], toks[i-2].Value
			isValue := name.Type == amspLexer.Symbols()["Ident"] && strings.Contains("=+-*/@", before) && len(before) == 1
			return name, isValue
		}
	}
	return lexer.Token{}, false
}

// symbolNames are the grammar's rules as a user would name them.
var symbolNames = map[string]string{
	"<ident>": "a name", "<number>": "a number", "<string>": "a string", "<mesh>": "a factor",
	"Expr": "an expression", "Term": "an expression", "Unary": "an expression", "Primary": "an expression",
	"OpTerm": "an operator", "OpUnary": "an operator", "Call": "a call", "Arg": "an argument",
	"Stmt": "a statement", "Init": "an initialiser (normal, ones or zeros)", "TypeRef": "a dtype",
	"Section": "a section", "Setting": "a setting", "SetValue": "a value", "Quantity": "a number",
}

// expectedSymbol reduces participle's "(expected EBNF...)" to its first
// symbol: `"=" Expr` says "=", `Stmt* "}"` says nothing useful.
func expectedSymbol(msg string) string {
	i := strings.Index(msg, " (expected ")
	if i < 0 {
		return ""
	}
	e := strings.TrimSuffix(msg[i+len(" (expected "):], ")")
	switch {
	case strings.HasPrefix(e, `"`):
		if j := strings.IndexByte(e[1:], '"'); j >= 0 {
			lit := e[:j+2]
			if rest := e[j+2:]; rest == "" || rest[0] == ' ' {
				return lit
			}
		}
		return ""
	case strings.HasPrefix(e, "<"):
		if j := strings.IndexByte(e, '>'); j >= 0 {
			return symbolNames[e[:j+1]]
		}
		return ""
	}
	j := strings.IndexFunc(e, func(r rune) bool { return !unicode.IsLetter(r) })
	if j < 0 {
		j = len(e)
	}
	if j < len(e) && e[j] != ' ' {
		return "" // Stmt*, Arg?: repeated or optional, not a requirement
	}
	return symbolNames[e[:j]]
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	r, n := utf8.DecodeRuneInString(s)
	return string(unicode.ToLower(r)) + s[n:]
}
