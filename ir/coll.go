package ir

import "fmt"

// Coll is a collective operation over a group of ranks.
type Coll uint8

const (
	AllGather Coll = iota
	ReduceScatter
	AllReduce
	Broadcast
	NumColls // the number of collectives
)

var collNames = [...]string{"all_gather", "reduce_scatter", "all_reduce", "broadcast"}

func (c Coll) String() string {
	if c < NumColls {
		return collNames[c]
	}
	return fmt.Sprintf("coll(%d)", int(c))
}

// ParseColl maps a collective's name to it.
func ParseColl(s string) (Coll, bool) {
	for i, n := range collNames {
		if n == s {
			return Coll(i), true
		}
	}
	return 0, false
}

// BusFactor is nccl-tests' ratio of bus bandwidth to algorithm bandwidth
// for a group of n: the bytes each rank must move per byte of the
// collective's size. all-reduce 2(n-1)/n, all-gather and reduce-scatter
// (n-1)/n, broadcast 1.
func (c Coll) BusFactor(n int) float64 {
	if n <= 1 {
		return 0
	}
	f := float64(n-1) / float64(n)
	switch c {
	case AllReduce:
		return 2 * f
	case Broadcast:
		return 1
	}
	return f
}
