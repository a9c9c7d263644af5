package engine

import (
	"context"
	"fmt"
	"io"
	"time"

	"amspc/codegen"
)

// A Trainer trains a plan bundle on this process's ranks: it checks the
// plan against the data, starts the ranks on their devices, resumes from
// a checkpoint, takes steps up to Steps (reporting each to Progress),
// writes checkpoints, and stops early, at a step boundary every process
// of the run agrees on, when the context given to Train is done. `amspc
// run` fills one from its flags; the messages, the exit statuses and
// what a process of an MPI job does at the end stay the command's.
type Trainer struct {
	// Bundle is the plan. Its train section cuts Tokens into windows
	// (Data) and seeds the initial params.
	Bundle *codegen.Bundle
	Tokens []int32
	// World is the ranks the run spans and which of them this process
	// runs; nil: every rank, in this process.
	World World
	// Devices run the ranks' kernels; nil: the CPU.
	Devices *Devices
	// Steps is the step training ends after, counting those of a resumed
	// checkpoint; with Steps 0, a run trains nothing (and with Save,
	// saves its initial weights).
	Steps int
	// Resume names a checkpoint to continue from, saved under any plan or
	// rank count; "" starts from the initial params.
	Resume string
	// Save names the directory checkpoints go to ("" for none): after
	// the last step, every SaveEvery steps when SaveEvery > 0, and when a
	// stop ends the run early. Overwrite lets the run replace a
	// checkpoint there that PrepareSave would keep; Warn hears what
	// PrepareSave notes (a stale lock taken over), nil: nobody.
	Save      string
	SaveEvery int
	Overwrite bool
	Warn      io.Writer
	// Eval, if set, evaluates held-out data every Eval.Every steps and
	// after the last (Run.Eval); its losses go in the steps' reports.
	Eval *Evaluation
	// Progress hears the run's events; nil: nobody.
	Progress Progress
	// CheckFit, if set, is called after the checks and before anything
	// is allocated, with the number of ranks this process runs: amspc run
	// refuses there a plan that this machine's memory cannot hold. Its
	// error ends the run, returned as it is.
	CheckFit func(localRanks int) error
	// SteadyState, if set, is called before the first step of the
	// steady state: the run's second step when it takes more than one
	// (the first one's page faults and allocations are not the steady
	// state), else its only one. amspc run --cpuprofile starts its
	// profile there. Its error ends the run, returned as it is.
	SteadyState func() error
	// Trace, if set, is the run's Trace (Run.Trace): it records the
	// steps from the first after its Start (amspc run --trace calls it in
	// SteadyState).
	Trace *Trace
	// StandIn, if set, makes the run a stand-in run of one rank
	// (Run.StandIn; World nil, no Save or Resume).
	StandIn *StandIn
}

// Progress hears a training run's events, in order, on the goroutine
// that called Train.
type Progress interface {
	// Resumed: the run goes on from the checkpoint in dir, of step.
	Resumed(dir string, step int)
	// Begin: steps first+1 to last are about to be taken (none when
	// first == last). Its error ends the run before the first step,
	// returned as it is.
	Begin(first, last int) error
	// Step: a step was taken.
	Step(StepReport)
	// Saved: a checkpoint of step went into dir, every SaveEvery steps
	// or after the last one (a stop's checkpoint is the result's).
	Saved(dir string, step int)
}

// A StepReport is one step of a training run, as Progress hears it.
type StepReport struct {
	Step, Last int     // the step taken (from 1) and the run's last
	Loss       float64 // the mean over every token of the global batch
	LR         float64 // the step's learning rate (the train section's schedule)
	// EvalLoss is the held-out loss evaluated after the step (Evaluated).
	EvalLoss  float64
	Evaluated bool
	// GradNorm is the gradient's global norm before clipping, where the
	// plan clips (Clips).
	GradNorm        float64
	Clips           bool
	Seconds         float64 // the step's wall time
	TokensPerSecond float64 // the global batch's tokens over Seconds
	// Elapsed is the wall time since the run's first step began;
	// Remaining extrapolates it to Last at the mean pace so far.
	Elapsed, Remaining float64
}

// Evaluation is what a run evaluates, and when.
type Evaluation struct {
	Tokens  []int32 // held out from training
	Every   int     // evaluate after every Every-th step (0: after the last only)
	Batches int     // global batches each time (0: enough to cover Tokens once)
}

// batches is the global batches an evaluation of d takes.
func (e *Evaluation) batches(d *Data) int {
	if e.Batches > 0 {
		return e.Batches
	}
	return max(1, (d.Windows()+d.Global-1)/d.Global)
}

