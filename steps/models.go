package steps

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

var httpRouteGVK = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}

func modelSteps(*inventory.Inventory) []*Step {
	return []*Step{
		{
			// Labels only: nothing here needs the MaaS API, so it runs
			// right after preflight, off the DSC's critical path, and a
			// missing API-key Secret is reported in the first seconds
			// rather than after the DSC has reconciled.
			ID: "models/prepare", Title: "label model namespaces and API-key Secrets for MaaS",
			Apply: func(ctx context.Context, e *Env, s *Step) error {
				if err := checkProviderSecrets(ctx, e); err != nil {
					return err
				}
				return applyAndWait(ctx, e, s)
			},
			Check: checkApplied, Desired: desiredApplied, Access: prepareAccess,
		},
		{
			ID: "models/provider", Title: "ExternalProvider for each model server (RHOAI 3.5; 3.3/3.4 have none)",
			Removal: Removal{Prune: true},
			After:   []string{"models/prepare", "rhoai/dsc"},
			Apply:   applyEnsuringNamespaces,
		},
		{
			ID: "models/model", Title: "ExternalModel (API group of the RHOAI release) and MaaSModelRef for each model",
			Removal: Removal{Prune: true},
			After:   []string{"models/provider"},
			Apply:   applyModels,
			// The wait follows the HTTPRoute each ExternalModel gets.
			Access: withAccess(func(e *Env) []Access {
				var out []Access
				for _, m := range e.Inv.ExternalModels {
					out = append(out, readAccess("gateway.networking.k8s.io", "httproutes", m.Namespace)...)
				}
				return out
			}),
			// A MaaSModelRef turns Ready only once the access steps pair it
			// (case B17): this step waits for it to be accepted.
			Ready: func(obj *unstructured.Unstructured) waiters.Condition {
				if obj.GroupVersionKind().GroupKind() == modelRefGK {
					return waiters.MaaSFix(waiters.ModelRefAccepted, obj)
				}
				return nil
			},
		},
	}
}

var modelRefGK = schema.GroupKind{Group: "maas.opendatahub.io", Kind: "MaaSModelRef"}

// prepareAccess: models/prepare labels Namespaces and API-key Secrets that
// exist already (no create on Secrets; patch on the Namespaces).
func prepareAccess(e *Env, s *Step, resource func(schema.GroupVersionKind) string) []Access {
	var out []Access
	for _, o := range e.objects(s.ID) {
		switch o.GetKind() {
		case "Namespace":
			out = append(out, Access{"patch", "", "namespaces", "", o.GetName()})
			out = append(out, ObjectAccess([]*unstructured.Unstructured{o}, resource, true)...)
		case "Secret":
			out = append(out, ObjectAccess([]*unstructured.Unstructured{o}, resource, false)...)
		default:
			out = append(out, ObjectAccess([]*unstructured.Unstructured{o}, resource, true)...)
		}
	}
	return out
}

// checkProviderSecrets makes sure each model's API-key Secret exists with key
// api-key before anything refers to it: the role only labels it and never
// creates it (reference/DEPLOYMENT.md, "Rules for model entries").
// Each Secret is read once, however many models name it.
func checkProviderSecrets(ctx context.Context, e *Env) error {
	checked := map[string]bool{}
	for i, m := range e.Inv.ExternalModels {
		if checked[m.Namespace+"/"+m.APIKeySecret] {
			continue
		}
		checked[m.Namespace+"/"+m.APIKeySecret] = true
		s, err := e.Clients.Kube.CoreV1().Secrets(m.Namespace).Get(ctx, m.APIKeySecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return &Problem{
				Message: fmt.Sprintf("externalModels[%d].apiKeySecret: Secret %s/%s not found", i, m.Namespace, m.APIKeySecret),
				Fix:     fmt.Sprintf("create it first: oc create secret generic %s -n %s --from-literal=api-key=<provider key>", m.APIKeySecret, m.Namespace)}
		}
		if err != nil {
			return fmt.Errorf("get Secret %s/%s: %w", m.Namespace, m.APIKeySecret, err)
		}
		if len(s.Data["api-key"]) == 0 {
			return fmt.Errorf("externalModels[%d].apiKeySecret: Secret %s/%s has no key api-key; the ExternalProvider reads exactly that key", i, m.Namespace, m.APIKeySecret)
		}
	}
	return nil
}

