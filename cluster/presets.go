package cluster

import (
	"fmt"
	"strings"

	"amspc/ir"
)

// The shard presets a shard section can name: each is a point of the
// AMSP space (factors of P, G and OS, and ZeRO++'s secondary shard).

// Presets lists the preset strategy names and whether they take k.
var Presets = []struct {
	Name   string
	TakesK bool
	Doc    string
}{
	{"ddp", false, "DDP: everything replicated (1/1/1)"},
	{"zero1", false, "ZeRO-1: optimizer states sharded over all GPUs (1/1/N)"},
	{"zero2", false, "ZeRO-2: gradients and optimizer states sharded (1/N/N)"},
	{"zero3", false, "ZeRO-3 / FSDP: everything sharded (N/N/N)"},
	{"mics", true, "MiCS(k): everything sharded in groups of k, replicated across groups (k/k/k)"},
	{"hsdp", true, "FSDP HYBRID_SHARD(k): as MiCS (k/k/k)"},
	{"zeropp", true, "ZeRO++ hpZ(k): N/N/N with a secondary parameter shard of k for backward"},
}

// ResolvePreset gives a preset's factors on a data-parallel mesh dp.
func ResolvePreset(name string, k int, dp ir.Factor) (p, g, os, secondary ir.Factor, err error) {
	full := dp
	one := ir.Factor{S0: 1, S1: 1}
	kf := func() (ir.Factor, error) {
		f, err := ir.GPUsToFactor(k, dp.S0, dp.S1)
		if err != nil {
			return ir.Factor{}, err
		}
		return f, nil
	}
	switch name {
	case "ddp":
		return one, one, one, ir.Factor{}, nil
	case "zero1":
		return one, one, full, ir.Factor{}, nil
	case "zero2":
		return one, full, full, ir.Factor{}, nil
	case "zero3":
		return full, full, full, ir.Factor{}, nil
	case "mics", "hsdp":
		f, err := kf()
		return f, f, f, ir.Factor{}, err
	case "zeropp":
		f, err := kf()
		return full, full, full, f, err
	}
	var names []string
	for _, p := range Presets {
		names = append(names, p.Name)
	}
	return one, one, one, ir.Factor{}, fmt.Errorf("unknown shard preset %q (known: %s)", name, strings.Join(names, ", "))
}
