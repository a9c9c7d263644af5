//go:build !linux

package main

import "os"

// isTTY reports whether f is a character device, the nearest portable
// test for a terminal.
func isTTY(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
