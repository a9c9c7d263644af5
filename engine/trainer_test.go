package engine_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"amspc/codegen"
	"amspc/cost"
	"amspc/engine"
)

// recorder is a Progress that keeps what it hears.
type recorder struct {
	events []string
	losses []float64
}

func (r *recorder) Resumed(_ string, step int) {
	r.events = append(r.events, fmt.Sprintf("resumed %d", step))
}
func (r *recorder) Begin(first, last int) error {
	r.events = append(r.events, fmt.Sprintf("begin %d %d", first, last))
	return nil
}
func (r *recorder) Step(s engine.StepReport) {
	r.events = append(r.events, fmt.Sprintf("step %d/%d", s.Step, s.Last))
	r.losses = append(r.losses, s.Loss)
}
func (r *recorder) Saved(_ string, step int) {
	r.events = append(r.events, fmt.Sprintf("saved %d", step))
}

func trainerBundle(t *testing.T) *codegen.Bundle {
	dp := F(2, 1)
	return compile(t, 1, 2, cost.Factors{P: dp, G: dp, OS: dp})
}

// TestTrainerTrainsSavesResumes: a Trainer takes its steps with the
// losses of a Run of the bundle's seed, saves every SaveEvery steps and
// at the end, reports each event in order, and a resumed one goes on
// bitwise as the uninterrupted run, or does nothing when the checkpoint
// is at its last step already.
func TestTrainerTrainsSavesResumes(t *testing.T) {
	b := trainerBundle(t)
	ref := &engine.Run{Bundle: b, Seed: uint64(b.Train.Seed), Data: &engine.Data{Tokens: corpus(t),
		SeqLen: int(b.Train.SeqLen), MicroBatch: int(b.Train.MicroBatch), Global: int(b.Train.GlobalBatch)}}
	if err := ref.Start(); err != nil {
		t.Fatal(err)
	}
	want := steps(t, ref, 6)

	dir := filepath.Join(t.TempDir(), "ckpt")
	rec := &recorder{}
	res, err := (&engine.Trainer{Bundle: b, Tokens: corpus(t), Steps: 4, Save: dir, SaveEvery: 3, Progress: rec}).Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{"begin 0 4", "step 1/4", "step 2/4", "step 3/4", "saved 3", "step 4/4", "saved 4"}; !slices.Equal(rec.events, got) {
		t.Errorf("events %q, want %q", rec.events, got)
	}
	if !slices.Equal(rec.losses, want[:4]) || len(res.StepSeconds) != 4 || res.First != 0 || res.Stopped || res.Run.Steps() != 4 {
		t.Errorf("losses %v, want %v; result %+v", rec.losses, want[:4], res)
	}

	rec = &recorder{}
	res, err = (&engine.Trainer{Bundle: b, Tokens: corpus(t), Steps: 4, Resume: dir, Save: dir, Progress: rec}).Train(context.Background())
	if err != nil || !res.UpToDate || !slices.Equal(rec.events, []string{"resumed 4"}) {
		t.Errorf("resume at the last step: %v, %+v, events %q", err, res, rec.events)
	}

	rec = &recorder{}
	res, err = (&engine.Trainer{Bundle: b, Tokens: corpus(t), Steps: 6, Resume: dir, Save: dir, Progress: rec}).Train(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{"resumed 4", "begin 4 6", "step 5/6", "step 6/6", "saved 6"}; !slices.Equal(rec.events, got) {
		t.Errorf("events %q, want %q", rec.events, got)
	}
	if !slices.Equal(rec.losses, want[4:]) || res.First != 4 {
		t.Errorf("resumed losses %v, want %v", rec.losses, want[4:])
	}
}

// TestTrainerStops: a context done before training stops the run after
// its first step, with the context's cause, after a checkpoint of that
// step (which Progress does not hear of: the result reports it).
func TestTrainerStops(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("asked to stop")
	cancel(why)
	dir := filepath.Join(t.TempDir(), "ckpt")
	rec := &recorder{}
	res, err := (&engine.Trainer{Bundle: trainerBundle(t), Tokens: corpus(t), Steps: 5, Save: dir, Progress: rec}).Train(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stopped || res.StopCause != why || res.Run.Steps() != 1 || !slices.Equal(rec.events, []string{"begin 0 5", "step 1/5"}) {
		t.Errorf("result %+v, events %q", res, rec.events)
	}
	if m := manifest(t, dir); m.Step != 1 {
		t.Errorf("checkpoint of step %d, want 1", m.Step)
	}
}

// TestTrainerErrors: each failure names its stage and whether every
// process would meet it alike; a hook's error comes back as it is.
func TestTrainerErrors(t *testing.T) {
	b := trainerBundle(t)
	fit := errors.New("does not fit")
	for _, c := range []struct {
		name   string
		t      engine.Trainer
		stage  engine.TrainStage
		agreed bool
		hook   error
	}{
		{"token beyond the vocab", engine.Trainer{Tokens: append(corpus(t), 100000)}, engine.StageCheck, true, nil},
		{"no checkpoint", engine.Trainer{Tokens: corpus(t), Steps: 1, Resume: filepath.Join(t.TempDir(), "none")}, engine.StageResume, true, nil},
		{"check fit", engine.Trainer{Tokens: corpus(t), CheckFit: func(local int) error {
			if local != 2 {
				return fmt.Errorf("CheckFit told of %d local ranks, want 2", local)
			}
			return fit
		}}, 0, false, fit},
	} {
		c.t.Bundle = b
		_, err := c.t.Train(context.Background())
		var te *engine.TrainError
		switch {
		case c.hook != nil:
			if err != c.hook {
				t.Errorf("%s: %v, want the hook's error as it is", c.name, err)
			}
		case !errors.As(err, &te) || te.Stage != c.stage || te.Agreed != c.agreed:
			t.Errorf("%s: %#v, want stage %d, agreed %v", c.name, err, c.stage, c.agreed)
		}
	}
}
