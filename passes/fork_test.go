package passes

import (
	"reflect"
	"testing"
	"unsafe"

	"amspc/internal/testjob"
	"amspc/ir"
)

// TestForkKeepsTheGraphPasses: a fork has every field of the graph
// passes' state, and none of a distribution's; a field added to State
// must be sorted into one kind or the other here.
func TestForkKeepsTheGraphPasses(t *testing.T) {
	dist := map[string]bool{"Dist": true, "Prog": true, "Unscheduled": true, "Timeline": true, "Bundle": true,
		"dist": true, "machine": true, "fits": true}
	graph := map[string]bool{"Job": true, "Graph": true, "LossScale": true, "Grads": true, "States": true, "Origin": true,
		"Specs": true, "Partition": true, "Fused": true, "Recompute": true}
	s := runTiny(t)
	f := s.Fork()
	sv, fv := reflect.ValueOf(s).Elem(), reflect.ValueOf(f).Elem()
	for i := 0; i < sv.NumField(); i++ {
		name := sv.Type().Field(i).Name
		switch {
		case graph[name]:
			if sv.Field(i).IsZero() && name != "Fused" && name != "Recompute" {
				t.Errorf("%s is empty after the graph passes: the check below proves nothing", name)
			}
			if !reflect.DeepEqual(reflectField(sv, i), reflectField(fv, i)) {
				t.Errorf("the fork's %s differs", name)
			}
		case dist[name]:
			if !fv.Field(i).IsZero() {
				t.Errorf("the fork has the distribution's %s", name)
			}
		default:
			t.Errorf("State.%s is neither a graph pass's nor a distribution's: sort it here and in Fork", name)
		}
	}
}

// runTiny is tiny's graph passes under tensor parallelism with selective
// recompute, so that every graph field of the state is filled.
func runTiny(t *testing.T) *State {
	t.Helper()
	job := testjob.Load(t, "tiny", "shard { tensor = 2, sequence = true, params = 2x2, grads = 2x2, optim = 2x2 }")
	s, err := Run(job, Options{Recompute: ir.RecomputeSelective})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// reflectField is field i of struct value v, unexported ones included.
func reflectField(v reflect.Value, i int) any {
	f := v.Field(i)
	return reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem().Interface()
}
