package main

import (
	"fmt"
	"io"
	"math"
	"strings"
	"unicode/utf8"
)

// lineWidth is what plan and sweep output fit in: tables, notes and the
// explanation are laid out (or wrapped) to it.
const lineWidth = 120

// A table is columns of cells, padded by hand rather than by tabwriter so
// that a note line under a row (why a plan does not fit) does not break
// the alignment of the rows around it.
type table struct {
	cols []tableCol
	rows []tableRow
}

type tableCol struct {
	head string
	left bool // text columns; numbers align right
}

type tableRow struct {
	cells []string
	note  string // printed on its own line under the row, indented to the second column
}

func (t *table) add(note string, cells ...string) {
	t.rows = append(t.rows, tableRow{cells: cells, note: note})
}

// write prints the table with two spaces between columns and no trailing
// blanks.
func (t *table) write(w io.Writer) {
	width := make([]int, len(t.cols))
	for i, c := range t.cols {
		width[i] = utf8.RuneCountInString(c.head)
	}
	for _, r := range t.rows {
		for i, s := range r.cells {
			width[i] = max(width[i], utf8.RuneCountInString(s))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		for i, s := range cells {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(s))
			if t.cols[i].left {
				b.WriteString(s + pad)
			} else {
				b.WriteString(pad + s)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	heads := make([]string, len(t.cols))
	for i, c := range t.cols {
		heads[i] = c.head
	}
	line(heads)
	indent := 0
	if len(width) > 1 {
		indent = width[0] + 2
	}
	for _, r := range t.rows {
		line(r.cells)
		if r.note != "" {
			wrap(w, strings.Repeat(" ", indent+2), r.note)
		}
	}
}

// wrap prints text at the given indent, broken between words so that no
// line is longer than lineWidth; continuation lines are indented two more.
func wrap(w io.Writer, indent, text string) {
	var words []string
	for _, word := range strings.Fields(text) {
		if n := len(words); n > 0 && unitWords[strings.TrimRight(word, ",.;:)")] {
			words[n-1] += " " + word // keep "80.0 GiB" on one line
			continue
		}
		words = append(words, word)
	}
	cur := indent
	n := utf8.RuneCountInString(cur)
	empty := true
	for _, word := range words {
		k := utf8.RuneCountInString(word)
		if !empty && n+1+k > lineWidth {
			fmt.Fprintln(w, cur)
			cur, n, empty = indent+"  ", utf8.RuneCountInString(indent)+2, true
		}
		if !empty {
			cur += " "
			n++
		}
		cur += word
		n += k
		empty = false
	}
	fmt.Fprintln(w, cur)
}

var unitWords = map[string]bool{"GiB": true, "MiB": true, "KiB": true, "GB": true, "MB": true, "kB": true,
	"s": true, "ms": true, "µs": true}

// truncate shortens s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// A unit is a scale for a column of numbers, named in its header.
type unit struct {
	name  string
	bytes float64
}

var (
	binaryUnits  = []unit{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}
	decimalUnits = []unit{{"GB", 1e9}, {"MB", 1e6}, {"kB", 1e3}}
)

// pickUnit is the largest unit in which the biggest value is at least 1,
// so a column reads "47.8" in GiB for LLaMA and "3.3" in MiB for a toy
// model instead of "0.0".
func pickUnit(units []unit, values ...float64) unit {
	big := 0.0
	for _, v := range values {
		big = max(big, v)
	}
	for _, u := range units {
		if big >= 0.995*u.bytes {
			return u
		}
	}
	return units[len(units)-1]
}

// in formats b in unit u with fixed decimals; a value that would print
// as zero but is not says "<0.1".
func (u unit) in(b float64, decimals int) string {
	s := fmt.Sprintf("%.*f", decimals, b/u.bytes)
	if b > 0 && strings.Trim(s, "0.") == "" {
		return "<" + strings.TrimSuffix(s, "0") + "1"
	}
	return s
}

// sig3 formats v (>= 0) with three significant digits and no exponent:
// "1.15", "18.8", "144", "1234".
func sig3(v float64) string {
	switch {
	case v == 0:
		return "0"
	case math.Abs(v) < 9.995:
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) < 99.95:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// dur formats seconds: "1.23 s", "45.6 ms", "789 µs", "9.00 ms".
func dur(s float64) string {
	switch {
	case s == 0:
		return "0"
	case s >= 0.9995:
		return sig3(s) + " s"
	case s >= 0.9995e-3:
		return sig3(s*1e3) + " ms"
	}
	return sig3(s*1e6) + " µs"
}

// shortBytes prints a byte count in a few characters: "23.3G", "4.1M",
// "1.0M" for 1020 KiB.
func shortBytes(b float64) string {
	for _, u := range []struct {
		s string
		f float64
	}{{"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if b >= 0.95*u.f {
			return fmt.Sprintf("%.1f%s", b/u.f, u.s)
		}
	}
	return fmt.Sprintf("%.0f", b)
}

// percent formats a fraction as "52.5%".
func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