// A TrainResult is what a training run did.
type TrainResult struct {
	// Run is the run trained, for its measurements (Steps, PeakBytes,
	// Timings).
	Run *Run
	// First is the step training started after: a resumed checkpoint's,
	// else 0. UpToDate says that checkpoint is at Steps or later, so
	// nothing was trained or saved.
	First    int
	UpToDate bool
	// StepSeconds is every step's wall time, in order.
	StepSeconds []float64
	// Stopped says the context ended the run early, at a step boundary
	// (after Save's checkpoint, where Save is set). StopCause is
	// context.Cause of the context where this process's ended, nil where
	// another process's did.
	Stopped   bool
	StopCause error
}

// A TrainStage is the part of a training run that failed.
type TrainStage int

const (
	StageCheck       TrainStage = iota // checking the plan and the data (Run.Check, CheckVocab)
	StageStart                         // starting the ranks: their buffers and initial params
	StageResume                        // loading the checkpoint to resume from
	StagePrepareSave                   // readying Save's directory (PrepareSave)
	StageAgreeStop                     // agreeing with the other processes whether to stop
	StageStep                          // taking a step
	StageSave                          // writing a checkpoint
)

// A TrainError is a training run's failure in one of its stages.
type TrainError struct {
	Stage TrainStage
	// Step is the step being taken (StageAgreeStop, StageStep) or saved
	// (StageSave).
	Step int
	// Agreed says every process of the run returned this same error
	// (the plan, the data or a checkpoint refused alike, agreed over the
	// control stream), so the processes can end together, one reporting
	// it; else this process failed on its own.
	Agreed bool
	Err    error
}

func (e *TrainError) Error() string {
	switch e.Stage {
	case StageResume:
		return "resume: " + e.Err.Error()
	case StagePrepareSave:
		return "save directory: " + e.Err.Error()
	case StageAgreeStop, StageStep:
		return fmt.Sprintf("step %d: %v", e.Step, e.Err)
	case StageSave:
		return "save: " + e.Err.Error()
	}
	return e.Err.Error()
}

func (e *TrainError) Unwrap() error { return e.Err }

// Start makes the trainer's run and starts its ranks, without Train's
// check of the data against the model's vocabulary, its hooks or its
// checkpoints: for a caller that steps runs itself (amspc validate times
// several plans' steps in rotation).
func (t *Trainer) Start() (*Run, error) {
	r := t.newRun()
	if err := r.Start(); err != nil {
		return nil, err
	}
	return r, nil
}

// newRun is the run of the bundle on the data, ranks on the devices; not
// started.
func (t *Trainer) newRun() *Run {
	tr := t.Bundle.Train
	r := &Run{Bundle: t.Bundle, Seed: uint64(tr.Seed), World: t.World, Trace: t.Trace, StandIn: t.StandIn, Horizon: t.Steps,
		Data: &Data{Tokens: t.Tokens, SeqLen: int(tr.SeqLen), MicroBatch: int(tr.MicroBatch), Global: int(tr.GlobalBatch)}}
	if t.Devices != nil {
		r.NewBackend = t.Devices.Backend
	}
	return r
}

// Train runs the training: the checks, the ranks' start, the resume,
// the steps and the checkpoints. When ctx is done, it stops at the next
// step boundary (after one step at least) that every process agrees on.
// On an error, the result is nil; a *TrainError says which stage failed,
// any other error is a hook's or Progress.Begin's.
func (t *Trainer) Train(ctx context.Context) (*TrainResult, error) {
	r := t.newRun()
	if err := r.Check(); err != nil {
		return nil, &TrainError{Stage: StageCheck, Agreed: true, Err: err}
	}
	if err := CheckVocab(t.Bundle, t.Tokens); err != nil {
		return nil, &TrainError{Stage: StageCheck, Agreed: true, Err: err}
	}
	if e := t.Eval; e != nil {
		err := CheckVocab(t.Bundle, e.Tokens)
		if d := (Data{Tokens: e.Tokens, SeqLen: int(t.Bundle.Train.SeqLen)}); err == nil && d.Windows() < 1 {
			err = fmt.Errorf("the evaluation data has %d tokens, fewer than one window of %d", len(e.Tokens), d.SeqLen+1)
		}
		if err != nil {
			return nil, &TrainError{Stage: StageCheck, Agreed: true, Err: fmt.Errorf("evaluation data: %w", err)}
		}
	}
	if t.CheckFit != nil {
		if err := t.CheckFit(t.localRanks()); err != nil {
			return nil, err
		}
	}
	if err := r.Start(); err != nil {
		return nil, &TrainError{Stage: StageStart, Err: err}
	}
	res := &TrainResult{Run: r}
	if t.Resume != "" {
		if err := r.Resume(t.Resume); err != nil {
			return nil, &TrainError{Stage: StageResume, Agreed: true, Err: err}
		}
		res.First = r.Steps()
		t.progress().Resumed(t.Resume, res.First)
		if res.First >= t.Steps && t.Steps > 0 {
			res.UpToDate = true
			return res, nil
		}
	}
	if t.Save != "" {
		// Before the first step: the directory is this job's, locked
		// until the run ends, however it ends.
		warn := t.Warn
		if warn == nil {
			warn = io.Discard
		}
		release, err := r.PrepareSave(t.Save, t.Resume, t.Overwrite, warn)
		if err != nil {
			return nil, &TrainError{Stage: StagePrepareSave, Agreed: true, Err: err}
		}
		defer release()
	}
	if err := t.progress().Begin(res.First, t.Steps); err != nil {
		return nil, err
	}
	if err := t.steps(ctx, res); err != nil {
		return nil, err
	}
	return res, nil
}

