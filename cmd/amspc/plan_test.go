package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestPlanFits120 keeps `amspc plan`, under both objectives, within 120
// columns for every model we ship, with no exponent in any number.
func TestPlanFits120(t *testing.T) {
	models, _ := filepath.Glob("../../testdata/models/*.amsp")
	examples, _ := filepath.Glob("../../../shared/examples/*.amsp")
	models = append(models, examples...)
	if testing.Short() {
		models = []string{"../../testdata/models/tiny.amsp"}
	}
	exponent := regexp.MustCompile(`[0-9]e[+-][0-9]`)
	for _, m := range models {
		for _, obj := range []string{"step", "paper"} {
			t.Run(filepath.Base(m)+"/"+obj, func(t *testing.T) {
				var stdout, stderr bytes.Buffer
				run([]string{"plan", "--objective", obj, m}, &stdout, &stderr)
				out := stdout.String() + stderr.String()
				for _, l := range strings.Split(out, "\n") {
					if n := utf8.RuneCountInString(l); n > lineWidth {
						t.Errorf("line of %d runes:\n%s", n, l)
					}
					if exponent.MatchString(l) {
						t.Errorf("number with an exponent:\n%s", l)
					}
				}
			})
		}
	}
}

// TestShortBytes pins the byte format where %.3g used to print
// "1.02e+03K".
func TestShortBytes(t *testing.T) {
	for _, c := range []struct {
		b    float64
		want string
	}{{512, "512"}, {1023.9 * 1024, "1.0M"}, {1020 * 1024, "1.0M"}, {900 * 1024, "900.0K"}, {23.3 * (1 << 30), "23.3G"}} {
		if got := shortBytes(c.b); got != c.want {
			t.Errorf("shortBytes(%g) = %q, want %q", c.b, got, c.want)
		}
	}
	for _, c := range []struct {
		s    float64
		want string
	}{{0, "0"}, {9e-3, "9.00 ms"}, {1234, "1234 s"}, {0.99996, "1.00 s"}, {491e-6, "491 µs"}, {99.96, "100 s"}} {
		if got := dur(c.s); got != c.want {
			t.Errorf("dur(%g) = %q, want %q", c.s, got, c.want)
		}
	}
}
