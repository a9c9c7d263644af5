package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"

	"amspc/engine"

	// The device kinds --device names register themselves with the
	// engine, as database/sql's drivers do: imported for that alone.
	_ "amspc/engine/cudalib"    // cuda
	_ "amspc/kernels/gpu/hostc" // sim
)

// openDevices opens the device kind name (--device) for command cmd, or
// says in one line why it cannot: the missing library, no GPU, no cgo.
func openDevices(cmd, name string, o engine.DeviceOptions, stderr io.Writer) (*engine.Devices, bool) {
	d, err := engine.OpenDevices(name, o)
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

// deviceWorld is the world device collectives run among: every rank in
// this process (pw nil), or one rank of an MPI job, which gets rank 0's
// bootstrap bytes (NCCL's unique id) over the job's control stream.
func deviceWorld(n int, pw *procWorld) engine.DeviceWorld {
	if pw == nil {
		local := make([]int, n)
		for i := range local {
			local[i] = i
		}
		return engine.DeviceWorld{Size: n, Local: local}
	}
	w := pw.world
	return engine.DeviceWorld{Size: w.Size(), Local: w.Local(), Bootstrap: func(rank int, root []byte) ([]byte, error) {
		// The bytes travel as float32 bit patterns, copied, never added.
		var size [1]float32
		if rank == 0 {
			size[0] = float32(len(root))
		}
		all := make([]int, w.Size())
		for i := range all {
			all[i] = i
		}
		c := w.Comm(rank)
		if err := c.Broadcast(engine.ControlStream, all, 0, size[:]); err != nil {
			return nil, err
		}
		buf := make([]float32, (int(size[0])+3)/4)
		if rank == 0 {
			padded := make([]byte, 4*len(buf))
			copy(padded, root)
			for i := range buf {
				buf[i] = math.Float32frombits(binary.LittleEndian.Uint32(padded[4*i:]))
			}
		}
		if err := c.Broadcast(engine.ControlStream, all, 0, buf); err != nil {
			return nil, err
		}
		out := make([]byte, 4*len(buf))
		for i, f := range buf {
			binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(f))
		}
		return out[:int(size[0])], nil
	}}
}