// applyModels creates the ExternalModels first, in the API group of the
// installed release (inference.opendatahub.io on 3.5, maas.opendatahub.io
// on 3.3/3.4, case B16), waits for them to be Ready and for the HTTPRoute
// the MaaS controller generates to be accepted by the Gateway, and only
// then creates the MaaSModelRefs. A route the Gateway refuses for its
// namespace is reported with the namespace and reason (case B15).
func applyModels(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	var models, refs []*unstructured.Unstructured
	for _, o := range e.objects(id) {
		if o.GetKind() == "MaaSModelRef" {
			refs = append(refs, o)
		} else {
			models = append(models, o)
		}
	}
	if err := applyObjects(ctx, e, id, models); err != nil {
		return err
	}
	// Every model at once (one list-watch per kind and namespace), then
	// every reported route at once.
	lives, err := waiters.AllObjects(ctx, e.Clients, targets(e, s, models)...)
	if err != nil {
		return err
	}
	var routes []waiters.Target
	for _, live := range lives {
		route, _, _ := unstructured.NestedString(live.Object, "status", "httpRouteName")
		if route == "" {
			continue // the 3.3/3.4 ExternalModel does not report its route
		}
		routes = append(routes, routeAccepted(e, id, live.GetNamespace(), route))
	}
	if err := waiters.All(ctx, e.Clients, routes...); err != nil {
		return err
	}
	if err := applyObjects(ctx, e, id, refs); err != nil {
		return err
	}
	return waitReady(ctx, e, s, refs)
}

// routeAccepted is the wait until HTTPRoute ns/name is Accepted by the
// MaaS Gateway. NotAllowedByListeners (the Gateway selects route namespaces
// by label and this one lacks it) fails at once, naming the namespace and
// the Gateway; other reasons are waited on.
func routeAccepted(e *Env, id, ns, name string) waiters.Target {
	g := e.Inv.Gateway
	return waiters.Target{GVK: httpRouteGVK, Namespace: ns, Name: name,
		Cond: func(obj *unstructured.Unstructured) waiters.Result {
			parents, _, _ := unstructured.NestedSlice(obj.Object, "status", "parents")
			for _, p := range parents {
				pm, _ := p.(map[string]any)
				ref, _ := pm["parentRef"].(map[string]any)
				if ref["name"] != g.Name || (ref["namespace"] != nil && ref["namespace"] != g.Namespace) {
					continue
				}
				conds, _ := pm["conditions"].([]any)
				for _, c := range conds {
					cm, _ := c.(map[string]any)
					if cm["type"] != "Accepted" {
						continue
					}
					st := fmt.Sprintf("Accepted=%v (%v): %v", cm["status"], cm["reason"], cm["message"])
					if cm["status"] == "True" {
						return waiters.Result{Done: true, Status: st}
					}
					if cm["reason"] == "NotAllowedByListeners" {
						return waiters.Result{Status: st, Failed: &Problem{
							Message: fmt.Sprintf("Gateway %s/%s does not accept routes from namespace %s (%s)", g.Namespace, g.Name, ns, st),
							Fix: fmt.Sprintf("label the namespace as the listener's allowedRoutes.namespaces.selector requires (oc get gateway %s -n %s -o jsonpath='{.spec.listeners[*].allowedRoutes}'), or let maasctl manage the Gateway (allowedRoutes from: All)",
								g.Name, g.Namespace)}}
					}
					return waiters.Result{Status: st}
				}
			}
			return waiters.Result{Status: "not yet attached to Gateway " + g.Namespace + "/" + g.Name}
		},
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(id, "waiting for HTTPRoute %s/%s: %s", ns, name, r.Status)
			}
		},
	}
}

func accessSteps(*inventory.Inventory) []*Step {
	return []*Step{
		{
			ID: "access/auth-policy", Title: "MaaSAuthPolicy objects (who may call which model)",
			Removal: Removal{Prune: true},
			After:   []string{"models/model"},
			Apply:   applyEnsuringNamespaces,
		},
		{
			ID: "access/subscription", Title: "MaaSSubscription objects (token limits per user)",
			Removal: Removal{Prune: true},
			After:   []string{"models/model", "access/auth-policy"},
			Apply: func(ctx context.Context, e *Env, s *Step) error {
				if err := applySubscriptions(ctx, e, s); err != nil {
					return err
				}
				return waiters.All(ctx, e.Clients, pairedModelRefs(e, s)...)
			},
			Check: func(ctx context.Context, e *Env, s *Step) (bool, string, error) {
				ok, msg, err := checkObjects(ctx, e, s)
				if !ok || err != nil {
					return ok, msg, err
				}
				return checkConditions(ctx, e, pairedModelRefs(e, s))
			},
		},
	}
}

