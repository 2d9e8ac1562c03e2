package waiters

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestConditions(t *testing.T) {
	tests := []struct {
		name       string
		cond       Condition
		js         string
		done, fail bool
	}{
		{"true current generation", ConditionTrue("Ready"),
			`{"metadata":{"generation":2},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":2}]}}`, true, false},
		{"true for an older generation does not count", ConditionTrue("Ready"),
			`{"metadata":{"generation":3},"status":{"conditions":[{"type":"Ready","status":"True","observedGeneration":2}]}}`, false, false},
		{"false", ConditionTrue("Ready"),
			`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"MissingDependency"}]}}`, false, false},
		{"absent", ConditionTrue("Ready"), `{"status":{}}`, false, false},
		{"phase done", Phase([]string{"Active"}, "Failed"), `{"status":{"phase":"Active"}}`, true, false},
		{"phase failed", Phase([]string{"Active"}, "Failed"), `{"status":{"phase":"Failed","message":"boom"}}`, false, true},
		{"and needs both", And(ConditionTrue("A"), ConditionTrue("B")),
			`{"status":{"conditions":[{"type":"A","status":"True"},{"type":"B","status":"False"}]}}`, false, false},
		{"exists", Exists(), `{"status":{}}`, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON([]byte(`{"apiVersion":"v1","kind":"X",` + tt.js[1:])); err != nil {
				t.Fatal(err)
			}
			r := tt.cond(u)
			if r.Done != tt.done || (r.Failed != nil) != tt.fail {
				t.Errorf("got done=%v failed=%v (%s), want done=%v failed=%v", r.Done, r.Failed, r.Status, tt.done, tt.fail)
			}
		})
	}
}
