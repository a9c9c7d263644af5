// Package outfile writes the files a user names on the command line, the
// one way every command does.
//
// A path that does not exist yet, or names a regular file, is written
// atomically: into a temporary file beside it, synced, then renamed over
// it (and the directory synced), so a reader sees the old file or the
// whole new one and a failure leaves the old one as it was. A path that
// names anything else (a character device such as /dev/null, a FIFO, a
// socket) is opened and written in place: replacing /dev/null with a
// regular file would break the machine; a name of an open file
// descriptor (/dev/stdout, /proc/self/fd/N) is appended to, as a shell's
// redirection expects. "-" is standard output. A symbolic link is
// followed, so the file it points at is replaced (or made), not the link.
//
// Every write is checked: the first error is kept, later writes are
// dropped, and Commit returns it naming the path, so that a full disk is
// an error, never an empty or cut file and exit status 0.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
)

// Stdout is the path that means standard output.
const Stdout = "-"

// File is an output being written. Write to it, then Commit (or Abort on
// a failure elsewhere); Commit or Abort must be called exactly once.
type File struct {
	path string
	w    io.Writer // what Write writes to: f, or standard output
	f    *os.File  // nil for standard output
	tmp  string    // the temporary name of an atomic write; "" in place
	dest string    // what tmp is renamed to (path with links resolved)
	// exclusive: Commit must not replace a file that appeared at dest.
	exclusive bool
	err       error // the first failure
	done      bool
}

// Create starts writing path; stdout is what "-" writes to. Nothing at
// path changes until Commit, except for a device or FIFO, which is
// written in place as Write is called.
func Create(path string, stdout io.Writer) (*File, error) {
	return create(path, stdout, false)
}

// CreateNew is Create for a path that must not exist when the file is
// committed: Commit fails, naming it, if something appeared there since.
func CreateNew(path string, stdout io.Writer) (*File, error) {
	return create(path, stdout, true)
}

func create(path string, stdout io.Writer, exclusive bool) (*File, error) {
	if path == "" {
		return nil, errors.New("empty output path")
	}
	if path == Stdout {
		return &File{path: "standard output", w: stdout}, nil
	}
	if throughFD(path) {
		// /dev/stdout, /proc/self/fd/N: a stream the shell opened (a
		// redirection, maybe appending to a log). Renaming a file over
		// what it points at would unlink the log from the shell; write
		// at its end instead.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return nil, err
		}
		return &File{path: path, w: f, f: f}, nil
	}
	dest := path
	fi, err := os.Stat(path) // follows links
	switch {
	case err == nil && fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", path)
	case err == nil && !fi.Mode().IsRegular():
		// A device, FIFO or socket: written in place, never replaced.
		// O_TRUNC means nothing to a device and a FIFO, so it is left off.
		f, err := os.OpenFile(path, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &File{path: path, w: f, f: f}, nil
	case err == nil && exclusive:
		return nil, fmt.Errorf("%s exists", path)
	case err == nil:
		// A regular file, maybe behind links: replace the file, keep the
		// links and the file's permissions.
		if dest, err = filepath.EvalSymlinks(path); err != nil {
			return nil, err
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	default:
		// Nothing there, or a link to nothing: the file is made where
		// the link points, as creating through it would, and the link
		// is kept.
		fi = nil
		if dest, err = linkTarget(path); err != nil {
			return nil, err
		}
	}
	dir, base := filepath.Split(dest)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp*")
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the temporary name means nothing to the user
		}
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
			return nil, fmt.Errorf("cannot write %s: %w (amspc writes a temporary file in %s and renames it over the file, so that a failure leaves the old one)", path, err, dir)
		}
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	mode := fs.FileMode(0o644)
	if fi != nil {
		mode = fi.Mode().Perm()
	}
	o := &File{path: path, w: f, f: f, tmp: f.Name(), dest: dest, exclusive: exclusive}
	if err := f.Chmod(mode); err != nil {
		o.Abort()
		return nil, fmt.Errorf("cannot write %s: %w", path, err)
	}
	return o, nil
}

// throughFD reports whether path is, or links through, an open file
// descriptor's name (/dev/fd/N, /proc/PID/fd/N, as /dev/stdout does).
func throughFD(path string) bool {
	chain, _ := links(path)
	for _, p := range chain {
		if fdPath.MatchString(filepath.Clean(p)) {
			return true
		}
	}
	return false
}

var fdPath = regexp.MustCompile(`^/(proc/[^/]+|dev)/fd/[0-9]+$`)

// linkTarget follows the links at path to the name at their end.
func linkTarget(path string) (string, error) {
	chain, err := links(path)
	return chain[len(chain)-1], err
}

