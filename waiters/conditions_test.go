package waiters

import (
	"strings"
	"testing"
	"unicode/utf8"

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
		{"maas active", MaaSPhase([]string{"Active"}, "Failed"), `{"status":{"phase":"Active"}}`, true, false},
		{"maas degraded is waited on", MaaSPhase([]string{"Active"}, "Failed"),
			`{"status":{"phase":"Degraded","conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"1 of 1 TokenRateLimitPolicies not accepted"}]}}`, false, false},
		{"maas failed", MaaSPhase([]string{"Active"}, "Failed"),
			`{"status":{"phase":"Failed","modelRefStatuses":[{"name":"m","namespace":"ns","ready":false,"reason":"NotFound","message":"HTTPRoute not found yet"}]}}`, false, true},
		{"maas no phase", MaaSPhase([]string{"Active"}, "Failed"), `{"status":{}}`, false, false},
		{"maas done for an older generation is waited on", MaaSPhase([]string{"Active"}, "Failed"),
			`{"metadata":{"generation":3},"status":{"phase":"Active","conditions":[{"type":"Ready","status":"True","reason":"Reconciled","observedGeneration":2}]}}`, false, false},
		{"maas done for this generation", MaaSPhase([]string{"Active"}, "Failed"),
			`{"metadata":{"generation":3},"status":{"phase":"Active","conditions":[{"type":"Ready","status":"True","reason":"Reconciled","observedGeneration":3}]}}`, true, false},
		{"maas failed for an older generation is waited on", MaaSPhase([]string{"Ready"}, "Failed"),
			`{"metadata":{"generation":3},"status":{"phase":"Failed","conditions":[{"type":"Ready","status":"False","reason":"SecretNotFound","observedGeneration":2}]}}`, false, false},
		{"maas failed for this generation", MaaSPhase([]string{"Ready"}, "Failed"),
			`{"metadata":{"generation":3},"status":{"phase":"Failed","conditions":[{"type":"Ready","status":"False","reason":"SecretNotFound","observedGeneration":3}]}}`, false, true},
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

// TestMaaSPhaseStatus: the Status of a MaaS wait names what the phase does
// not: the not-ready entries of the per-model lists and, without a phase,
// that the controller wrote nothing (issue 18).
func TestMaaSPhaseStatus(t *testing.T) {
	for _, tt := range []struct{ js, want string }{
		{`{"status":{"phase":"Degraded","conditions":[{"type":"Ready","status":"True","reason":"Reconciled","message":"1 of 1 TokenRateLimitPolicies not accepted"}],` +
			`"tokenRateLimitStatuses":[{"name":"maas-trlp-m","namespace":"ns","model":"m","ready":false,"reason":"NotAccepted","message":"target is invalid"}]}}`,
			"phase Degraded: Ready=True (Reconciled): 1 of 1 TokenRateLimitPolicies not accepted; TokenRateLimitPolicy ns/maas-trlp-m NotAccepted: target is invalid"},
		{`{"status":{"phase":"Failed","modelRefStatuses":[{"name":"m","namespace":"ns","ready":false,"reason":"NotFound","message":"HTTPRoute not found yet"},{"name":"ok","namespace":"ns","ready":true}]}}`,
			"phase Failed: model ns/m NotFound: HTTPRoute not found yet"},
		{`{"status":{}}`, "no phase yet: the MaaS controller has written no status"},
	} {
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON([]byte(`{"apiVersion":"v1","kind":"X",` + tt.js[1:])); err != nil {
			t.Fatal(err)
		}
		if got := MaaSPhase([]string{"Active"}, "Failed")(u).Status; !strings.Contains(got, tt.want) {
			t.Errorf("status %q, want it to contain %q", got, tt.want)
		}
	}
}

// TestCondStringShortens: a long message is cut on a rune boundary after
// maxMessageRunes runes, with "…"; a short one is whole.
func TestCondStringShortens(t *testing.T) {
	long := strings.Repeat("é", maxMessageRunes+5)
	got := Cond{Type: "Programmed", Status: "False", Message: long}.String()
	want := "Programmed=False: " + strings.Repeat("é", maxMessageRunes) + "…"
	if got != want || !utf8.ValidString(got) {
		t.Errorf("got %d bytes, valid UTF-8 %v; want the first %d runes and …", len(got), utf8.ValidString(got), maxMessageRunes)
	}
	if got := (Cond{Type: "Ready", Status: "True", Reason: "Ok", Message: "fine"}).String(); got != "Ready=True (Ok): fine" {
		t.Errorf("short message: %q", got)
	}
}
