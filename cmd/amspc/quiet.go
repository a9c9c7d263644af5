package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"amspc/cost/profile"
)

// How quiet the machine was while validate measured. Two things outside
// this process take processor time from its steps: the hypervisor, which
// runs other guests on this one's virtual processors (steal time), and
// other processes on this machine. Linux counts both, in clock ticks of
// every processor (/proc/stat's first line), beside this process's own
// user and system time (/proc/self/stat): a validation says how much of
// its processors' time each took. Neither sees a neighbour on the other
// hyperthread of a core, or one that loads the memory bus: those show
// only as the plans' noise.

// cpuClock is the machine's processor time by state and this process's
// own, in clock ticks.
type cpuClock struct {
	total, busy, steal float64 // every processor: all states; running anything; stolen
	self               float64 // this process, user and system
}

// readCPUClock reads the clocks, or says it cannot (not Linux).
func readCPUClock() (cpuClock, bool) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuClock{}, false
	}
	first, _, _ := strings.Cut(string(stat), "\n")
	f := strings.Fields(first)
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice]:
	// guest time is in user's already.
	if len(f) < 9 || f[0] != "cpu" {
		return cpuClock{}, false
	}
	var t [8]float64
	for i := range t {
		if t[i], err = strconv.ParseFloat(f[i+1], 64); err != nil {
			return cpuClock{}, false
		}
	}
	c := cpuClock{steal: t[7]}
	for i, x := range t {
		c.total += x
		if i != 3 && i != 4 && i != 7 {
			c.busy += x
		}
	}
	self, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return cpuClock{}, false
	}
	// pid (comm) state ppid ... utime stime: fields 14 and 15, counted
	// after the command's name (which may hold spaces and parentheses).
	rest := string(self)
	if i := strings.LastIndexByte(rest, ')'); i >= 0 {
		rest = rest[i+1:]
	}
	g := strings.Fields(rest)
	if len(g) < 13 {
		return cpuClock{}, false
	}
	for _, s := range g[11:13] {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return cpuClock{}, false
		}
		c.self += x
	}
	return c, true
}

// machineLoad is what took the machine's processors from this process
// over an interval, as shares of all their time: Steal the hypervisor,
// Others the machine's other processes.
type machineLoad struct {
	Steal  float64 `json:"steal"`
	Others float64 `json:"others"`
}

// loadBetween is the load from clock a to clock b (zero over no time).
func loadBetween(a, b cpuClock) machineLoad {
	total := b.total - a.total
	if !(total > 0) {
		return machineLoad{}
	}
	// Ticks are counted per processor and per process apart: the
	// difference can round below zero.
	others := (b.busy - a.busy) - (b.self - a.self)
	return machineLoad{Steal: max(0, (b.steal-a.steal)/total), Others: max(0, others/total)}
}

func (l machineLoad) String() string {
	return fmt.Sprintf("%.1f %% of the processors' time stolen by the hypervisor, %.1f %% taken by other processes", 100*l.Steal, 100*l.Others)
}

// loadClock measures the machine's load from its start.
type loadClock struct {
	start cpuClock
	ok    bool
}

func startLoadClock() loadClock {
	c, ok := readCPUClock()
	return loadClock{c, ok}
}

// load is the machine's load since the clock started, or false where
// the clocks cannot be read.
func (c loadClock) load() (machineLoad, bool) {
	now, ok := readCPUClock()
	if !c.ok || !ok {
		return machineLoad{}, false
	}
	return loadBetween(c.start, now), true
}

// note adds the load since the clock started to prof's header, where
// the clocks can be read.
func (c loadClock) note(prof *profile.Profile) {
	if l, ok := c.load(); ok {
		prof.Meta = append(prof.Meta, profile.MetaEntry{Key: "load", Value: l.String() + ", while measuring"})
	}
}
