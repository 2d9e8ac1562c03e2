package migrate

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/waiters"
)

// KServe's router labels on the HTTPRoute it creates for an
// LLMInferenceService; maas-controller's LLMInferenceService handler
// (pkg/controller/maas, llmisvcHandler) finds a model's route by them.
const (
	routeNameLabel      = "app.kubernetes.io/name"
	routeComponentLabel = "app.kubernetes.io/component"
	routePartOfLabel    = "app.kubernetes.io/part-of"
	routeComponent      = "llminferenceservice-router"
	routePartOf         = "llminferenceservice"
)

var gkHTTPRoute = schema.GroupKind{Group: gatewayAPIGroup, Kind: "HTTPRoute"}

// ModelProblem is a model the migration governs whose MaaSModelRef cannot
// become Ready: maas-controller reports a MaaSModelRef backed by an
// LLMInferenceService Pending while KServe's HTTPRoute for it does not
// exist, Failed when that route is not attached to the MaaS Gateway, and
// not Ready while the LLMInferenceService's Ready condition is not True.
// The apply phase waits for every MaaSModelRef to be Ready before it
// removes anything old, so such a model would hold it for its whole
// timeout.
type ModelProblem struct {
	Model  types.NamespacedName
	Reason string
}

func (m ModelProblem) String() string {
	return "LLMInferenceService " + m.Model.String() + ": " + m.Reason
}

// ModelsNotReadyError lists the governed models whose MaaSModelRef cannot
// become Ready. The migration stops before the apply phase: nothing in the
// cluster was changed.
type ModelsNotReadyError struct {
	BackupDir string
	DryRun    bool
	Problems  []ModelProblem
}

func (e *ModelsNotReadyError) Error() string {
	var b strings.Builder
	if e.DryRun {
		b.WriteString("dry run: ")
	}
	fmt.Fprintf(&b, "%d model(s) the migration governs cannot get a Ready MaaSModelRef, so the migration would wait for them until its timeout without removing anything old; nothing was changed in the cluster:\n", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("  - " + p.String() + "\n")
	}
	b.WriteString("Make each model Ready with its KServe HTTPRoute on the MaaS Gateway (oc get llminferenceservice,httproute -n <namespace>), then run maasctl migrate tiers")
	if !e.DryRun && e.BackupDir != "" {
		b.WriteString(" --backup-dir " + e.BackupDir + " again (it goes on from there)")
	} else {
		b.WriteString(" again")
	}
	return b.String()
}

// governedModels are the models the plan gives a MaaSModelRef (created or
// reused), sorted.
func governedModels(p *Plan) []types.NamespacedName {
	seen := map[types.NamespacedName]bool{}
	var out []types.NamespacedName
	add := func(nn types.NamespacedName) {
		if !seen[nn] {
			seen[nn] = true
			out = append(out, nn)
		}
	}
	for _, r := range p.ModelRefs {
		kind, _, _ := unstructured.NestedString(r.Object, "spec", "modelRef", "kind")
		name, _, _ := unstructured.NestedString(r.Object, "spec", "modelRef", "name")
		if kind == llmisvcModelRefKind {
			add(types.NamespacedName{Namespace: r.GetNamespace(), Name: name})
		}
	}
	for _, r := range p.Reused {
		add(types.NamespacedName{Namespace: r.Namespace, Name: r.Name})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// CheckModels reports, for every model the plan governs, what keeps its
// MaaSModelRef from becoming Ready (the checks maas-controller makes for an
// LLMInferenceService backend): the LLMInferenceService is missing or its
// Ready condition is not True; KServe's HTTPRoute for it (router labels)
// does not exist; the route's parentRefs do not name the MaaS Gateway. It
// is a pure function of st and p; ok lists the models that pass, with the
// route they use.
func CheckModels(st *State, p *Plan) (problems []ModelProblem, ok []string) {
	svcs := map[types.NamespacedName]*unstructured.Unstructured{}
	for _, l := range [][]*unstructured.Unstructured{st.Models, st.OtherModels} {
		for _, m := range l {
			svcs[types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()}] = m
		}
	}
	for _, nn := range governedModels(p) {
		var reasons []string
		svc := svcs[nn]
		if svc == nil {
			problems = append(problems, ModelProblem{Model: nn, Reason: "not found"})
			continue
		}
		if c, found := waiters.GetCondition(svc, "Ready"); !found {
			reasons = append(reasons, "has no Ready condition (KServe has not reported it ready)")
		} else if c.Status != "True" {
			reasons = append(reasons, "is not Ready ("+c.String()+")")
		}
		route := modelRoute(st, nn)
		switch {
		case route == nil && !st.RoutesServed:
			reasons = append(reasons, "has no HTTPRoute: the gateway.networking.k8s.io HTTPRoute kind is not served")
		case route == nil:
			reasons = append(reasons, fmt.Sprintf("has no HTTPRoute in namespace %s labelled %s=%s, %s=%s, %s=%s (the route KServe creates for it; maas-controller keeps its MaaSModelRef Pending without one)",
				nn.Namespace, routeNameLabel, nn.Name, routeComponentLabel, routeComponent, routePartOfLabel, routePartOf))
		case !routeOnGateway(route, st.Gateway):
			reasons = append(reasons, fmt.Sprintf("its HTTPRoute %s/%s does not reference Gateway %s (maas-controller fails its MaaSModelRef)",
				route.GetNamespace(), route.GetName(), st.Gateway))
		}
		if len(reasons) > 0 {
			problems = append(problems, ModelProblem{Model: nn, Reason: strings.Join(reasons, "; ")})
			continue
		}
		ok = append(ok, fmt.Sprintf("LLMInferenceService %s Ready, HTTPRoute %s/%s on Gateway %s", nn, route.GetNamespace(), route.GetName(), st.Gateway))
	}
	return problems, ok
}

// modelRoute returns KServe's HTTPRoute of model nn, nil when none exists.
func modelRoute(st *State, nn types.NamespacedName) *unstructured.Unstructured {
	for _, r := range st.ModelRoutes {
		l := r.GetLabels()
		if r.GetNamespace() == nn.Namespace && l[routeNameLabel] == nn.Name && l[routeComponentLabel] == routeComponent && l[routePartOfLabel] == routePartOf {
			return r
		}
	}
	return nil
}

// routeOnGateway reports whether one of route's parentRefs is gw (a
// parentRef without a namespace is in the route's namespace).
func routeOnGateway(route *unstructured.Unstructured, gw types.NamespacedName) bool {
	refs, _, _ := unstructured.NestedSlice(route.Object, "spec", "parentRefs")
	for _, x := range refs {
		m, _ := x.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if ns == "" {
			ns = route.GetNamespace()
		}
		if kind, _ := m["kind"].(string); kind != "" && kind != "Gateway" {
			continue
		}
		if name == gw.Name && ns == gw.Namespace {
			return true
		}
	}
	return false
}

// writeModels reports the result of CheckModels.
func writeModels(w io.Writer, problems []ModelProblem, ok []string) {
	fmt.Fprintln(w, "Models (each MaaSModelRef needs a Ready LLMInferenceService and its HTTPRoute on the MaaS Gateway):")
	if len(problems) == 0 && len(ok) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, s := range ok {
		fmt.Fprintf(w, "  ok: %s\n", s)
	}
	for _, p := range problems {
		fmt.Fprintf(w, "  NOT READY: %s\n", p)
	}
}
