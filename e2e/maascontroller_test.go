package e2e

import (
	"context"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/waiters"
)

// TestMaaSControllerV021 runs maasctl against the MaaS controller as
// measured on v0.2.1 (issue 18), on one cluster where the real Kuadrant
// refuses the generated TokenRateLimitPolicy and does not enforce the
// Gateway-level AuthPolicy. Both refusals are the real kuadrant-operator's
// and Authorino's, provoked by what the simulated MaaS controller renders
// (sim.Faults.TokenRateLimitPolicyTargetMissing,
// GatewayAuthPolicyRuleInvalid):
//   - the access/subscription wait ends naming the Degraded
//     MaaSSubscription with its reason (the TokenRateLimitPolicy and
//     Kuadrant's message), where it used to say only "phase Degraded";
//   - verify MAAS-V010 checks AuthPolicy openshift-ingress/maas-gateway-auth
//     (no per-model AuthPolicy exists), names the AuthConfig Authorino did
//     not load, and doctor reports MAAS-D021;
//   - with the DataScienceCluster deleted first (the MaaS controller gone),
//     uninstall stops on the MaaS finalizer and names it and the way out.
func TestMaaSControllerV021(t *testing.T) {
	fullOnly(t, "the MaaS controller v0.2.1 behaviours of issue 18 (Degraded MaaSSubscription named, MAAS-V010 on the Gateway AuthPolicy, MAAS-D021, uninstall stopping on the MaaS finalizer)")
	parallel(t)
	c := newCaseCluster(t, caseOptions{faults: sim.Faults{TokenRateLimitPolicyTargetMissing: true, GatewayAuthPolicyRuleInvalid: true}})

	r := c.install(t, "--set", "waitTimeoutSeconds=150")
	mustFail(t, r)
	if failure(r, "access/subscription") == "" {
		t.Errorf("access/subscription did not fail; %s", failedSummary(r))
	}
	mustContain(t, "access/subscription failure", failure(r, "access/subscription"),
		"MaaSSubscription models-as-a-service/llama-coder-default", "phase Degraded",
		"TokenRateLimitPolicy llm-coding-assistant/maas-trlp-qwen35-9b-coder NotAccepted", "TokenRateLimitPolicy target", "-missing was not found")

	rep, _ := verifyRun(t, c, nil)
	var v010 []verify.Check
	for _, ch := range rep.Checks {
		if ch.Code == verify.CodeAuthEnforced {
			v010 = append(v010, ch)
		}
		if ch.Code == verify.CodeAuthPolicyActive && ch.Result != verify.Pass {
			t.Errorf("MAAS-V009 %s: %s (the MaaSAuthPolicy is Active before anything is enforced)", ch.Result, ch.Detail)
		}
	}
	if len(v010) != 1 {
		t.Fatalf("MAAS-V010 checks %+v, want one, on the Gateway AuthPolicy", v010)
	}
	// The AuthConfig Kuadrant generated and Authorino refused.
	ac := refusedAuthConfig(t, c)
	if ch := v010[0]; ch.Object != "AuthPolicy openshift-ingress/maas-gateway-auth" || ch.Result != verify.Fail ||
		// The detail is cut short when long (one AuthConfig per route
		// rule); the cause and the fix name every one.
		!strings.Contains(ch.Detail, "Enforced=False (Unknown)") || !strings.Contains(ch.Detail, "waiting for the following components to sync: [AuthConfig (") ||
		!strings.Contains(ch.Cause, "Authorino has not loaded it") || !strings.Contains(ch.Cause, ac) ||
		!strings.Contains(ch.Fix, "oc get authconfig "+ac+" -n kuadrant-system") ||
		strings.Contains(ch.Fix, "oc delete pod") {
		t.Errorf("MAAS-V010 = %+v, want a failure on AuthPolicy openshift-ingress/maas-gateway-auth naming Enforced=False and AuthConfig %s, and no operator restart", ch, ac)
	}

	expectFinding(t, c, nil, doctorFinding{code: doctor.CodeGatewayAuth, object: "AuthPolicy openshift-ingress/maas-gateway-auth",
		evidence: "Enforced=False", fix: "oc get authconfig " + ac})

	// The DataScienceCluster goes first (as an uninstall in the wrong
	// order would do it): the MaaS controller goes with it.
	ctx := context.Background()
	dsc := schema.GroupVersionResource{Group: "datasciencecluster.opendatahub.io", Version: "v2", Resource: "datascienceclusters"}
	if err := c.clients.Dynamic.Resource(dsc).Delete(ctx, "default-dsc", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitDeploymentGone(t, c, "redhat-ai-gateway-infra", "maas-api")
	u := c.maasctl(t, "uninstall", "-o", "json", "--wait-timeout", "20s")
	mustFail(t, u)
	mustContain(t, "uninstall output", u.stderr, "MaaSSubscription models-as-a-service/llama-coder-default",
		"finalizers maas.opendatahub.io/subscription-cleanup never cleared",
		"maas.opendatahub.io/subscription-cleanup is removed only by the MaaS controller", "maasctl install --only rhoai/dsc")
}

// refusedAuthConfig returns the name of an AuthConfig in kuadrant-system
// that Authorino reports not Ready with reason Invalid (Kuadrant makes one
// per route rule under the Gateway, each with the rule of
// maas-gateway-auth that does not compile).
func refusedAuthConfig(t *testing.T, c *cluster) string {
	t.Helper()
	gvr := schema.GroupVersionResource{Group: "authorino.kuadrant.io", Version: "v1beta3", Resource: "authconfigs"}
	l, err := c.clients.Dynamic.Resource(gvr).Namespace("kuadrant-system").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, ac := range l.Items {
		if k, ok := waiters.GetCondition(&ac, "Ready"); ok && k.Status == "False" && k.Reason == "Invalid" {
			refused = append(refused, ac.GetName())
		}
	}
	if len(refused) == 0 {
		t.Fatalf("Authorino refused none of %d AuthConfigs", len(l.Items))
	}
	sort.Strings(refused)
	return refused[0]
}

// waitDeploymentGone watches Deployment ns/name until it is deleted (the
// garbage collector removes maas-api with its DataScienceCluster).
func waitDeploymentGone(t *testing.T, c *cluster, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ri := c.clients.Dynamic.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(ns)
	_, err := watchtools.UntilWithSync(ctx, waiters.NameListWatch(ri, name), &unstructured.Unstructured{},
		func(st cache.Store) (bool, error) { return len(st.List()) == 0, nil },
		func(ev watch.Event) (bool, error) { return ev.Type == watch.Deleted, nil })
	if err != nil {
		t.Fatalf("Deployment %s/%s not gone: %v", ns, name, err)
	}
}
