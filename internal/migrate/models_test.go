package migrate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kserveRoute is the HTTPRoute KServe makes for LLMInferenceService
// ns/name, attached to the given Gateway.
func kserveRoute(ns, name, gwNS, gwName string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": name + "-kserve-route", "namespace": ns, "labels": map[string]any{
			routeNameLabel: name, routeComponentLabel: routeComponent, routePartOfLabel: routePartOf,
		}},
		"spec": map[string]any{"parentRefs": []any{map[string]any{"kind": "Gateway", "name": gwName, "namespace": gwNS}}},
	}}
}

func readyStatus(status string) []any {
	return []any{map[string]any{"type": "Ready", "status": status, "reason": "Reason" + status, "message": "model is " + status}}
}

// TestCheckModels: a governed model passes with a Ready LLMInferenceService
// and KServe's HTTPRoute on the MaaS Gateway; a missing route, a route on
// another Gateway, a Ready=False or missing Ready condition each name the
// model and the cause; models the plan does not govern are not checked.
func TestCheckModels(t *testing.T) {
	healthy := func(t *testing.T, o map[string]*unstructured.Unstructured) {
		for _, n := range []string{"my-model", "premium-model"} {
			set(t, o[n], readyStatus("True"), "status", "conditions")
		}
	}
	tests := []struct {
		name   string
		edit   func(t *testing.T, o map[string]*unstructured.Unstructured)
		routes []*unstructured.Unstructured
		// want are "model: reason substring"; empty means both pass.
		want []string
	}{
		{
			name:   "ready with routes",
			edit:   healthy,
			routes: []*unstructured.Unstructured{kserveRoute("llm", "my-model", "openshift-ingress", "maas-default-gateway"), kserveRoute("llm", "premium-model", "openshift-ingress", "maas-default-gateway")},
		},
		{
			name:   "no route",
			edit:   healthy,
			routes: []*unstructured.Unstructured{kserveRoute("llm", "premium-model", "openshift-ingress", "maas-default-gateway")},
			want:   []string{"llm/my-model: has no HTTPRoute in namespace llm labelled app.kubernetes.io/name=my-model"},
		},
		{
			name:   "route on another gateway",
			edit:   healthy,
			routes: []*unstructured.Unstructured{kserveRoute("llm", "my-model", "openshift-ingress", "maas-default-gateway"), kserveRoute("llm", "premium-model", "other", "gw")},
			want:   []string{"llm/premium-model: its HTTPRoute llm/premium-model-kserve-route does not reference Gateway openshift-ingress/maas-default-gateway"},
		},
		{
			name: "not ready and no ready condition",
			edit: func(t *testing.T, o map[string]*unstructured.Unstructured) {
				set(t, o["my-model"], readyStatus("False"), "status", "conditions")
			},
			routes: []*unstructured.Unstructured{kserveRoute("llm", "my-model", "openshift-ingress", "maas-default-gateway"), kserveRoute("llm", "premium-model", "openshift-ingress", "maas-default-gateway")},
			want: []string{
				"llm/my-model: is not Ready (Ready=False (ReasonFalse): model is False)",
				"llm/premium-model: has no Ready condition",
			},
		},
		{
			name: "route of another model's name",
			edit: healthy,
			routes: []*unstructured.Unstructured{
				kserveRoute("llm", "my-model", "openshift-ingress", "maas-default-gateway"),
				kserveRoute("other", "premium-model", "openshift-ingress", "maas-default-gateway"),
			},
			want: []string{"llm/premium-model: has no HTTPRoute"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := guideState(t, func(o map[string]*unstructured.Unstructured) { tt.edit(t, o) })
			st.ModelRoutes, st.RoutesServed = tt.routes, true
			p := BuildPlan(st, PlanOptions{})
			if err := p.Err(); err != nil {
				t.Fatal(err)
			}
			problems, ok := CheckModels(st, p)
			if len(problems)+len(ok) != 2 {
				t.Errorf("checked %d models (%v, %v), want the 2 governed ones", len(problems)+len(ok), problems, ok)
			}
			var got []string
			for _, pr := range problems {
				got = append(got, pr.Model.String()+": "+pr.Reason)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %q", got, tt.want)
			}
			for i, w := range tt.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("problem %d = %q, want prefix %q", i, got[i], w)
				}
			}
		})
	}

	t.Run("HTTPRoute not served", func(t *testing.T) {
		st := guideState(t, func(o map[string]*unstructured.Unstructured) { healthy(t, o) })
		problems, _ := CheckModels(st, BuildPlan(st, PlanOptions{}))
		if len(problems) != 2 || !strings.Contains(problems[0].Reason, "HTTPRoute kind is not served") {
			t.Errorf("problems %v", problems)
		}
	})

	t.Run("error names every model and the way on", func(t *testing.T) {
		err := &ModelsNotReadyError{BackupDir: "/b", Problems: []ModelProblem{{Reason: "x"}}}
		for _, s := range []string{"nothing was changed", "--backup-dir /b again"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q lacks %q", err, s)
			}
		}
		dry := &ModelsNotReadyError{DryRun: true, Problems: []ModelProblem{{Reason: "x"}}}
		if diff := cmp.Diff(true, strings.HasPrefix(dry.Error(), "dry run: ")); diff != "" {
			t.Error(dry.Error())
		}
	})
}
