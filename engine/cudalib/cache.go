package cudalib

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
)

// The compile cache holds one file per module: the SHA-256 of the cubin,
// then the cubin. A file whose sum does not match (cut short, corrupted)
// is not used: the module is compiled again and the file replaced.

// CacheDir is where compiled modules are kept: $AMSPC_CUDA_CACHE, or
// amspc/cuda under the user's cache directory.
func CacheDir() (string, error) {
	if d := os.Getenv("AMSPC_CUDA_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "amspc", "cuda"), nil
}

// readCache returns the cubin cached at path, or false when there is
// none or it is damaged.
func readCache(path string) ([]byte, bool) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) < sha256.Size {
		return nil, false
	}
	sum, cubin := b[:sha256.Size], b[sha256.Size:]
	got := sha256.Sum256(cubin)
	if !bytes.Equal(sum, got[:]) || len(cubin) == 0 {
		return nil, false
	}
	return cubin, true
}

// writeCache stores cubin at path through a temporary file and a rename,
// so a crash leaves either the old file or the new one.
func writeCache(path string, cubin []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".cubin*")
	if err != nil {
		return err
	}
	sum := sha256.Sum256(cubin)
	_, err = f.Write(append(sum[:], cubin...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("caching a compiled module: %v", err)
	}
	return nil
}
