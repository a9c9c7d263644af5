//go:build !unix

package engine

// processGone cannot tell here: a lock is never taken as stale by its
// pid alone.
func processGone(pid int) bool { return false }

// procStart cannot tell here.
func procStart(pid int) (string, bool) { return "", false }

// bootID cannot tell here.
func bootID() string { return "" }
