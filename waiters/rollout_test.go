package waiters

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/steps/event"
)

func TestDeploymentRolledOut(t *testing.T) {
	dep := func(gen, obs, replicas, updated, total, avail int64) *unstructured.Unstructured {
		d := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "maas-api", "generation": gen},
			"spec":     map[string]any{"replicas": replicas},
			"status": map[string]any{"observedGeneration": obs, "updatedReplicas": updated,
				"replicas": total, "availableReplicas": avail},
		}}
		return d
	}
	for _, c := range []struct {
		name string
		d    *unstructured.Unstructured
		done bool
	}{
		{"not observed", dep(3, 2, 1, 1, 1, 1), false},
		{"not updated", dep(3, 3, 1, 0, 1, 1), false},
		{"old pod left", dep(3, 3, 1, 1, 2, 1), false},
		{"not available", dep(3, 3, 1, 1, 1, 0), false},
		{"rolled out", dep(3, 3, 1, 1, 1, 1), true},
		{"two replicas", dep(2, 2, 2, 2, 2, 2), true},
	} {
		if r := DeploymentRolledOut(c.d); r.Done != c.done {
			t.Errorf("%s: done %v (%s), want %v", c.name, r.Done, r.Status, c.done)
		}
	}
}

// TestDeploymentRolledOutPaused: a paused Deployment never rolls out a new
// template (the Deployment controller creates no new ReplicaSet while
// spec.paused is true), so waiting for it can only time out. The wait
// fails at once naming the Deployment, the field and the fix (case B19:
// the RHCL operator's Deployment holds the Subscription's env in its
// template but no pod runs it; also maas-api's restart). Paused after its
// rollout, it is done.
func TestDeploymentRolledOutPaused(t *testing.T) {
	dep := func(updated, total int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "kuadrant-operator-controller-manager", "namespace": "openshift-operators", "generation": int64(7)},
			"spec":     map[string]any{"replicas": int64(1), "paused": true},
			"status": map[string]any{"observedGeneration": int64(7), "updatedReplicas": updated,
				"replicas": total, "availableReplicas": total - updated},
		}}
	}
	for _, d := range []*unstructured.Unstructured{dep(0, 1), dep(1, 2)} {
		r := DeploymentRolledOut(d)
		if r.Done || r.Failed == nil {
			t.Fatalf("paused, not rolled out: done %v, failed %v (%s); want a failure at once", r.Done, r.Failed, r.Status)
		}
		var p *event.Problem
		if !errors.As(r.Failed, &p) || !strings.HasPrefix(p.Fix, "resume it: oc rollout resume") || strings.Contains(p.Message, "oc rollout") {
			t.Errorf("failure %q: want a Problem with the resume command as its fix, apart from its message", r.Failed)
		}
		for _, want := range []string{"Deployment openshift-operators/kuadrant-operator-controller-manager", "spec.paused", "oc rollout resume deployment/kuadrant-operator-controller-manager -n openshift-operators"} {
			if !strings.Contains(r.Failed.Error(), want) {
				t.Errorf("failure %q lacks %q", r.Failed, want)
			}
		}
	}
	done := dep(1, 1)
	_ = unstructured.SetNestedField(done.Object, int64(1), "status", "availableReplicas")
	if r := DeploymentRolledOut(done); !r.Done || r.Failed != nil {
		t.Errorf("paused after its rollout: done %v, failed %v, want done", r.Done, r.Failed)
	}
}
