package engine

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Device kinds are registered, not imported: the package that drives a
// kind (engine/cudalib "cuda", kernels/gpu/hostc "sim") registers it in
// its init, as a database/sql driver does, so that engine imports no
// device package and a command picks a kind by name after importing its
// package for that side effect alone.

// A DeviceOpener opens a kind of device for a run. It is called once per
// run, before any rank starts, to find what the kind needs (a library,
// the GPUs): its error says in one sentence why the kind is unavailable.
// The function it returns gives rank r its Device.
type DeviceOpener func(o DeviceOptions) (forRank func(rank int) (Device, error), err error)

// cpuName is the built-in kind: package kernels on the host, no Device.
const cpuName = "cpu"

var registry struct {
	sync.Mutex
	kinds map[string]DeviceOpener
}

// RegisterDevice makes a device kind available to OpenDevices as name.
// Registering a name twice, or "cpu", panics: two packages claiming one
// name is a bug in the program, found at start-up.
func RegisterDevice(name string, open DeviceOpener) {
	registry.Lock()
	defer registry.Unlock()
	if open == nil {
		panic("engine: RegisterDevice of " + name + " with a nil opener")
	}
	if _, dup := registry.kinds[name]; dup || name == cpuName {
		panic("engine: RegisterDevice called twice for device " + name)
	}
	if registry.kinds == nil {
		registry.kinds = map[string]DeviceOpener{}
	}
	registry.kinds[name] = open
}

// DeviceNames lists the device kinds OpenDevices knows, sorted: "cpu" and
// every registered kind.
func DeviceNames() []string {
	registry.Lock()
	defer registry.Unlock()
	names := []string{cpuName}
	for name := range registry.kinds {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Devices are the devices of one kind that a run's ranks run on, each
// rank's behind a device backend (the CPU's ranks need none).
type Devices struct {
	opts    DeviceOptions
	forRank func(int) (Device, error) // nil: the CPU

	mu     sync.Mutex
	opened []Device
}

// OpenDevices opens the device kind name with options o: "cpu", or a
// kind a package registered. An unknown name's error lists the known
// ones.
func OpenDevices(name string, o DeviceOptions) (*Devices, error) {
	d := &Devices{opts: o}
	if name == cpuName {
		return d, nil
	}
	registry.Lock()
	open := registry.kinds[name]
	registry.Unlock()
	if open == nil {
		return nil, fmt.Errorf("no device %q (known: %s)", name, strings.Join(DeviceNames(), ", "))
	}
	forRank, err := open(o)
	if err != nil {
		return nil, err
	}
	d.forRank = forRank
	return d, nil
}

// Backend is rank r's backend on its device: what Run.NewBackend and
// MeasureKernelOn's newBackend give a rank.
func (d *Devices) Backend(rank int) (Backend, error) {
	if d.forRank == nil {
		return NewCPUBackend(), nil
	}
	dev, err := d.forRank(rank)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.opened = append(d.opened, dev)
	d.mu.Unlock()
	return NewDeviceBackendWith(dev, d.opts), nil
}

// Close closes every device a rank was given that has a Close method
// (CUDA's: its streams, events, pinned staging memory and NCCL
// communicators) and forgets them; the first error. Devices may open
// backends again after.
func (d *Devices) Close() error {
	if d == nil {
		return nil
	}
	d.mu.Lock()
	opened := d.opened
	d.opened = nil
	d.mu.Unlock()
	var first error
	seen := map[Device]bool{}
	for _, dev := range opened {
		c, ok := dev.(interface{ Close() error })
		if !ok || seen[dev] {
			continue
		}
		seen[dev] = true
		if err := c.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// PeakBytes is the most device memory any rank's device has had
// allocated at once (its buffers at their device sizes and the kernels'
// scratch), where the devices measure it (a Peak() int64 method: CUDA's
// do, the simulated GPU does not); false where they do not, or none was
// opened.
func (d *Devices) PeakBytes() (int64, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var peak int64
	measured := false
	for _, dev := range d.opened {
		if p, ok := dev.(interface{ Peak() int64 }); ok {
			peak, measured = max(peak, p.Peak()), true
		}
	}
	return peak, measured
}
