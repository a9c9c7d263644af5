//go:build cgo

package hostc

import (
	"slices"
	"testing"

	"amspc/ir"
)

// TestGraph: in every mode, work enqueued while capturing does not run;
// each Launch of the graph runs it, reading an upload's bytes as
// SetUpload last set them, with the captured event ordering a copy on
// another stream after the upload; transfers and Sync fail while
// capturing; SetUpload refuses an upload that was not captured or
// another length.
func TestGraph(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			d := NewDevice(m.opts...)
			a := buf(t, d, 4, nil)
			b := buf(t, d, 4, nil)
			if err := d.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			for _, step := range []func() error{
				func() error { return d.UploadOn(ir.Compute, a, bytesOf([]float32{1, 2, 3, 4})) },
				func() error { return d.Record(ir.Compute, 0) },
				func() error { return d.Wait(ir.CommGather, 0) },
				func() error { return d.Copy(ir.CommGather, b, a, 16) },
			} {
				if err := step(); err != nil {
					t.Fatal(err)
				}
			}
			if err := d.Upload(a, bytesOf([]float32{9, 9, 9, 9})); err != errCapturing {
				t.Errorf("Upload while capturing: %v", err)
			}
			if err := d.Sync(); err != errCapturing {
				t.Errorf("Sync while capturing: %v", err)
			}
			g, err := d.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			if got := read(t, d, b, 4); !slices.Equal(got, []float32{0, 0, 0, 0}) {
				t.Fatalf("captured work ran: %v", got)
			}
			for _, want := range [][]float32{{1, 2, 3, 4}, {5, 6, 7, 8}} {
				if want[0] != 1 {
					if err := g.SetUpload(ir.Compute, 0, bytesOf(want)); err != nil {
						t.Fatal(err)
					}
				}
				if err := g.Launch(); err != nil {
					t.Fatal(err)
				}
				if err := d.Sync(); err != nil {
					t.Fatal(err)
				}
				if got := read(t, d, b, 4); !slices.Equal(got, want) {
					t.Errorf("launch: copied %v, want %v", got, want)
				}
			}
			if err := g.SetUpload(ir.Compute, 1, bytesOf([]float32{1, 2, 3, 4})); err == nil {
				t.Error("SetUpload of an upload not captured")
			}
			if err := g.SetUpload(ir.Compute, 0, bytesOf([]float32{1, 2})); err == nil {
				t.Error("SetUpload of another length")
			}
			g.Close()
			if err := g.Launch(); err == nil {
				t.Error("launch of a closed graph")
			}
		})
	}
}