// pairedModelRefs are the MaaSModelRefs of models/model that must turn
// Ready (the readiness table) once both their MaaSAuthPolicy and
// MaaSSubscription exist (governance pairing).
func pairedModelRefs(e *Env, s *Step) []waiters.Target {
	var ts []waiters.Target
	for _, o := range e.objects("models/model") {
		if o.GroupVersionKind().GroupKind() == modelRefGK {
			ts = append(ts, target(o, e, s))
		}
	}
	return ts
}

// applySubscriptions applies the MaaSSubscriptions (Namespaces only when
// missing) and waits for them to be Active. maas-controller v0.2.1 reports a
// subscription Failed (ReconcileFailed, modelRefStatuses reason NotFound)
// while its model's HTTPRoute does not exist and re-reconciles when the
// route appears (it watches HTTPRoutes; issue 18), so a Failed phase ends
// the wait only once every referenced model's HTTPRoute exists; before
// that it is waited on, and a timeout names the reason.
func applySubscriptions(ctx context.Context, e *Env, s *Step) error {
	rest, err := applyCreatingNamespaces(ctx, e, s)
	if err != nil {
		return err
	}
	ts := targets(e, s, rest)
	for i, o := range rest {
		if o.GetKind() == "MaaSSubscription" {
			ts[i].Cond = failedOnceRouted(ctx, e, ts[i].Cond)
		}
	}
	return waiters.All(ctx, e.Clients, ts...)
}

// failedOnceRouted turns a Failed MaaSSubscription into a wait while the
// HTTPRoute of one of its models is missing (see applySubscriptions).
func failedOnceRouted(ctx context.Context, e *Env, base waiters.Condition) waiters.Condition {
	return func(live *unstructured.Unstructured) waiters.Result {
		r := base(live)
		if phase, _, _ := unstructured.NestedString(live.Object, "status", "phase"); r.Failed == nil || phase != "Failed" {
			return r
		}
		if missing := missingModelRoutes(ctx, e, live); len(missing) > 0 {
			return waiters.Result{Status: r.Status + "; transient while " + strings.Join(missing, ", ") + " does not exist (the MaaS controller retries once it does)"}
		}
		return r
	}
}

// missingModelRoutes names, for each model of a MaaSSubscription, the
// HTTPRoute that does not exist yet: the route the model's ExternalModel
// reports in status.httpRouteName (set by the RHOAI component that owns
// ExternalModel status, not by maas-controller; named after the model on
// 3.3/3.4), or the MaaSModelRef's status.httpRouteName for other backends.
// A model whose MaaSModelRef or route cannot be read is counted as present:
// only a route seen missing makes a Failed phase transient.
func missingModelRoutes(ctx context.Context, e *Env, sub *unstructured.Unstructured) []string {
	models := map[string]*unstructured.Unstructured{}
	for _, o := range e.objects("models/model") {
		if o.GetKind() == "ExternalModel" {
			models[o.GetNamespace()+"/"+o.GetName()] = o
		}
	}
	refs, _, _ := unstructured.NestedSlice(sub.Object, "spec", "modelRefs")
	var out []string
	for _, x := range refs {
		m, _ := x.(map[string]any)
		ns, _ := m["namespace"].(string)
		name, _ := m["name"].(string)
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(modelRefGK.WithVersion("v1alpha1"))
		stub.SetNamespace(ns)
		stub.SetName(name)
		ref, err := e.Clients.Get(ctx, stub)
		if err != nil {
			continue
		}
		route, _, _ := unstructured.NestedString(ref.Object, "status", "httpRouteName")
		if kind, _, _ := unstructured.NestedString(ref.Object, "spec", "modelRef", "kind"); kind == "ExternalModel" {
			emName, _, _ := unstructured.NestedString(ref.Object, "spec", "modelRef", "name")
			if em := models[ns+"/"+emName]; em != nil {
				if live, err := e.Clients.Get(ctx, em); err == nil {
					route, _, _ = unstructured.NestedString(live.Object, "status", "httpRouteName")
					if em.GroupVersionKind().Group == modelRefGK.Group {
						route = emName // the 3.3/3.4 ExternalModel names its route after itself
					}
				}
			}
		}
		if route == "" {
			out = append(out, "the HTTPRoute of model "+ns+"/"+name)
			continue
		}
		rs := &unstructured.Unstructured{}
		rs.SetGroupVersionKind(httpRouteGVK)
		rs.SetNamespace(ns)
		rs.SetName(route)
		if _, err := e.Clients.Get(ctx, rs); apierrors.IsNotFound(err) {
			out = append(out, "HTTPRoute "+ns+"/"+route+" of model "+ns+"/"+name)
		}
	}
	return out
}
