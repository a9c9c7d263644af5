//go:build cgo

package cudalib

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
)

// Compile returns src compiled for compute capability major.minor, from
// the cache when it holds a sound copy, else from NVRTC (and caches it;
// a cache that cannot be written only costs the next start a compile).
func (l *Libs) Compile(src, name string, major, minor int) ([]byte, error) {
	sum := sha256.Sum256([]byte(src))
	dir, derr := CacheDir()
	var path string
	if derr == nil {
		path = filepath.Join(dir, cacheKey(hex.EncodeToString(sum[:8]), major, minor, l.NVRTC))
		if cubin, ok := readCache(path); ok {
			return cubin, nil
		}
	}
	cubin, _, err := l.compile(src, name, major, minor)
	if err != nil {
		return nil, err
	}
	if path != "" {
		writeCache(path, cubin)
	}
	return cubin, nil
}
