package ir

import (
	"fmt"
	"math"
)

// ScheduleKind is how the learning rate moves after warmup.
type ScheduleKind uint8

const (
	ConstantLR ScheduleKind = iota // the optimizer's lr
	CosineLR                       // half a cosine from lr down to min_lr at the last step
	LinearLR                       // a straight line from lr down to min_lr at the last step
	WSDLR                          // warmup, stable at lr, then a straight line to min_lr over the last decay steps
)

var scheduleNames = [...]string{ConstantLR: "constant", CosineLR: "cosine", LinearLR: "linear", WSDLR: "wsd"}

func (k ScheduleKind) String() string {
	if int(k) < len(scheduleNames) {
		return scheduleNames[k]
	}
	return fmt.Sprintf("schedule(%d)", k)
}

// ParseSchedule reads a schedule's name.
func ParseSchedule(s string) (ScheduleKind, bool) {
	for k, n := range scheduleNames {
		if n == s {
			return ScheduleKind(k), true
		}
	}
	return 0, false
}

// LRSchedule is the train section's lr_schedule: the learning rate of
// each step as a multiple of the optimizer's lr (the peak). The zero
// value is a constant rate.
type LRSchedule struct {
	Kind ScheduleKind
	// Warmup steps rise linearly to the peak: step s <= Warmup (from 1)
	// takes s/Warmup of it, as torchtitan's and Megatron's warmups do.
	Warmup int64
	// Decay is WSD's final decay, in steps.
	Decay int64
	// MinLR is the rate the decay ends at (an absolute rate, not a
	// fraction of the peak).
	MinLR float64
}

// LR is the learning rate of step (from 1) of a run of total steps, for
// peak rate lr. Past the last step, or with total unknown (0), the decay
// holds its end.
func (s LRSchedule) LR(lr float64, step, total int64) float64 {
	if s.Warmup > 0 && step <= s.Warmup {
		return lr * float64(step) / float64(s.Warmup)
	}
	var frac float64 // of the decay done
	switch s.Kind {
	case ConstantLR:
		return lr
	case CosineLR, LinearLR:
		span := total - s.Warmup
		if span <= 0 {
			return s.MinLR
		}
		frac = min(1, float64(step-s.Warmup)/float64(span))
	case WSDLR:
		start := total - s.Decay
		if step <= start {
			return lr
		}
		if s.Decay <= 0 {
			return s.MinLR
		}
		frac = min(1, float64(step-start)/float64(s.Decay))
	}
	if s.Kind == CosineLR {
		return s.MinLR + (lr-s.MinLR)*0.5*(1+math.Cos(math.Pi*frac))
	}
	return lr + (s.MinLR-lr)*frac
}

// String is the schedule as the train section writes it.
func (s LRSchedule) String() string {
	if s == (LRSchedule{}) {
		return "constant"
	}
	out := fmt.Sprintf("%v(warmup=%d", s.Kind, s.Warmup)
	if s.Kind == WSDLR {
		out += fmt.Sprintf(", decay=%d", s.Decay)
	}
	if s.Kind != ConstantLR {
		out += ", min_lr=" + FormatFloat(s.MinLR)
	}
	return out + ")"
}
