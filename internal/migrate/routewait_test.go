package migrate

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/waiters"
)

// TestRouteWaitTransient: a Failed MaaSSubscription is waited on while its
// only reasons are missing HTTPRoutes, and fails for any other reason.
func TestRouteWaitTransient(t *testing.T) {
	sub := func(msg string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
			"metadata": map[string]any{"name": "s", "namespace": "models-as-a-service"},
			"status": map[string]any{
				"phase":            "Failed",
				"conditions":       []any{map[string]any{"type": "Ready", "status": "False", "reason": "ReconcileFailed"}},
				"modelRefStatuses": []any{map[string]any{"name": "m", "ready": false, "reason": "NotFound", "message": msg}},
			},
		}}
	}
	base := waiters.Readiness(sub(""))
	if r := base(sub("HTTPRoute not found yet for model llm/m")); r.Failed == nil {
		t.Fatalf("the base readiness does not fail a Failed subscription (%+v): the test proves nothing", r)
	}
	cond := routeWaitTransient(base)
	if r := cond(sub("HTTPRoute not found yet for model llm/m")); r.Failed != nil || r.Done {
		t.Errorf("route missing: %+v, want a wait", r)
	}
	if r := cond(sub("MaaSModelRef llm/m not found")); r.Failed == nil {
		t.Errorf("another reason: %+v, want the failure", r)
	}
}
