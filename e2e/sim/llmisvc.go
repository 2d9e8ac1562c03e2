package sim

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// MaaSModelRefs backed by a KServe LLMInferenceService, as the MaaS
// controller handles them (opendatahub-io/models-as-a-service
// maas-controller, pkg/controller/maas, llmisvcHandler: ReconcileRoute /
// validateLLMISvcHTTPRoute and Status):
//   - the model's HTTPRoute is the one KServe created for the service: in
//     the MaaSModelRef's namespace, labelled app.kubernetes.io/name=<service>,
//     app.kubernetes.io/component=llminferenceservice-router and
//     app.kubernetes.io/part-of=llminferenceservice. No such route: the
//     reconcile fails and is retried when a route appears (Pending here).
//     A route whose parents do not include the MaaS Gateway is an error
//     (Failed) naming the expected and the found gateway.
//   - runtime health is the LLMInferenceService's Ready condition; the
//     endpoint is its status.url, else https://<route hostname>/<model>.
//   - governance pairing and the resulting phase are the same as for
//     ExternalModel backends.
//
// KServe itself is not simulated: a test writes the LLMInferenceService
// status and its HTTPRoute the way the KServe controller would.
var gvrLLMInferenceService = schema.GroupVersionResource{Group: "serving.kserve.io", Version: "v1alpha1", Resource: "llminferenceservices"}

// KServe's router labels on the HTTPRoute of an LLMInferenceService.
const (
	llmisvcRouteComponent = "llminferenceservice-router"
	llmisvcRoutePartOf    = "llminferenceservice"
)

// reconcileLLMISvcRef reconciles a MaaSModelRef whose spec.modelRef.kind is
// LLMInferenceService. reconcileRef calls it after its delay.
func (c *maasCtl) reconcileLLMISvcRef(ctx context.Context, k key, ref *unstructured.Unstructured) error {
	m := c.m
	gen := ref.GetGeneration()
	old := statusConditions(ref)
	name := str(ref, "spec", "modelRef", "name")
	fail := func(phase, reason, msg string) error {
		return m.updateStatus(ctx, gvrMaaSModelRef, ref, map[string]any{
			"phase":      phase,
			"conditions": conditions(old, cond("Ready", false, reason, msg).gen(gen)),
		})
	}
	if !m.isServed(gvrLLMInferenceService) {
		return fail("Failed", "NotFound", "serving.kserve.io LLMInferenceService is not served")
	}
	// maasmodelref_controller.go watches LLMInferenceServices with
	// GenerationChangedPredicate or llmisvcReadyChangedPredicate.
	readyChanged := func(o, n *unstructured.Unstructured) bool {
		return o.GetGeneration() != n.GetGeneration() || mstr(findCondition(o, "Ready"), "status") != mstr(findCondition(n, "Ready"), "status")
	}
	if !m.observeChanged(c.ref, gvrLLMInferenceService, m.allOf(gvrMaaSModelRef, true), readyChanged, k) {
		return nil // requeued once the cache has synced
	}
	svc := m.get(gvrLLMInferenceService, k.Namespace, name)
	if svc == nil {
		return fail("Failed", "NotFound", fmt.Sprintf("LLMInferenceService %s not found in namespace %s", name, k.Namespace))
	}
	var route *unstructured.Unstructured
	for _, r := range m.list(gvrHTTPRoute, k.Namespace) {
		l := r.GetLabels()
		if l["app.kubernetes.io/name"] == name && l["app.kubernetes.io/component"] == llmisvcRouteComponent && l["app.kubernetes.io/part-of"] == llmisvcRoutePartOf {
			route = r
			break
		}
	}
	if route == nil {
		return fail("Pending", "BackendNotReady", fmt.Sprintf("HTTPRoute not found for LLMInferenceService %s in namespace %s", name, k.Namespace))
	}
	status := map[string]any{"httpRouteName": route.GetName(), "httpRouteNamespace": k.Namespace}
	var gwName, gwNS string
	found := false
	for _, p := range sliceOf(route, "spec", "parentRefs") {
		pm, _ := p.(map[string]any)
		ns := mstr(pm, "namespace")
		if ns == "" {
			ns = k.Namespace
		}
		if mstr(pm, "name") == maasGatewayName && ns == maasGatewayNamespace {
			gwName, gwNS, found = maasGatewayName, maasGatewayNamespace, true
			break
		}
		if gwName == "" {
			gwName, gwNS = mstr(pm, "name"), ns
		}
	}
	if gwName != "" {
		status["httpRouteGatewayName"], status["httpRouteGatewayNamespace"] = gwName, gwNS
	}
	hosts, _, _ := unstructured.NestedStringSlice(route.Object, "spec", "hostnames")
	if len(hosts) > 0 {
		status["httpRouteHostnames"] = hosts
	}
	if !found {
		status["phase"] = "Failed"
		status["conditions"] = conditions(old, cond("Ready", false, "ReconcileFailed", fmt.Sprintf(
			"HTTPRoute %s/%s does not reference gateway (expected: %s/%s, found: %s/%s)",
			k.Namespace, route.GetName(), maasGatewayNamespace, maasGatewayName, gwNS, gwName)).gen(gen))
		return m.updateStatus(ctx, gvrMaaSModelRef, ref, status)
	}
	runtimeOK := conditionTrue(svc, "Ready")
	runtimeReason, runtimeMsg := "BackendNotReady", fmt.Sprintf("LLMInferenceService %s/%s is not Ready", k.Namespace, name)
	if runtimeOK {
		runtimeReason, runtimeMsg = "RuntimeHealthy", "LLMInferenceService is Ready"
		endpoint := str(ref, "spec", "endpointOverride")
		if endpoint == "" {
			endpoint = str(svc, "status", "url")
		}
		if endpoint == "" && len(hosts) > 0 {
			endpoint = "https://" + hosts[0] + "/" + k.Name
		}
		if endpoint != "" {
			status["endpoint"] = strings.TrimSpace(endpoint)
		}
	}
	return c.writeModelRefStatus(ctx, k, ref, status, old, runtimeOK, runtimeReason, runtimeMsg)
}
