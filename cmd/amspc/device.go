package main

import (
	"fmt"
	"io"
	"strings"

	"amspc/engine"

	// The device kinds --device names register themselves with the
	// engine, as database/sql's drivers do: imported for that alone.
	_ "amspc/engine/cudalib"    // cuda
	_ "amspc/kernels/gpu/hostc" // sim
)

// openDevices opens the device kind name (--device) for command cmd, or
// says in one line why it cannot: the missing library, no GPU, no cgo.
func openDevices(cmd, name string, tensorCores bool, stderr io.Writer) (*engine.Devices, bool) {
	d, err := engine.OpenDevices(name, engine.DeviceOptions{TensorCoreAttention: tensorCores})
	if err != nil {
		fmt.Fprintf(stderr, "amspc %s: --device %s: %v\n", cmd, name, err)
		return nil, false
	}
	return d, true
}

// oneOf lists names as a choice: "a, b or c".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
