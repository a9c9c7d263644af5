package cost

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"

	"amspc/ir"
)

// Profile is a table of measured collective bandwidths, the AMSP paper's
// Communication-Profiler output. Its CSV form (docs/profile.md):
//
//	collective,s0,s1,bytes,effective_gbps
//	all_gather,8,1,1048576,85.2
//
// one row per measurement: the collective (all_gather, reduce_scatter,
// all_reduce, broadcast), the group shape (GPUs per node x nodes), the
// size in bytes (nccl-tests' size) and the effective bandwidth
// size / time in GB/s (10^9 bytes per second, the paper's w). Between
// measured sizes the bandwidth is interpolated linearly in log(size) and
// log(bandwidth); outside them it is held at the nearest measurement. A
// group shape the profile lacks falls back to the analytic model.
type Profile struct {
	Name string
	rows map[profileKey][]profilePoint
}

type profileKey struct {
	c      Coll
	s0, s1 int
}

type profilePoint struct{ logBytes, logBW float64 }

// ReadProfile reads a profile CSV. Errors name the file and line.
func ReadProfile(name string) (*Profile, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseProfile(name, f)
}

// ParseProfile reads a profile CSV from r.
func ParseProfile(name string, r io.Reader) (*Profile, error) {
	p := &Profile{Name: name, rows: map[profileKey][]profilePoint{}}
	sc := bufio.NewScanner(r)
	line := 0
	seen := map[string]int{}
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		if line == 1 || strings.HasPrefix(text, "collective,") {
			if text != "collective,s0,s1,bytes,effective_gbps" {
				return nil, fmt.Errorf("%s:%d: header must be collective,s0,s1,bytes,effective_gbps", name, line)
			}
			continue
		}
		f := strings.Split(text, ",")
		if len(f) != 5 {
			return nil, fmt.Errorf("%s:%d: want 5 fields (collective,s0,s1,bytes,effective_gbps), got %d", name, line, len(f))
		}
		c, ok := ParseColl(strings.TrimSpace(f[0]))
		if !ok {
			return nil, fmt.Errorf("%s:%d: unknown collective %q (all_gather, reduce_scatter, all_reduce, broadcast)", name, line, f[0])
		}
		s0, e0 := strconv.Atoi(strings.TrimSpace(f[1]))
		s1, e1 := strconv.Atoi(strings.TrimSpace(f[2]))
		bytes, e2 := strconv.ParseFloat(strings.TrimSpace(f[3]), 64)
		bw, e3 := strconv.ParseFloat(strings.TrimSpace(f[4]), 64)
		switch {
		case e0 != nil || e1 != nil || s0 < 1 || s1 < 1:
			return nil, fmt.Errorf("%s:%d: group shape %s x %s must be positive integers", name, line, f[1], f[2])
		case e2 != nil || !(bytes > 0) || math.IsInf(bytes, 0):
			return nil, fmt.Errorf("%s:%d: bytes %q must be a positive number", name, line, f[3])
		case e3 != nil || !(bw > 0) || math.IsInf(bw, 0):
			return nil, fmt.Errorf("%s:%d: bandwidth %q must be a positive number of GB/s", name, line, f[4])
		}
		key := fmt.Sprintf("%v %dx%d %g", c, s0, s1, bytes)
		if prev, dup := seen[key]; dup {
			return nil, fmt.Errorf("%s:%d: %s measured twice (first on line %d)", name, line, key, prev)
		}
		seen[key] = line
		k := profileKey{c, s0, s1}
		p.rows[k] = append(p.rows[k], profilePoint{math.Log(bytes), math.Log(bw * 1e9)})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	if len(p.rows) == 0 {
		return nil, fmt.Errorf("%s: no measurements", name)
	}
	for _, pts := range p.rows {
		sort.Slice(pts, func(i, j int) bool { return pts[i].logBytes < pts[j].logBytes })
	}
	return p, nil
}

// Bandwidth is the effective bandwidth (bytes/s) of c over g at size
// bytes, and whether the profile covers that collective and group.
func (p *Profile) Bandwidth(c Coll, g ir.Factor, bytes float64) (float64, bool) {
	pts := p.rows[profileKey{c, g.S0, g.S1}]
	if len(pts) == 0 {
		return 0, false
	}
	x := math.Log(bytes)
	switch {
	case x <= pts[0].logBytes:
		return math.Exp(pts[0].logBW), true
	case x >= pts[len(pts)-1].logBytes:
		return math.Exp(pts[len(pts)-1].logBW), true
	}
	i := sort.Search(len(pts), func(i int) bool { return pts[i].logBytes >= x })
	a, b := pts[i-1], pts[i]
	t := (x - a.logBytes) / (b.logBytes - a.logBytes)
	return math.Exp(a.logBW + t*(b.logBW-a.logBW)), true
}