// links is path and every name its symbolic links lead to, in order; the
// last is no link (or could not be read).
func links(path string) ([]string, error) {
	chain := []string{path}
	for p := path; len(chain) <= 40; {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			return chain, nil
		}
		t, err := os.Readlink(p)
		if err != nil {
			return chain, err
		}
		if !filepath.IsAbs(t) {
			t = filepath.Join(filepath.Dir(p), t)
		}
		p = t
		chain = append(chain, p)
	}
	return chain, fmt.Errorf("%s: too many levels of symbolic links", path)
}

// Path is the path the file was created with ("standard output" for -).
func (o *File) Path() string { return o.path }

// Write writes p, or nothing once a write has failed; it reports the
// first failure, so io.Copy and fmt.Fprintf stop at it too.
func (o *File) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	if err != nil {
		o.err = err
	}
	return n, err
}

// Err is the first write failure, or nil.
func (o *File) Err() error { return o.err }

// Commit finishes the file: a regular file is synced and renamed into
// place, a device or FIFO is closed. It returns the first failure of any
// write, the sync, the close or the rename, naming the path; after a
// failure the temporary file is removed and the old file is as it was.
func (o *File) Commit() error {
	if o.done {
		return fmt.Errorf("writing %s: committed twice", o.path)
	}
	o.done = true
	err := o.err
	if o.f != nil {
		if err == nil && o.tmp != "" {
			err = o.f.Sync()
		}
		if cerr := o.f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil && o.tmp != "" {
		if o.exclusive {
			err = linkNew(o.tmp, o.dest)
		} else {
			err = os.Rename(o.tmp, o.dest)
		}
		if err == nil {
			syncDir(filepath.Dir(o.dest))
		}
	}
	if err != nil {
		if o.tmp != "" {
			os.Remove(o.tmp)
		}
		return fmt.Errorf("writing %s: %w", o.path, unwrapPath(err))
	}
	return nil
}

// Abort gives the file up: a temporary file is removed, a device closed;
// what was at the path stays as it was (a device keeps what was written).
// Abort after Commit does nothing, so it can be deferred.
func (o *File) Abort() {
	if o.done {
		return
	}
	o.done = true
	if o.f != nil {
		o.f.Close()
	}
	if o.tmp != "" {
		os.Remove(o.tmp)
	}
}

// Write writes path through write and commits it: the common case.
func Write(path string, stdout io.Writer, write func(w io.Writer) error) error {
	o, err := Create(path, stdout)
	if err != nil {
		return err
	}
	if err := write(o); err != nil {
		o.Abort()
		if werr := o.Err(); werr != nil {
			err = werr // the write failure, not what it caused
		}
		return fmt.Errorf("writing %s: %w", o.path, unwrapPath(err))
	}
	return o.Commit()
}

// WriteBytes writes data to path and commits it.
func WriteBytes(path string, stdout io.Writer, data []byte) error {
	return Write(path, stdout, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// linkNew puts tmp at dest unless something is there: a hard link fails
// if dest exists, atomically, where rename would replace it. Where links
// cannot be made (some network and FUSE filesystems) it looks, then
// renames.
func linkNew(tmp, dest string) error {
	err := os.Link(tmp, dest)
	switch {
	case err == nil:
		return os.Remove(tmp)
	case errors.Is(err, fs.ErrExist):
		return fmt.Errorf("%s appeared while it was written", dest)
	}
	if _, serr := os.Lstat(dest); serr == nil {
		return fmt.Errorf("%s appeared while it was written", dest)
	}
	return os.Rename(tmp, dest)
}

// unwrapPath drops an *fs.PathError's operation and temporary file name:
// the message names the user's path instead.
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}

// syncDir makes a rename in dir durable where the system can sync a
// directory; the file is in place either way.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Checked wraps a stream the program writes to as it goes (standard
// output, an appended log): it keeps the first write failure, after which
// writes are dropped, so that a command can end with exit status 1 and say
// what failed instead of exiting 0 with a cut output.
type Checked struct {
	W   io.Writer
	err error
}

func (c *Checked) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.W.Write(p)
	if err != nil {
		c.err = err
	}
	return n, err
}

// Err is the first write failure; for a regular file it also syncs it, so
// that a failure the kernel reports only then (a full disk, an I/O error)
// is found. Pipes and terminals, which cannot be synced, are not.
func (c *Checked) Err() error {
	if c.err != nil {
		return unwrapPath(c.err)
	}
	if f, ok := c.W.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
			if err := f.Sync(); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
				return unwrapPath(err)
			}
		}
	}
	return nil
}
