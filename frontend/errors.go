package frontend

import (
	"errors"
	"fmt"
	"sort"
	"strings"

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
		if i == MaxErrors {
			b.WriteString("too many errors")
			break
		}
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// diag collects errors, dropping exact repeats (a mistake inside a repeat
// block would otherwise be reported once per layer).
type diag struct {
	errs ErrorList
}

func (d *diag) errorf(pos ir.Pos, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	for _, e := range d.errs {
		if e.Pos == pos && e.Msg == msg {
			return
		}
	}
	d.errs = append(d.errs, &Error{Pos: pos, Msg: msg})
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
func syntaxError(filename string, err error) *Error {
	var perr participle.Error
	if errors.As(err, &perr) {
		p := pos(perr.Position())
		if p.File == "" {
			p.File = filename
		}
		msg := perr.Message()
		msg = strings.ReplaceAll(msg, "<ident>", "name")
		msg = strings.ReplaceAll(msg, "<number>", "number")
		msg = strings.ReplaceAll(msg, "<string>", "string")
		msg = strings.ReplaceAll(msg, "<mesh>", "factor")
		msg = strings.ReplaceAll(msg, `"<EOF>"`, "end of file")
		if strings.HasPrefix(msg, "invalid input text") {
			msg = "invalid character" + strings.TrimPrefix(msg, "invalid input text")
		}
		return &Error{Pos: p, Msg: msg}
	}
	return &Error{Pos: ir.Pos{File: filename}, Msg: err.Error()}
}
