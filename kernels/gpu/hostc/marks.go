//go:build cgo

package hostc

import (
	"errors"
	"sync"
	"time"
)

// Marks (engine.TimingDevice): a mark is a work item that reads the
// host's clock when its stream reaches it.
type marks struct {
	mu    sync.Mutex
	times []*time.Time
}

// Mark enqueues a timestamp on stream s and returns its number.
func (d *Device) Mark(s int) (int, error) {
	t := new(time.Time)
	d.marks.mu.Lock()
	i := len(d.marks.times)
	d.marks.times = append(d.marks.times, t)
	d.marks.mu.Unlock()
	return i, d.enqueue(s, func() error {
		*t = time.Now()
		return nil
	})
}

// MarkTimes is each mark's time since mark 0, in seconds (after a Sync).
func (d *Device) MarkTimes() ([]float64, error) {
	d.marks.mu.Lock()
	defer d.marks.mu.Unlock()
	out := make([]float64, len(d.marks.times))
	for i, t := range d.marks.times {
		if t.IsZero() {
			return nil, errors.New("hostc: a mark not reached (no Sync since it?)")
		}
		out[i] = t.Sub(*d.marks.times[0]).Seconds()
	}
	return out, nil
}

// ResetMarks numbers the marks from 0 again.
func (d *Device) ResetMarks() {
	d.marks.mu.Lock()
	d.marks.times = d.marks.times[:0]
	d.marks.mu.Unlock()
}
