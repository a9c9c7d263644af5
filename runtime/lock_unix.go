//go:build unix

package runtime

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// processGone reports whether process pid has ended on this machine: no
// such process, or (where /proc says) a zombie, which has ended but not
// yet been reaped (a job's orphaned process, until init gets to it).
func processGone(pid int) bool {
	if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state ...: comm may hold anything, even ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}
