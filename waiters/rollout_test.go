package waiters

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