// localRanks is the number of ranks this process runs.
func (t *Trainer) localRanks() int {
	if t.StandIn != nil {
		return 1
	}
	if t.World == nil {
		return t.Bundle.Topo.Ranks()
	}
	return len(t.World.Local())
}

// steps takes the steps after res.First up to t.Steps, then saves.
func (t *Trainer) steps(ctx context.Context, res *TrainResult) error {
	r, p := res.Run, t.progress()
	first, last := res.First, t.Steps
	steady := first
	if last-first > 1 {
		steady = first + 1
	}
	tokens := float64(t.Bundle.Train.GlobalBatch * t.Bundle.Train.SeqLen)
	start := time.Now()
	for i := first; i < last; i++ {
		if i > first {
			stop, cause, err := agreeStop(ctx, r)
			if err != nil {
				return &TrainError{Stage: StageAgreeStop, Step: i + 1, Err: err}
			}
			if stop {
				res.Stopped, res.StopCause = true, cause
				return t.save(r, nil)
			}
		}
		if t.SteadyState != nil && i == steady {
			if err := t.SteadyState(); err != nil {
				return err
			}
		}
		t0 := time.Now()
		loss, err := r.Step()
		if err != nil {
			return &TrainError{Stage: StageStep, Step: i + 1, Err: err}
		}
		dt := time.Since(t0).Seconds()
		res.StepSeconds = append(res.StepSeconds, dt)
		elapsed := time.Since(start).Seconds()
		norm, clips := r.GradNorm()
		rep := StepReport{Step: i + 1, Last: last, Loss: loss, LR: r.LR(i + 1), GradNorm: norm, Clips: clips, Seconds: dt, TokensPerSecond: tokens / dt,
			Elapsed: elapsed, Remaining: elapsed / float64(i+1-first) * float64(last-i-1)}
		if e := t.Eval; e != nil && (e.Every > 0 && (i+1)%e.Every == 0 || i+1 == last) {
			d := *r.Data
			d.Tokens = e.Tokens
			l, err := r.Eval(&d, e.batches(&d))
			if err != nil {
				return &TrainError{Stage: StageStep, Step: i + 1, Err: fmt.Errorf("evaluating: %w", err)}
			}
			rep.EvalLoss, rep.Evaluated = l, true
		}
		p.Step(rep)
		if t.SaveEvery > 0 && (i+1)%t.SaveEvery == 0 && i+1 < last {
			if err := t.save(r, p); err != nil {
				return err
			}
		}
	}
	return t.save(r, p)
}

// agreeStop says whether the run stops before its next step: whether
// any process's context is done, agreed by every process. cause is this
// process's context's cause, nil where it is not done; read before the
// agreement, once, so that the stop this process asks for and the cause
// it reports are the same event.
func agreeStop(ctx context.Context, r *Run) (stop bool, cause error, err error) {
	if ctx.Err() != nil {
		cause = context.Cause(ctx)
	}
	stop, err = r.AgreeStop(cause != nil)
	return stop, cause, err
}

// save writes a checkpoint into t.Save, where set, and tells p (nil for
// a stop's checkpoint, which the result reports).
func (t *Trainer) save(r *Run, p Progress) error {
	if t.Save == "" {
		return nil
	}
	if err := r.Save(t.Save); err != nil {
		return &TrainError{Stage: StageSave, Step: r.Steps(), Agreed: true, Err: err}
	}
	if p != nil {
		p.Saved(t.Save, r.Steps())
	}
	return nil
}

func (t *Trainer) progress() Progress {
	if t.Progress == nil {
		return noProgress{}
	}
	return t.Progress
}

// noProgress hears nothing.
type noProgress struct{}

func (noProgress) Resumed(string, int)  {}
func (noProgress) Begin(int, int) error { return nil }
func (noProgress) Step(StepReport)      {}
func (noProgress) Saved(string, int)    {}
