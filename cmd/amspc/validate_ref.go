package main

import (
	"fmt"
	"sort"
	"time"

	"amspc/compiler"
	"amspc/engine"
)

// A reference is one run of a fixed plan (the profile's first: ZeRO-3
// over every rank) that validate --calibrate steps beside everything it
// times: before each row's step, after the round's last, and between the
// calibration's measurements. This machine's speed moves in episodes of
// seconds (tiny's ZeRO-2 on 8 ranks: 52, 65 and 78 ms a step, a few
// seconds at each; its DDP beside it moves with it), so a step's time
// tells as much of the moment it ran in as of its plan, and a median of
// eight such lands on whichever episode most of them met. Each time
// validate measures is therefore taken against the reference's step at
// that moment (interpolated between the two around it), and shown at the
// reference's median step over the whole validation: the machine at its
// typical speed. A prediction and a measurement compared so are both at
// that speed; what the reference removes is what moves every plan's
// step alike, and what is left is the model's error (and what moves
// plans unalike). In the experiment that motivated it, windows of eight
// steps of tiny's DDP had medians 38 % apart in wall time and 4 % apart
// against the reference beside them.
type speedRef struct {
	plan  string
	run   *engine.Run
	start time.Time
	// at and secs: each step's middle (seconds since start) and time,
	// in the order taken (at increasing).
	at, secs []float64
	last     time.Time
}

// refEvery is the longest the calibration measures without a reference
// step between, shorter than the machine's episodes, where the
// reference's step is short; a reference whose steps take longer steps
// after refSteps of its steps' time of measurements, so that it takes at
// most a third of the calibration's time (fewwide's ZeRO-3 on 8 ranks
// steps in about a second, and stepped every 300 ms it tripled the
// calibration).
const (
	refEvery = 300 * time.Millisecond
	refSteps = 2
)

// startSpeedRef starts r's plan as the reference and takes an untimed
// step (its first allocations and page faults are not a step's).
func startSpeedRef(r *compiler.Result, label string, tokens []int32) (*speedRef, error) {
	run, err := (&engine.Trainer{Bundle: r.Bundle, Tokens: tokens}).Start()
	if err == nil {
		_, err = run.Step()
	}
	if err != nil {
		return nil, fmt.Errorf("the reference %s: %v", label, err)
	}
	now := time.Now()
	return &speedRef{plan: label, run: run, start: now, last: now}, nil
}

// mid is the middle of what began at t0 and ends now, in seconds since
// the reference started: when a time so measured was taken.
func (s *speedRef) mid(t0 time.Time) float64 {
	return (t0.Sub(s.start) + time.Since(t0)/2).Seconds()
}

// step takes a reference step.
func (s *speedRef) step() error {
	t0 := time.Now()
	if _, err := s.run.Step(); err != nil {
		return fmt.Errorf("the reference %s: %v", s.plan, err)
	}
	s.at = append(s.at, s.mid(t0))
	s.last = time.Now()
	s.secs = append(s.secs, s.last.Sub(t0).Seconds())
	return nil
}

// due takes a reference step when refEvery, or refSteps of its last
// step's time, has passed since the last.
func (s *speedRef) due() error {
	wait := refEvery
	if n := len(s.secs); n > 0 {
		wait = max(wait, time.Duration(refSteps*s.secs[n-1]*float64(time.Second)))
	}
	if time.Since(s.last) < wait {
		return nil
	}
	return s.step()
}

// stepAt is the reference's step at time t (seconds since start): the
// line between the two steps around t, the nearest step's time outside
// them.
func (s *speedRef) stepAt(t float64) float64 {
	n := len(s.at)
	i := sort.SearchFloat64s(s.at, t)
	switch {
	case n == 0:
		return 1
	case i == 0:
		return s.secs[0]
	case i == n:
		return s.secs[n-1]
	}
	a, b := s.at[i-1], s.at[i]
	f := (t - a) / (b - a)
	return s.secs[i-1] + f*(s.secs[i]-s.secs[i-1])
}

// typical is the reference's median step: the speed every time is shown
// at.
func (s *speedRef) typical() float64 { return median(s.secs) }

// scale is what a time measured at t is multiplied by to show it at the
// reference's typical step.
func (s *speedRef) scale(t float64) float64 { return s.typical() / s.stepAt(t) }

// refSummary is what validate says of its reference.
type refSummary struct {
	Plan   string  `json:"plan"`
	Steps  int     `json:"steps"`
	Median float64 `json:"median_s"`
	P10    float64 `json:"p10_s"`
	P90    float64 `json:"p90_s"`
}

func (s *speedRef) summary() *refSummary {
	xs := append([]float64(nil), s.secs...)
	sort.Float64s(xs)
	n := len(xs)
	return &refSummary{Plan: s.plan, Steps: n, Median: median(xs), P10: xs[n/10], P90: xs[(n*9)/10]}
}

// String says how the times were taken and how far the machine's speed
// moved.
func (r *refSummary) String() string {
	return fmt.Sprintf("every time taken against a step of %s beside it and shown at that plan's median step, %s (its %d steps: %s at p10, %s at p90)",
		r.Plan, dur(r.Median), r.Steps, dur(r.P10), dur(r.P90))
}
