//go:build unix

package engine

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
	f := procStat(pid)
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// procStat is /proc/PID/stat's fields from the third (the state) on,
// nil where /proc does not say.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil
	}
	// pid (comm) state ...: comm may hold anything, even ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// procStart is when process pid started, in clock ticks after boot
// (field 22 of /proc/PID/stat): with the boot id, it tells a process from
// a later one given the same pid.
func procStart(pid int) (string, bool) {
	f := procStat(pid)
	if len(f) < 20 {
		return "", false
	}
	return f[19], true
}

// bootID is the kernel's boot id, "" where /proc does not say.
func bootID() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
