package waiters

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// readiness is the one table of what "ready" means per kind, as the owning
// operator reports it. Every wait and every read-only check of maasctl
// (install steps, status, plan, migrate) reads it through Readiness, so a
// Check can never call done what the Apply still waits for. Kinds not in
// it are ready when they exist.
var readiness = map[schema.GroupKind]func(obj *unstructured.Unstructured) Condition{
	// CNPG: condition Ready (reason ClusterIsReady), cloudnative-pg api/v1 cluster_conditions.go.
	{Group: "postgresql.cnpg.io", Kind: "Cluster"}:                         always(ConditionTrue("Ready")),
	{Group: "operator.openshift.io", Kind: "LeaderWorkerSetOperator"}:      always(ConditionTrue("Available")),
	{Group: "gateway.networking.k8s.io", Kind: "GatewayClass"}:             always(ConditionTrue("Accepted")),
	{Group: "gateway.networking.k8s.io", Kind: "Gateway"}:                  always(GatewayReady),
	{Group: "cert-manager.io", Kind: "Certificate"}:                        always(ConditionTrue("Ready")),
	{Group: "route.openshift.io", Kind: "Route"}:                           always(RouteAdmitted),
	{Group: "kuadrant.io", Kind: "Kuadrant"}:                               always(ConditionTrue("Ready")),
	{Group: "operator.authorino.kuadrant.io", Kind: "Authorino"}:           always(ConditionTrue("Ready")),
	{Group: "dscinitialization.opendatahub.io", Kind: "DSCInitialization"}: always(Phase([]string{"Ready"}, "Error")),
	// MaaS kinds (the phase enums of shared/crds/maas): Failed, or
	// Invalid for a bad spec, are phases waiting will not fix; the
	// failure names the inspect command (MaaSFix).
	{Group: "inference.opendatahub.io", Kind: "ExternalProvider"}: maas(MaaSPhase([]string{"Ready"}, "Failed")),
	{Group: "inference.opendatahub.io", Kind: "ExternalModel"}:    maas(MaaSPhase([]string{"Ready"}, "Failed")),
	// RHOAI 3.3/3.4 publish external models in the MaaS group (case B16).
	{Group: "maas.opendatahub.io", Kind: "ExternalModel"}: maas(MaaSPhase([]string{"Ready"}, "Failed")),
	{Group: "maas.opendatahub.io", Kind: "MaaSModelRef"}:  maas(ModelRefReady),
	// Degraded (a model missing, or a generated policy not accepted) is
	// waited on with its reason: right after a create the controller
	// reports it until Kuadrant has accepted the new policy.
	{Group: "maas.opendatahub.io", Kind: "MaaSAuthPolicy"}:   maas(MaaSPhase([]string{"Active"}, "Invalid", "Failed")),
	{Group: "maas.opendatahub.io", Kind: "MaaSSubscription"}: maas(MaaSPhase([]string{"Active"}, "Invalid", "Failed")),
}

// Readiness returns the condition that means "ready" for an object of
// obj's kind (the table above); Exists for other kinds.
func Readiness(obj *unstructured.Unstructured) Condition {
	if f, ok := readiness[obj.GroupVersionKind().GroupKind()]; ok {
		return f(obj)
	}
	return Exists()
}

func always(c Condition) func(*unstructured.Unstructured) Condition {
	return func(*unstructured.Unstructured) Condition { return c }
}

func maas(c Condition) func(*unstructured.Unstructured) Condition {
	return func(obj *unstructured.Unstructured) Condition { return MaaSFix(c, obj) }
}

// ModelRefReady is done at MaaSModelRef phase Ready (governance paired and
// runtime healthy, maas-controller); Invalid and Failed end the wait.
var ModelRefReady = MaaSPhase([]string{"Ready"}, "Invalid", "Failed")

// ModelRefAccepted is done once the MaaS controller reconciled a
// MaaSModelRef: phase Pending, Ready or Unhealthy, never Failed or Invalid.
// A MaaSModelRef stays Pending ("no governance pairing") until a
// MaaSAuthPolicy and a MaaSSubscription both reference it (case B17), so
// the step that creates it waits only for this.
var ModelRefAccepted = MaaSPhase([]string{"Pending", "Ready", "Unhealthy"}, "Invalid", "Failed")

// MaaSFix adds to a terminal failure of cond the object's Ready condition
// and the command that shows more: the MaaS controller does not retry
// until the cause is fixed.
func MaaSFix(cond Condition, obj *unstructured.Unstructured) Condition {
	return func(live *unstructured.Unstructured) Result {
		r := cond(live)
		if r.Failed != nil {
			detail := ""
			if c, ok := GetCondition(live, "Ready"); ok && !strings.Contains(r.Failed.Error(), c.String()) {
				detail = " (" + c.String() + ")"
			}
			r.Failed = fmt.Errorf("%w%s; the MaaS controller will not retry until the cause is fixed: see 'oc describe %s %s -n %s'",
				r.Failed, detail, strings.ToLower(obj.GetKind())+"."+obj.GroupVersionKind().Group, obj.GetName(), obj.GetNamespace())
		}
		return r
	}
}

// RouteAdmitted is done when the default router admitted the Route
// (status.ingress[].conditions[type=Admitted], openshift/api route/v1).
func RouteAdmitted(obj *unstructured.Unstructured) Result {
	ingress, _, _ := unstructured.NestedSlice(obj.Object, "status", "ingress")
	for _, in := range ingress {
		m, _ := in.(map[string]any)
		conds, _ := m["conditions"].([]any)
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Admitted" {
				st := fmt.Sprintf("Admitted=%v by router %v", cm["status"], m["routerName"])
				return Result{Done: cm["status"] == "True", Status: st}
			}
		}
	}
	return Result{Status: "not admitted by a router yet"}
}

// GatewayReady is Accepted and Programmed (gateway-api v1 GatewayStatus),
// reporting the failing listener conditions while not (an unresolved
// certificate shows as ResolvedRefs=False InvalidCertificateRef).
func GatewayReady(obj *unstructured.Unstructured) Result {
	r := And(ConditionTrue("Accepted"), ConditionTrue("Programmed"))(obj)
	if r.Done {
		return r
	}
	listeners, _, _ := unstructured.NestedSlice(obj.Object, "status", "listeners")
	for _, l := range listeners {
		lm, _ := l.(map[string]any)
		conds, _ := lm["conditions"].([]any)
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["status"] == "False" && (cm["type"] == "ResolvedRefs" || cm["type"] == "Programmed" || cm["type"] == "Accepted") {
				r.Status += fmt.Sprintf("; listener %v %v=False (%v): %v", lm["name"], cm["type"], cm["reason"], cm["message"])
				break
			}
		}
	}
	return r
}
