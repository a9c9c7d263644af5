// Package testfs gives tests the awkward places a user may point an
// output at: device nodes and a full filesystem. It is for tests only.
//
// Running as root, the devices are made with mknod inside the test's
// temporary directory (a null and a full device, the same numbers as
// /dev/null and /dev/full), so that a bug that replaces its output path
// replaces a test's node, never the machine's /dev/null; otherwise they
// are /dev/null and /dev/full themselves, which a non-root process cannot
// replace. The full filesystem is a small tmpfs mounted in the test's
// temporary directory and filled; it needs root and is skipped, with a
// message, where mounting is not allowed.
package testfs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// Devices returns a null device and a full device (writes fail with
// ENOSPC) for the test to write to.
func Devices(t testing.TB) (null, full string) {
	t.Helper()
	if os.Geteuid() != 0 {
		for _, p := range []string{"/dev/null", "/dev/full"} {
			if fi, err := os.Stat(p); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
				t.Skipf("%s is not a character device here", p)
			}
		}
		return "/dev/null", "/dev/full"
	}
	dir := t.TempDir()
	null, full = filepath.Join(dir, "null"), filepath.Join(dir, "full")
	for _, d := range []struct {
		path  string
		minor uint32
	}{{null, 3}, {full, 7}} {
		if err := syscall.Mknod(d.path, syscall.S_IFCHR|0o666, int(mkdev(1, d.minor))); err != nil {
			t.Skipf("mknod %s: %v (devices cannot be made here)", d.path, err)
		}
		// On a nodev filesystem the node is made but cannot be opened.
		f, err := os.OpenFile(d.path, os.O_WRONLY, 0)
		if err != nil {
			t.Skipf("open %s: %v (the temporary directory does not allow devices)", d.path, err)
		}
		f.Close()
	}
	return null, full
}

func mkdev(major, minor uint32) uint64 {
	return uint64(major)<<8 | uint64(minor&0xff) | uint64(minor&^0xff)<<12
}

// AssertDevice fails the test unless path is still a character device.
func AssertDevice(t testing.TB, path string) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Errorf("%s: %v", path, err)
		return
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		t.Errorf("%s is no longer a character device: %v", path, fi.Mode())
	}
}

// Full returns a directory on a filesystem with no space left: a 256 KiB
// tmpfs, filled after setup (when not nil) has put files there. It is
// unmounted when the test ends.
func Full(t testing.TB, setup func(dir string)) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a full filesystem needs root to mount a tmpfs; skipped")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s (a full filesystem cannot be made here)", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	if setup != nil {
		setup(dir)
	}
	f, err := os.Create(filepath.Join(dir, ".filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 4096)
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling %s: %v", dir, err)
			}
			break
		}
	}
	return dir
}
