package outfile

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"amspc/internal/testfs"
)

func TestNewAndReplaced(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	if err := WriteBytes(p, nil, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	// A link to it: the file is replaced, the link kept.
	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink("out.txt", link); err != nil {
		t.Fatal(err)
	}
	if err := WriteBytes(link, nil, []byte("two\n")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "two\n" {
		t.Errorf("out.txt holds %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi.Mode(), err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the old file's 0600", fi.Mode().Perm())
	}
	assertNoTemp(t, dir)
}

func TestStdout(t *testing.T) {
	var b bytes.Buffer
	if err := WriteBytes("-", &b, []byte("x")); err != nil || b.String() != "x" {
		t.Fatalf("%q %v", b.String(), err)
	}
}

func TestDirectoryRefused(t *testing.T) {
	dir := t.TempDir()
	err := WriteBytes(dir, nil, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v, want one naming %s", err, dir)
	}
}

// A failed write leaves the old file and no temporary file.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	os.WriteFile(p, []byte("old"), 0o644)
	err := Write(p, nil, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return errors.New("the generator failed")
	})
	if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "the generator failed") {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("the old file holds %q", b)
	}
	assertNoTemp(t, dir)
}

// A FIFO is written in place, not replaced by a regular file.
func TestFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	got := make(chan []byte)
	go func() {
		f, err := os.Open(p)
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- b
	}()
	if err := WriteBytes(p, nil, []byte("through the pipe")); err != nil {
		t.Fatal(err)
	}
	if b := <-got; string(b) != "through the pipe" {
		t.Errorf("read %q", b)
	}
	if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the FIFO is now %v (%v)", fi.Mode(), err)
	}
}

// Devices are written in place: a null device swallows the output and
// stays a device; a full device's ENOSPC is an error naming the path.
func TestDevices(t *testing.T) {
	null, full := testfs.Devices(t)
	if err := WriteBytes(null, nil, []byte("gone")); err != nil {
		t.Errorf("null device: %v", err)
	}
	testfs.AssertDevice(t, null)
	err := WriteBytes(full, nil, []byte("no room"))
	if err == nil || !strings.Contains(err.Error(), full) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("full device: err = %v, want ENOSPC naming %s", err, full)
	}
	testfs.AssertDevice(t, full)
}

// A full filesystem: the error names the path; the old file is intact.
func TestFullFilesystem(t *testing.T) {
	dir := testfs.Full(t)
	p := filepath.Join(dir, "out.txt")
	err := WriteBytes(p, nil, bytes.Repeat([]byte("x"), 1<<20))
	if err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("err = %v, want one naming %s", err, p)
	}
	if _, serr := os.Stat(p); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a cut file was left: %v", serr)
	}
	assertNoTemp(t, dir)
}

func TestChecked(t *testing.T) {
	_, full := testfs.Devices(t)
	f, err := os.OpenFile(full, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := &Checked{W: f}
	c.Write([]byte("a"))
	c.Write([]byte("b"))
	if err := c.Err(); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("Err() = %v, want ENOSPC", err)
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
}
