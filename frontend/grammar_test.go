package frontend_test

import (
	"testing"

	"amspc/frontend"
	"amspc/internal/golden"
)

// TestGrammarPinned keeps docs/grammar.ebnf equal to the parser's grammar,
// so a grammar change shows up as a reviewed diff of the docs.
func TestGrammarPinned(t *testing.T) {
	golden.File(t, "../docs/grammar.ebnf", frontend.Grammar())
}
