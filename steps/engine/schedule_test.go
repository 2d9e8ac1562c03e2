package engine

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/maasctl/maasctl/steps/event"
)

// TestScheduleForwardAndBackward: the same DAG runs forward (a after
// nothing, b and c after a, d after b and c) and backward (each node after
// its dependents); a failure blocks exactly the dependents, or, with
// StopOnFailure, everything not started.
func TestScheduleForwardAndBackward(t *testing.T) {
	after := map[string][]string{"b": {"a"}, "c": {"a"}, "d": {"b", "c"}}
	before := map[string][]string{"a": {"b", "c"}, "b": {"d"}, "c": {"d"}}
	run := func(sc *Schedule, fail string) ([]string, []string) {
		var mu sync.Mutex
		var ran, blocked []string
		sc.Run = func(id string, release func()) (event.Type, error) {
			mu.Lock()
			ran = append(ran, id)
			mu.Unlock()
			if id == fail {
				return event.Failed, errors.New("boom")
			}
			release()
			return event.Done, nil
		}
		sc.Blocked = func(id, _ string) { blocked = append(blocked, id) }
		res := sc.Execute()
		for _, id := range blocked {
			if res[id].State != NodeBlocked {
				t.Errorf("%s blocked but its state is %v", id, res[id].State)
			}
		}
		return ran, blocked
	}
	pos := func(order []string, id string) int { return slices.Index(order, id) }

	ran, _ := run(&Schedule{IDs: []string{"a", "b", "c", "d"}, Deps: after, Serial: true}, "")
	if !slices.Equal(ran, []string{"a", "b", "c", "d"}) {
		t.Errorf("forward serial order %v", ran)
	}
	ran, _ = run(&Schedule{IDs: []string{"d", "c", "b", "a"}, Deps: before, Serial: true}, "")
	if !slices.Equal(ran, []string{"d", "c", "b", "a"}) {
		t.Errorf("backward serial order %v", ran)
	}
	ran, _ = run(&Schedule{IDs: []string{"a", "b", "c", "d"}, Deps: after}, "")
	if len(ran) != 4 || pos(ran, "a") != 0 || pos(ran, "d") != 3 {
		t.Errorf("forward parallel order %v", ran)
	}
	ran, blocked := run(&Schedule{IDs: []string{"a", "b", "c", "d"}, Deps: after}, "b")
	if slices.Contains(ran, "d") || !slices.Equal(blocked, []string{"d"}) || !slices.Contains(ran, "c") {
		t.Errorf("b failed: ran %v, blocked %v; want c run and d blocked", ran, blocked)
	}
	ran, blocked = run(&Schedule{IDs: []string{"d", "c", "b", "a"}, Deps: before, Serial: true, StopOnFailure: true}, "d")
	if !slices.Equal(ran, []string{"d"}) || len(blocked) != 3 {
		t.Errorf("stop on failure: ran %v, blocked %v", ran, blocked)
	}
	sum, rerr := Summarize([]string{"d", "c", "b", "a"}, map[string]NodeResult{
		"d": {State: NodeFailed, Event: event.Failed, Err: errors.New("x")}, "c": {State: NodeBlocked, Event: event.Blocked},
		"b": {State: NodeDone, Event: event.Unchanged}, "a": {State: NodeDone, Event: event.Done},
	})
	if rerr == nil || len(rerr.Failed) != 1 || !slices.Equal(sum.Blocked, []string{"c"}) || !slices.Equal(sum.Unchanged, []string{"b"}) || !slices.Equal(sum.Done, []string{"a"}) {
		t.Errorf("Summarize = %+v, %v", sum, rerr)
	}
}

// TestScheduleHalted: once Halted gives a cause (Ctrl-C during a), no node
// starts any more: b and c, free once a is released, are blocked with that
// cause and never run; a still finishes.
func TestScheduleHalted(t *testing.T) {
	var mu sync.Mutex
	var ran []string
	stop := ""
	blocked := map[string]string{}
	sc := &Schedule{IDs: []string{"a", "b", "c"}, Deps: map[string][]string{"b": {"a"}, "c": {"a"}},
		Halted: func() string { mu.Lock(); defer mu.Unlock(); return stop },
		Run: func(id string, release func()) (event.Type, error) {
			mu.Lock()
			ran = append(ran, id)
			if id == "a" {
				stop = "the run was interrupted"
			}
			mu.Unlock()
			release()
			return event.Done, nil
		},
		Blocked: func(id, cause string) { blocked[id] = cause },
	}
	res := sc.Execute()
	if !slices.Equal(ran, []string{"a"}) {
		t.Errorf("ran %v, want only a", ran)
	}
	for _, id := range []string{"b", "c"} {
		if res[id].State != NodeBlocked || blocked[id] != "the run was interrupted" {
			t.Errorf("%s: state %v, blocked by %q; want blocked by the halt", id, res[id].State, blocked[id])
		}
	}
	if res["a"].State != NodeDone {
		t.Errorf("a: state %v, want done", res["a"].State)
	}
}
