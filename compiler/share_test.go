package compiler

import (
	"reflect"
	"testing"

	"amspc/cost"
	"amspc/internal/testjob"
	"amspc/planner"
)

// TestPredictSharesGraphPasses: the Evaluator runs each setting's graph
// passes once and distributes every plan of it on a fork of that state,
// two plans at a time; each prediction is the one a compile of its own
// gives (a distribution pass that wrote to the shared state would show
// here, and under -race).
func TestPredictSharesGraphPasses(t *testing.T) {
	for _, name := range []string{"tiny", "tied"} {
		job := testjob.Load(t, name)
		m, err := cost.NewModel(job, cost.DefaultConfig)
		if err != nil {
			t.Fatal(err)
		}
		all := append(planner.Candidates(m.DP, job.Train.Recompute, job.Train.MicroBatch),
			planner.TensorCandidates(m.DP, job.Train.Recompute, job.Train.MicroBatch)...)
		var plans []cost.Plan
		for i := 0; i < len(all); i += 4 {
			plans = append(plans, all[i])
		}
		ev := NewEvaluator(job, m)
		prs, errs := ev.Predict(plans)
		for i, p := range plans {
			r, err := compile(job, p, Options{Config: m.Config})
			if (err != nil) != (errs[i] != nil) {
				t.Fatalf("%s %s: compile says %v, the evaluator %v", name, p.Name, err, errs[i])
			}
			if err != nil {
				continue
			}
			if want := prediction(r); !reflect.DeepEqual(prs[i], want) {
				t.Errorf("%s %s: the evaluator predicts %+v, its own compile %+v", name, p.Name, *prs[i], *want)
			}
		}
		if len(plans) < 20 {
			t.Errorf("%s: only %d plans", name, len(plans))
		}
	}
}
