package steps

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestKuadrantSuspects: which component CRs waitKuadrant looks for when the
// Kuadrant CR has not become Ready, by its Ready condition.
func TestKuadrantSuspects(t *testing.T) {
	limitador, authorino := kuadrantComponents["LimitadorNotReady"], kuadrantComponents["AuthorinoNotReady"]
	for _, tc := range []struct {
		name     string
		ready    map[string]any // nil: no Ready condition
		kinds    []string
		reported string
	}{
		{name: "Limitador not ready", ready: map[string]any{"status": "False", "reason": "LimitadorNotReady", "message": "limitador resource not in topology"},
			kinds: []string{limitador.Kind}, reported: "LimitadorNotReady"},
		{name: "Authorino not ready", ready: map[string]any{"status": "False", "reason": "AuthorinoNotReady"},
			kinds: []string{authorino.Kind}, reported: "AuthorinoNotReady"},
		{name: "no Ready condition: the failed reconcile wrote no status", kinds: []string{limitador.Kind, authorino.Kind}, reported: "no Ready condition"},
		{name: "missing dependency is no component", ready: map[string]any{"status": "False", "reason": "MissingDependency"}, reported: "MissingDependency"},
		{name: "ready", ready: map[string]any{"status": "True", "reason": "Ready"}, reported: "Ready"},
		{name: "unknown with a component's reason", ready: map[string]any{"status": "Unknown", "reason": "LimitadorNotReady"}, reported: "LimitadorNotReady"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kuadrant.io/v1beta1", "kind": "Kuadrant",
				"metadata": map[string]any{"name": "kuadrant", "namespace": "kuadrant-system"}}}
			if tc.ready != nil {
				c := map[string]any{"type": "Ready"}
				for k, v := range tc.ready {
					c[k] = v
				}
				k.Object["status"] = map[string]any{"conditions": []any{c}}
			}
			gvks, reported := kuadrantSuspects(k)
			var kinds []string
			for _, g := range gvks {
				kinds = append(kinds, g.Kind)
			}
			if diff := cmp.Diff(tc.kinds, kinds); diff != "" {
				t.Errorf("suspects (-want +got):\n%s", diff)
			}
			if !strings.Contains(reported, tc.reported) {
				t.Errorf("reported %q, want it to name %q", reported, tc.reported)
			}
		})
	}
}
