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
		name       string
		ready      map[string]any // nil: no Ready condition
		finalizers []any
		kinds      []string
		reported   string
		reconciled bool
	}{
		{name: "Limitador not ready", ready: map[string]any{"status": "False", "reason": "LimitadorNotReady", "message": "limitador resource not in topology"},
			kinds: []string{limitador.Kind}, reported: "LimitadorNotReady", reconciled: true},
		{name: "Authorino not ready", ready: map[string]any{"status": "False", "reason": "AuthorinoNotReady"},
			kinds: []string{authorino.Kind}, reported: "AuthorinoNotReady", reconciled: true},
		{name: "no Ready condition: not known to be reconciled", kinds: []string{limitador.Kind, authorino.Kind}, reported: "no Ready condition"},
		{name: "no Ready condition, with the developer portal finalizer: reconciled", finalizers: []any{"kuadrant.io/developerportal"},
			kinds: []string{limitador.Kind, authorino.Kind}, reported: "no Ready condition", reconciled: true},
		{name: "no Ready condition, another finalizer", finalizers: []any{"example.com/other"},
			kinds: []string{limitador.Kind, authorino.Kind}, reported: "no Ready condition"},
		{name: "missing dependency is no component", ready: map[string]any{"status": "False", "reason": "MissingDependency"}, reported: "MissingDependency", reconciled: true},
		{name: "ready", ready: map[string]any{"status": "True", "reason": "Ready"}, reported: "Ready", reconciled: true},
		{name: "unknown with a component's reason", ready: map[string]any{"status": "Unknown", "reason": "LimitadorNotReady"}, reported: "LimitadorNotReady", reconciled: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kuadrant.io/v1beta1", "kind": "Kuadrant",
				"metadata": map[string]any{"name": "kuadrant", "namespace": "kuadrant-system"}}}
			if tc.finalizers != nil {
				k.Object["metadata"].(map[string]any)["finalizers"] = tc.finalizers
			}
			if tc.ready != nil {
				c := map[string]any{"type": "Ready"}
				for k, v := range tc.ready {
					c[k] = v
				}
				k.Object["status"] = map[string]any{"conditions": []any{c}}
			}
			gvks, reported, reconciled := kuadrantSuspects(k)
			if reconciled != tc.reconciled {
				t.Errorf("reconciled %v, want %v", reconciled, tc.reconciled)
			}
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

// TestKuadrantReadyOrMissing: the first Kuadrant wait ends on Ready=True or
// on reason MissingDependency whatever its message says (the operator's
// wording differs between releases; case B01), and on nothing else.
func TestKuadrantReadyOrMissing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ready map[string]any // nil: no Ready condition
		done  bool
	}{
		{name: "ready", ready: map[string]any{"status": "True", "reason": "Ready"}, done: true},
		{name: "missing dependency, kuadrant-operator v1.5.2 message", ready: map[string]any{"status": "False", "reason": "MissingDependency",
			"message": "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"}, done: true},
		{name: "missing dependency, a message never seen", ready: map[string]any{"status": "False", "reason": "MissingDependency",
			"message": "dependency check failed; consult the documentation"}, done: true},
		{name: "missing dependency, no message", ready: map[string]any{"status": "False", "reason": "MissingDependency"}, done: true},
		{name: "the restart wording under another reason", ready: map[string]any{"status": "False", "reason": "AuthorinoNotReady",
			"message": "please restart Kuadrant Operator pod"}},
		{name: "no Ready condition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kuadrant.io/v1beta1", "kind": "Kuadrant"}}
			if tc.ready != nil {
				c := map[string]any{"type": "Ready"}
				for k, v := range tc.ready {
					c[k] = v
				}
				u.Object["status"] = map[string]any{"conditions": []any{c}}
			}
			r := kuadrantReadyOrMissing(u)
			if r.Done != tc.done {
				t.Errorf("done = %v (status %q), want %v", r.Done, r.Status, tc.done)
			}
			if r.Status == "" {
				t.Errorf("no status reported")
			}
		})
	}
}
