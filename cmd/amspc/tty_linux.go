package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// isTTY reports whether f is a terminal: its terminal attributes can be
// read.
func isTTY(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
