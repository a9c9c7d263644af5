package outfile

import (
	"bytes"
	"errors"
	"fmt"
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
	dir := testfs.Full(t, func(dir string) {
		os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old"), 0o644)
	})
	for _, name := range []string{"out.txt", "old.txt"} {
		p := filepath.Join(dir, name)
		err := WriteBytes(p, nil, bytes.Repeat([]byte("x"), 1<<20))
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("err = %v, want one naming %s", err, p)
		}
	}
	if _, serr := os.Stat(filepath.Join(dir, "out.txt")); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("a cut file was left: %v", serr)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "old.txt")); string(b) != "old" {
		t.Errorf("the old file holds %q", b)
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

// A path through an open descriptor (/dev/stdout into a log the shell
// appends to) is appended to, not replaced: the log keeps its inode and
// what it held.
func TestThroughDescriptor(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "r.log")
	os.WriteFile(log, []byte("PRECIOUS\n"), 0o644)
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fdName := fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	if _, err := os.Stat(fdName); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	before, _ := os.Stat(log)
	link := filepath.Join(dir, "stdout") // as /dev/stdout links to /proc/self/fd/1
	os.Symlink(fdName, link)
	if err := WriteBytes(link, nil, []byte("report\n")); err != nil {
		t.Fatal(err)
	}
	after, _ := os.Stat(log)
	if b, _ := os.ReadFile(log); string(b) != "PRECIOUS\nreport\n" || !os.SameFile(before, after) {
		t.Errorf("the log holds %q (same file: %v)", b, os.SameFile(before, after))
	}
}

// A link to nothing: the file is made where it points, the link kept.
func TestDanglingLink(t *testing.T) {
	dir := t.TempDir()
	link, target := filepath.Join(dir, "out.html"), filepath.Join(dir, "data", "real.html")
	os.Mkdir(filepath.Join(dir, "data"), 0o755)
	os.Symlink("data/real.html", link)
	if err := WriteBytes(link, nil, []byte("page")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); string(b) != "page" {
		t.Errorf("the target holds %q", b)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced")
	}
}

// CreateNew refuses a path that exists, and one that appears before the
// commit, leaving what appeared as it was.
func TestCreateNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "job.amsp")
	os.WriteFile(p, []byte("mine"), 0o644)
	if _, err := CreateNew(p, nil); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("CreateNew over a file: %v", err)
	}
	os.Remove(p)
	o, err := CreateNew(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Write([]byte("generated"))
	os.WriteFile(p, []byte("mine"), 0o644) // appears meanwhile
	if err := o.Commit(); err == nil || !strings.Contains(err.Error(), p) {
		t.Errorf("commit over a file that appeared: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "mine" {
		t.Errorf("the file that appeared holds %q", b)
	}
	assertNoTemp(t, dir)
}
