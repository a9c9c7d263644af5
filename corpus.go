// Package amspc holds what the whole module shares at its root: the
// default training corpus, embedded so that `amspc run` works out of the
// box anywhere.
package amspc

import (
	"embed"
	"io/fs"
	"sort"
)

//go:embed README.md docs/*.md
var corpusFS embed.FS

// DefaultCorpus is the text `amspc run` trains on without --data: this
// repository's README and docs, concatenated in path order, as bytes
// (vocabulary 256).
func DefaultCorpus() []byte {
	var paths []string
	fs.WalkDir(corpusFS, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	sort.Strings(paths)
	var out []byte
	for _, p := range paths {
		b, _ := corpusFS.ReadFile(p)
		out = append(out, b...)
	}
	return out
}
