package migrate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestEnforcedUnlessOverriddenBy: a generated policy passes the wait before
// the deletes when it is Enforced, or Overridden only by policies the plan
// deletes; any other overrider, reason, stale generation or message shape
// keeps the wait open.
func TestEnforcedUnlessOverriddenBy(t *testing.T) {
	policy := func(status, reason, msg string, observed int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kuadrant.io/v1", "kind": "AuthPolicy",
			"metadata": map[string]any{"name": "maas-gateway-auth", "namespace": "openshift-ingress", "generation": int64(2)},
			"status": map[string]any{"conditions": []any{map[string]any{
				"type": "Enforced", "status": status, "reason": reason, "message": msg, "observedGeneration": observed,
			}}},
		}}
	}
	p := &Plan{Delete: []ObjectRef{
		{APIVersion: "kuadrant.io/v1", Kind: "AuthPolicy", Namespace: "openshift-ingress", Name: "gateway-auth-policy"},
		{APIVersion: "kuadrant.io/v1alpha1", Kind: "TokenRateLimitPolicy", Namespace: "openshift-ingress", Name: "gateway-tier-rate-limits"},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "redhat-ods-applications", Name: "tier-to-group-mapping"},
	}}
	deleting := deletedPolicies(p)
	if diff := cmp.Diff(map[string]bool{
		"AuthPolicy openshift-ingress/gateway-auth-policy":                true,
		"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits": true,
	}, deleting); diff != "" {
		t.Errorf("deletedPolicies (-want +got):\n%s", diff)
	}
	cond := enforcedUnlessOverriddenBy(deleting)
	for _, tc := range []struct {
		name string
		obj  *unstructured.Unstructured
		done bool
	}{
		{"enforced", policy("True", "Enforced", "AuthPolicy has been successfully enforced", 2), true},
		{"overridden by the old policy", policy("False", "Overridden", "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]", 2), true},
		{"overridden by the old one and another", policy("False", "Overridden", "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy llm/keep-me]", 2), false},
		{"overridden by a policy not deleted", policy("False", "Overridden", "AuthPolicy is overridden by [llm/keep-me]", 2), false},
		{"a name of another kind in the plan", policy("False", "Overridden", "AuthPolicy is overridden by [openshift-ingress/gateway-tier-rate-limits]", 2), false},
		{"for an older generation", policy("False", "Overridden", "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]", 1), false},
		{"another reason", policy("False", "Unknown", "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]", 2), false},
		{"another message shape", policy("False", "Overridden", "AuthPolicy is overridden", 2), false},
		{"an empty list", policy("False", "Overridden", "AuthPolicy is overridden by []", 2), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cond(tc.obj)
			if r.Done != tc.done || r.Failed != nil {
				t.Fatalf("got %+v, want done=%v", r, tc.done)
			}
			if r.Done && tc.name != "enforced" && !strings.HasPrefix(r.Status, overriddenByOld) {
				t.Errorf("status %q does not say why it passed", r.Status)
			}
		})
	}
}
