package engine_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"amspc/engine"
	"amspc/ir"
	"amspc/kernels/gpu"
)

// nullDevice is a Device that does nothing and says its peak: enough to
// be opened and given to a backend.
type nullDevice struct{}

func (nullDevice) Name() string                                      { return "null" }
func (nullDevice) Alloc(int64) (uint64, error)                       { return 0, nil }
func (nullDevice) Free(uint64)                                       {}
func (nullDevice) Upload(uint64, []byte) error                       { return nil }
func (nullDevice) UploadOn(int, uint64, []byte) error                { return nil }
func (nullDevice) Download([]byte, uint64) error                     { return nil }
func (nullDevice) Copy(int, uint64, uint64, int64) error             { return nil }
func (nullDevice) Zero(int, uint64, int64) error                     { return nil }
func (nullDevice) Launch(int, *gpu.Launch, []uint64) error           { return nil }
func (nullDevice) Gemm(int, *gpu.Gemm, uint64, uint64, uint64) error { return nil }
func (nullDevice) Record(int, int) error                             { return nil }
func (nullDevice) Wait(int, int) error                               { return nil }
func (nullDevice) Sync() error                                       { return nil }
func (nullDevice) Peak() int64                                       { return 42 }

var errUnavailable = errors.New("the test's broken kind is unavailable")

// registerTestKinds registers two kinds once per test binary (a name
// registers once): one that opens, one that cannot.
var registerTestKinds = sync.OnceFunc(func() {
	engine.RegisterDevice("test-null", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		return func(int) (engine.Device, error) { return nullDevice{}, nil }, nil
	})
	engine.RegisterDevice("test-broken", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		return nil, errUnavailable
	})
	engine.RegisterDevice("test-closing", func(engine.DeviceOptions) (func(int) (engine.Device, error), error) {
		return func(int) (engine.Device, error) { return &closingDevice{}, nil }, nil
	})
})

// closingDevice counts its Close calls in closes.
type closingDevice struct {
	nullDevice
	_ int // not zero-sized: each one its own address
}

var closes sync.Map // *closingDevice -> int

func (d *closingDevice) Close() error {
	n, _ := closes.LoadOrStore(d, 0)
	closes.Store(d, n.(int)+1)
	return nil
}

// TestDevicesClose: Close closes each device a rank was given, once,
// however often it is called; devices without a Close method are left.
func TestDevicesClose(t *testing.T) {
	registerTestKinds()
	d, err := engine.OpenDevices("test-closing", engine.DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for r := range 3 {
		if _, err := d.Backend(r); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	closes.Range(func(_, v any) bool {
		if v.(int) != 1 {
			t.Errorf("a device closed %d times", v.(int))
		}
		n++
		return true
	})
	if n != 3 {
		t.Errorf("%d devices closed, want 3", n)
	}
	var none *engine.Devices
	if err := none.Close(); err != nil {
		t.Errorf("nil Devices: %v", err)
	}
}

// TestDeviceRegistry: an unknown kind's error lists the known ones,
// sorted (cpu always among them); a kind's opener's error comes back as
// it is; an opened kind gives each rank a device backend and reports the
// devices' peak where they measure it; a name registers once.
func TestDeviceRegistry(t *testing.T) {
	registerTestKinds()
	names := engine.DeviceNames()
	if !slices.IsSorted(names) || !slices.Contains(names, "cpu") || !slices.Contains(names, "test-null") {
		t.Errorf("DeviceNames() = %q: want them sorted, with cpu and test-null", names)
	}
	_, err := engine.OpenDevices("tpu", engine.DeviceOptions{})
	if want := `no device "tpu" (known: ` + strings.Join(names, ", ") + ")"; err == nil || err.Error() != want {
		t.Errorf("unknown kind: %v, want %q", err, want)
	}
	if _, err := engine.OpenDevices("test-broken", engine.DeviceOptions{}); err != errUnavailable {
		t.Errorf("a kind that cannot open: %v, want its opener's error", err)
	}

	d, err := engine.OpenDevices("test-null", engine.DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.PeakBytes(); ok {
		t.Error("a peak before any device was opened")
	}
	be, err := d.Backend(3)
	if err != nil || be.Name() != "null" {
		t.Fatalf("Backend(3) = %v, %v", be, err)
	}
	if p, ok := d.PeakBytes(); !ok || p != 42 {
		t.Errorf("PeakBytes() = %d, %v; want 42, true", p, ok)
	}

	cpu, err := engine.OpenDevices("cpu", engine.DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if be, err := cpu.Backend(0); err != nil || be.Name() != "cpu" {
		t.Errorf("cpu: %v, %v", be, err)
	}
	if m, err := be.Alloc(ir.F32, 4); err != nil || m.IsHost() {
		t.Errorf("test-null's backend allocates %+v, %v: want device memory", m, err)
	}

	for _, name := range []string{"cpu", "test-null"} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("registering %s again did not panic", name)
				}
			}()
			engine.RegisterDevice(name, func(engine.DeviceOptions) (func(int) (engine.Device, error), error) { return nil, nil })
		}()
	}
}
