package verify

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

var admin = Identity{User: "admin", Groups: []string{"system:masters", "system:authenticated"}}

// healthyReader returns the healthy deployment of testdata/healthy.yaml.
func healthyReader(t *testing.T) *StaticReader {
	t.Helper()
	b, err := os.ReadFile("testdata/healthy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := ParseObjects(b)
	if err != nil {
		t.Fatal(err)
	}
	return NewStaticReader(admin, objs...)
}

func edit(t *testing.T, r *StaticReader, gvk schema.GroupVersionKind, ns, name string, f func(o *unstructured.Unstructured)) {
	t.Helper()
	o, err := r.Get(context.Background(), gvk, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	f(o)
	r.Put(o)
}

func setConditions(conds ...map[string]any) func(o *unstructured.Unstructured) {
	return func(o *unstructured.Unstructured) {
		l := make([]any, len(conds))
		for i, c := range conds {
			l[i] = c
		}
		_ = unstructured.SetNestedSlice(o.Object, l, "status", "conditions")
	}
}

func setPhase(p string) func(o *unstructured.Unstructured) {
	return func(o *unstructured.Unstructured) { _ = unstructured.SetNestedField(o.Object, p, "status", "phase") }
}

func TestLiveChecks(t *testing.T) {
	const mns, ins = "llm-coding-assistant", "models-as-a-service"
	tests := []struct {
		name      string
		breakf    func(t *testing.T, r *StaticReader)
		wantCode  string // the one code that must fail; "" = all pass
		wantCause string
		wantFix   string
		// wantDetail, when set, must be in the failed check's detail.
		wantDetail string
		// wantPending: the failure is one a settle waits out (Check.Pending).
		wantPending bool
		// notFix, when set, must not be in the failed check's fix.
		notFix string
	}{
		{name: "healthy"},
		{name: "DSC not ready: maas-db-config missing", wantCode: CodeDSCReady, wantCause: "maas-db-config", wantFix: "maasctl install",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, DSCGVK, "", "default-dsc", func(o *unstructured.Unstructured) {
					setPhase("Not Ready")(o)
					setConditions(map[string]any{"type": "Ready", "status": "False", "reason": "NotReady", "message": "Some components are not ready: modelsAsService"},
						map[string]any{"type": "ModelsAsAServiceReady", "status": "False", "reason": "PrerequisitesMissing",
							"message": "blocking prerequisites missing: database Secret 'maas-db-config' not found in namespace 'redhat-ai-gateway-infra'"})(o)
				})
			}},
		{name: "DSC Ready with only the 3.4 MaaS condition name (B04)", wantCode: CodeDSCReady, wantCause: "ModelsAsAServiceReady", wantFix: "rhoai-version",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, DSCGVK, "", "default-dsc", setConditions(map[string]any{"type": "Ready", "status": "True", "reason": "Ready"},
					map[string]any{"type": "AIGatewayReady", "status": "True", "reason": "Ready"},
					map[string]any{"type": "ModelsAsServiceReady", "status": "True", "reason": "Ready"}))
			}},
		{name: "Kuadrant MissingDependency", wantCode: CodeKuadrantReady, wantCause: "started before Istio",
			wantFix: "oc delete pod -n openshift-operators -l app=kuadrant,control-plane=controller-manager",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, KuadrantGVK, "kuadrant-system", "kuadrant", setConditions(map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency", "message": "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod"}))
			}},
		{name: "RHCL env wiped by a merge patch (B19)", wantCode: CodeOperatorEnv, wantCause: "ISTIO_GATEWAY_CONTROLLER_NAMES: Kuadrant does not recognise the OpenShift gateway",
			wantFix: "maasctl install",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, SubscriptionGVK, "openshift-operators", "rhcl-operator", func(o *unstructured.Unstructured) {
					_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "AUTH_SERVICE_TIMEOUT", "value": "2s"}}, "spec", "config", "env")
				})
			}},
		{name: "RHCL rate limits fail open (N05)", wantCode: CodeOperatorEnv, wantCause: "RATELIMIT_CHECK_SERVICE_FAILURE_MODE: token quotas pass unchecked",
			wantFix: "maasctl install",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, SubscriptionGVK, "openshift-operators", "rhcl-operator", func(o *unstructured.Unstructured) {
					env, _, _ := unstructured.NestedSlice(o.Object, "spec", "config", "env")
					for _, e := range env {
						if m := e.(map[string]any); m["name"] == "RATELIMIT_CHECK_SERVICE_FAILURE_MODE" {
							m["value"] = "allow"
						}
					}
					_ = unstructured.SetNestedSlice(o.Object, env, "spec", "config", "env")
				})
			}},
		{name: "RHCL operator pod predates the env (B19)", wantCode: CodeOperatorEnv, wantCause: "predates",
			wantFix: "oc delete pod -n openshift-operators -l app=kuadrant,control-plane=controller-manager",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, PodGVK, "openshift-operators", "kuadrant-operator-controller-manager-abc", func(o *unstructured.Unstructured) {
					_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "manager", "image": "registry.invalid/kuadrant-operator:1.4.1"}}, "spec", "containers")
				})
			}},
		{name: "Gateway listener certificate missing", wantCode: CodeGatewayProgrammed, wantCause: "certificate", wantFix: "oc describe certificate maas-default-gateway-cert",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, GatewayGVK, "openshift-ingress", "maas-default-gateway", func(o *unstructured.Unstructured) {
					setConditions(map[string]any{"type": "Programmed", "status": "False", "reason": "Invalid", "message": "Invalid listeners: https"})(o)
					_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "https", "conditions": []any{
						map[string]any{"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef", "message": "secret not found"}}}}, "status", "listeners")
				})
			}},
		{name: "maas-api missing", wantCode: CodeMaaSAPIAvailable, wantFix: "maasctl doctor",
			breakf: func(t *testing.T, r *StaticReader) { r.Remove(DeploymentGVK, "redhat-ai-gateway-infra", "maas-api") }},
		{name: "maas-api 0/1", wantCode: CodeMaaSAPIAvailable, wantCause: "crash-loops",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, DeploymentGVK, "redhat-ai-gateway-infra", "maas-api", func(o *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(o.Object, int64(0), "status", "readyReplicas")
				})
			}},
		// kubectl scale deploy maas-api --replicas=0: the Deployment is
		// still Available (0 of 0) and nothing crash-loops.
		{name: "maas-api scaled to 0", wantCode: CodeMaaSAPIAvailable, wantDetail: "scaled to 0 replicas",
			wantCause: "scaled to 0 replicas", wantFix: "oc scale deployment maas-api -n redhat-ai-gateway-infra --replicas=1", notFix: "oc logs",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, DeploymentGVK, "redhat-ai-gateway-infra", "maas-api", func(o *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(o.Object, int64(0), "spec", "replicas")
					_ = unstructured.SetNestedField(o.Object, int64(0), "status", "readyReplicas")
				})
			}},
		{name: "maas-db-config missing", wantCode: CodeDBConfig, wantCause: "database URL", wantFix: "maasctl install",
			breakf: func(t *testing.T, r *StaticReader) { r.Remove(SecretGVK, "redhat-ai-gateway-infra", "maas-db-config") }},
		{name: "provider secret lacks label", wantCode: CodeProviderReady, wantCause: "lacks label", wantFix: "oc label secret llama-coder-api-key",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, SecretGVK, mns, "llama-coder-api-key", func(o *unstructured.Unstructured) { o.SetLabels(nil) })
				edit(t, r, ExternalProviderGVK, mns, "llama-coder-provider", setPhase("Pending"))
			}},
		{name: "model ref without governance pairing", wantCode: CodeModelRefReady, wantCause: "governance pairing",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, MaaSModelRefGVK, mns, "qwen35-9b-coder", func(o *unstructured.Unstructured) {
					setPhase("Pending")(o)
					setConditions(map[string]any{"type": "GovernanceAttached", "status": "False", "reason": "NoPairingFound", "message": "awaiting governance pairing"})(o)
				})
			}},
		{name: "auth policy pending", wantCode: CodeAuthPolicyActive,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, MaaSAuthPolicyGVK, ins, "llama-coder-access", setPhase("Pending"))
			}},
		{name: "gateway AuthPolicy not enforced", wantCode: CodeAuthEnforced, wantCause: "does not enforce",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("no ready Authorino instance"))
			}},
		{name: "gateway AuthPolicy not enforced: the restart message of the field report", wantCode: CodeAuthEnforced, wantCause: "started before its Gateway API provider",
			wantFix: "oc delete pod -n openshift-operators -l app=kuadrant,control-plane=controller-manager",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"))
			}},
		{name: "gateway AuthPolicy not enforced: Authorino has not loaded its AuthConfig", wantCode: CodeAuthEnforced,
			wantCause:  "Authorino has not loaded it",
			wantDetail: "Enforced=False (Unknown)",
			wantFix:    "oc get authconfig 5f0e3a1c9b -n kuadrant-system -o jsonpath='{.status.conditions}'",
			breakf: func(t *testing.T, r *StaticReader) {
				// kuadrant-operator v1.5.2 ErrOutOfSync, as it wrote it when
				// Authorino refused the AuthConfig (e2e TestMaaSControllerV021).
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [AuthConfig (5f0e3a1c9b)]"))
			}},
		{name: "gateway AuthPolicy overridden by the tier-based one", wantCode: CodeAuthEnforced,
			wantCause:  "AuthPolicy openshift-ingress/gateway-auth-policy on the same target overrides it",
			wantDetail: "Enforced=False (Overridden)",
			wantFix:    "maasctl migrate tiers",
			breakf: func(t *testing.T, r *StaticReader) {
				// As kuadrant-operator v1.5.2 wrote it after a tier
				// migration's rollback (e2e TestMigrateTiersResumes).
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", setConditions(
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "Overridden", "message": "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]"}))
			}},
		{name: "generated TokenRateLimitPolicy overridden", wantCode: CodeTokenLimitEnf,
			wantCause: "TokenRateLimitPolicy llm-coding-assistant/old-limits on the same target overrides it",
			wantFix:   "oc get tokenratelimitpolicy old-limits -n llm-coding-assistant -o yaml",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder", setConditions(
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "Overridden", "message": "TokenRateLimitPolicy is overridden by [llm-coding-assistant/old-limits]"}))
			}},
		// Only behind: Accepted and Enforced hold for generation 1. The
		// fix is to wait, never to restart the Kuadrant operator.
		{name: "gateway AuthPolicy judged for an older generation", wantCode: CodeAuthEnforced, wantDetail: "status is for generation 1, the policy is at 2",
			wantCause: "Kuadrant has not judged the AuthPolicy's new spec yet", wantFix: "wait and run maasctl verify --settle", notFix: "oc delete pod", wantPending: true,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", func(o *unstructured.Unstructured) {
					o.SetGeneration(2)
					_ = unstructured.SetNestedField(o.Object, int64(1), "status", "observedGeneration")
				})
			}},
		{name: "generated TokenRateLimitPolicy Enforced for an older generation", wantCode: CodeTokenLimitEnf,
			wantDetail: "status is for generation 2, the policy is at 3", wantCause: "not judged the TokenRateLimitPolicy's new spec", wantPending: true,
			wantFix: "wait and run maasctl verify --settle", notFix: "oc delete pod",
			breakf: func(t *testing.T, r *StaticReader) {
				// The MaaS controller re-rendered the policy for a changed
				// token limit; Kuadrant's Enforced=True is the old spec's.
				edit(t, r, TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder", func(o *unstructured.Unstructured) {
					o.SetGeneration(3)
					_ = unstructured.SetNestedField(o.Object, int64(2), "status", "observedGeneration")
					setConditions(map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
						map[string]any{"type": "Enforced", "status": "True", "reason": "Enforced"})(o)
				})
			}},
		{name: "subscription Active for an older generation", wantCode: CodeSubscriptionAct,
			wantDetail: "phase Active (for generation 1, object is at 2)", wantCause: "has not reconciled the changed MaaSSubscription", wantPending: true,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, MaaSSubscriptionGVK, ins, "llama-coder-default", func(o *unstructured.Unstructured) {
					o.SetGeneration(2)
					setPhase("Active")(o)
					setConditions(map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration": int64(1)})(o)
				})
			}},
		{name: "auth policy Active for an older generation", wantCode: CodeAuthPolicyActive,
			wantDetail: "phase Active (for generation 4, object is at 5)", wantPending: true,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, MaaSAuthPolicyGVK, ins, "llama-coder-access", func(o *unstructured.Unstructured) {
					o.SetGeneration(5)
					setConditions(map[string]any{"type": "Ready", "status": "True", "reason": "Reconciled", "observedGeneration": int64(4)})(o)
				})
			}},
		{name: "gateway AuthPolicy missing", wantCode: CodeAuthEnforced, wantCause: "has not created its Gateway-level AuthPolicy",
			breakf: func(t *testing.T, r *StaticReader) { r.Remove(AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth") }},
		{name: "subscription degraded names the policy not accepted", wantCode: CodeSubscriptionAct, wantDetail: "maas-trlp-qwen35-9b-coder NotAccepted: target is invalid",
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, MaaSSubscriptionGVK, ins, "llama-coder-default", func(o *unstructured.Unstructured) {
					setPhase("Degraded")(o)
					_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "maas-trlp-qwen35-9b-coder", "namespace": mns,
						"model": "qwen35-9b-coder", "ready": false, "reason": "NotAccepted", "message": "target is invalid"}}, "status", "tokenRateLimitStatuses")
				})
			}},
		{name: "generated TokenRateLimitPolicy waits for Limitador", wantCode: CodeTokenLimitEnf,
			wantCause: "waits for Limitador", wantFix: "oc get limitador -n kuadrant-system",
			breakf: func(t *testing.T, r *StaticReader) {
				// kuadrant-operator v1.5.2 ErrOutOfSync, as it wrote it for
				// 1000 models (maasctl-bench, 2026-12-06).
				edit(t, r, TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder", notEnforced("TokenRateLimitPolicy waiting for the following components to sync: [Limitador]"))
			}},
		{name: "gateway AuthPolicy not enforced: the operator does not take the class for Istio's", wantCode: CodeAuthEnforced,
			wantCause: "ISTIO_GATEWAY_CONTROLLER_NAMES does not name the class's controller (openshift.io/gateway-controller/v1)",
			wantFix:   "maasctl install (sets ISTIO_GATEWAY_CONTROLLER_NAMES",
			breakf: func(t *testing.T, r *StaticReader) {
				// As the real operator wrote it when the RHCL Subscription
				// lacked the variable (e2e/sim TestInstallContractFlow).
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Gateway (openshift-ingress/maas-default-gateway)]"))
			}},
		{name: "generated TokenRateLimitPolicy missing", wantCode: CodeTokenLimitEnf,
			breakf: func(t *testing.T, r *StaticReader) {
				r.Remove(TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder")
			}},
		{name: "subscription missing", wantCode: CodeSubscriptionAct,
			breakf: func(t *testing.T, r *StaticReader) { r.Remove(MaaSSubscriptionGVK, ins, "llama-coder-default") }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyReader(t)
			if tc.breakf != nil {
				tc.breakf(t, r)
			}
			s, err := Snapshot(context.Background(), r, inventory.Default(), release.Release{})
			if err != nil {
				t.Fatal(err)
			}
			checks := LiveChecks(s)
			if len(checks) < 11 {
				t.Fatalf("only %d checks", len(checks))
			}
			var failed []Check
			for _, c := range checks {
				if c.Result == Fail {
					failed = append(failed, c)
				}
				if c.Code == "" || c.Title == "" || c.Object == "" {
					t.Errorf("check without code, title or object: %+v", c)
				}
			}
			if tc.wantCode == "" {
				if len(failed) > 0 {
					t.Fatalf("healthy state failed: %+v", failed)
				}
				return
			}
			var hit *Check
			for i, c := range failed {
				if c.Code == tc.wantCode {
					hit = &failed[i]
				}
			}
			if hit == nil {
				t.Fatalf("%s did not fail; failed: %+v", tc.wantCode, failed)
			}
			if hit.Cause == "" || hit.Fix == "" || !strings.Contains(hit.Cause, tc.wantCause) || !strings.Contains(hit.Fix, tc.wantFix) {
				t.Errorf("%s: cause %q fix %q; want cause containing %q and fix containing %q", hit.Code, hit.Cause, hit.Fix, tc.wantCause, tc.wantFix)
			}
			if !strings.Contains(hit.Detail, tc.wantDetail) {
				t.Errorf("%s: detail %q, want it to contain %q", hit.Code, hit.Detail, tc.wantDetail)
			}
			if tc.notFix != "" && strings.Contains(hit.Fix, tc.notFix) {
				t.Errorf("%s: fix %q, want none containing %q", hit.Code, hit.Fix, tc.notFix)
			}
			if tc.wantPending && !hit.Pending {
				t.Errorf("%s: not Pending, want a failure a settle waits out", hit.Code)
			}
		})
	}
}

func TestCatalogueCodesUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Catalogue {
		if seen[c.Code] || !strings.HasPrefix(c.Code, "MAAS-V") || c.Title == "" {
			t.Errorf("bad or duplicate catalogue entry %+v", c)
		}
		seen[c.Code] = true
	}
}

func TestSnapshotNeverHoldsSecretValues(t *testing.T) {
	s, err := Snapshot(context.Background(), healthyReader(t), inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.DBConfig.HasKey("DB_CONNECTION_URL") || !s.ProviderSecrets["llm-coding-assistant/llama-coder-provider"].HasKey("api-key") {
		t.Fatalf("secret keys not recorded: %v", s.DBConfig.Keys)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"unit-test-pw", "cG9zdGdyZXNxbDovL21hYXM6dW5pdC10ZXN0LXB3", "dGVzdGVudi1sbGFtYS1jb2Rlci1rZXk", "testenv-llama-coder-key"} {
		if strings.Contains(string(b), v) {
			t.Errorf("snapshot holds secret value %q", v)
		}
	}
}

// notEnforced sets a Kuadrant policy Accepted but Enforced=False, reason
// Unknown, with msg: how the kuadrant-operator reports a policy it has not
// enforced yet (ErrOutOfSync and the others of reason Unknown).
func notEnforced(msg string) func(*unstructured.Unstructured) {
	return setConditions(
		map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
		map[string]any{"type": "Enforced", "status": "False", "reason": "Unknown", "message": msg})
}

func TestKuadrantOverriders(t *testing.T) {
	for msg, want := range map[string][]string{
		"AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]": {"openshift-ingress/gateway-auth-policy"},
		"AuthPolicy is overridden by [a/b c/d]":                               {"a/b", "c/d"},
		"TokenRateLimitPolicy is overridden by [a/b]":                         {"a/b"},
		"AuthPolicy is overridden by [a/b":                                    nil,
		"AuthPolicy is overridden by [ab]":                                    nil,
		"AuthPolicy is overridden by []":                                      nil,
		"AuthPolicy has been successfully enforced":                           nil,
	} {
		if diff := cmp.Diff(want, KuadrantOverriders(msg)); diff != "" {
			t.Errorf("KuadrantOverriders(%q) (-want +got):\n%s", msg, diff)
		}
	}
}

// TestGeneratedPolicyOncePerModel: two MaaSSubscriptions of one model list
// the same generated TokenRateLimitPolicy (the MaaS controller makes one
// per model); MAAS-V012 reports it once, naming both, and keeps its
// failure.
func TestGeneratedPolicyOncePerModel(t *testing.T) {
	const mns, ins = "llm-coding-assistant", "models-as-a-service"
	const trlp = "TokenRateLimitPolicy " + mns + "/maas-trlp-qwen35-9b-coder"
	inv := inventory.Default()
	extra := inv.Subscriptions[0]
	extra.Name, extra.Priority, extra.Groups = "team-extra", 1, []string{"team-a"}
	inv.Subscriptions = append(inv.Subscriptions, extra)
	for _, enforced := range []bool{true, false} {
		r := healthyReader(t)
		o, err := r.Get(context.Background(), MaaSSubscriptionGVK, ins, "llama-coder-default")
		if err != nil {
			t.Fatal(err)
		}
		o = o.DeepCopy()
		o.SetName("team-extra")
		r.Put(o)
		if !enforced {
			edit(t, r, TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder", notEnforced("TokenRateLimitPolicy waiting for the following components to sync: [Limitador]"))
		}
		s, err := Snapshot(context.Background(), r, inv, release.Release{})
		if err != nil {
			t.Fatal(err)
		}
		var v012, v011 []Check
		for _, c := range LiveChecks(s) {
			switch c.Code {
			case CodeTokenLimitEnf:
				v012 = append(v012, c)
			case CodeSubscriptionAct:
				v011 = append(v011, c)
			}
		}
		if len(v011) != 2 {
			t.Errorf("enforced %v: %d MAAS-V011 checks, want one per subscription: %+v", enforced, len(v011), v011)
		}
		if len(v012) != 1 {
			t.Fatalf("enforced %v: %d MAAS-V012 checks, want the one generated policy once: %+v", enforced, len(v012), v012)
		}
		c := v012[0]
		if c.Object != trlp || !strings.Contains(c.Detail, "listed by MaaSSubscriptions llama-coder-default, team-extra") {
			t.Errorf("enforced %v: MAAS-V012 %q detail %q; want %q naming both subscriptions", enforced, c.Object, c.Detail, trlp)
		}
		if want := map[bool]Result{true: Pass, false: Fail}[enforced]; c.Result != want || (!enforced && !strings.Contains(c.Cause, "waits for Limitador")) {
			t.Errorf("enforced %v: MAAS-V012 %s (cause %q), want %s", enforced, c.Result, c.Cause, want)
		}
	}
}
