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
			Apply: func(ctx context.Context, e *Env) error {
				if err := checkProviderSecrets(ctx, e); err != nil {
					return err
				}
				return applyAndWait("models/prepare")(ctx, e)
			},
			Check: checkApplied("models/prepare"),
		},
		{
			ID: "models/provider", Title: "ExternalProvider for each model server (RHOAI 3.5; 3.3/3.4 have none)",
			After: []string{"models/prepare", "rhoai/dsc"},
			Apply: applyMaaSObjects("models/provider"), Check: checkObjects("models/provider"),
		},
		{
			ID: "models/model", Title: "ExternalModel (API group of the RHOAI release) and MaaSModelRef for each model",
			After: []string{"models/provider"},
			Apply: applyModels, Check: checkObjects("models/model"),
		},
	}
}

// checkProviderSecrets makes sure each model's API-key Secret exists with key
// api-key before anything refers to it: the role only labels it and never
// creates it (reference/DEPLOYMENT.md, "Rules for model entries").
func checkProviderSecrets(ctx context.Context, e *Env) error {
	for i, m := range e.Inv.ExternalModels {
		s, err := e.Clients.Kube.CoreV1().Secrets(m.Namespace).Get(ctx, m.APIKeySecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("externalModels[%d].apiKeySecret: Secret %s/%s not found; create it first: oc create secret generic %s -n %s --from-literal=api-key=<provider key>",
				i, m.Namespace, m.APIKeySecret, m.APIKeySecret, m.Namespace)
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

// maasReadiness is the readiness of MaaS objects, failing fast on the
// phases the MaaS controller uses for a problem waiting will not fix
// (the phase enums of shared/crds/maas): Failed for ExternalProvider,
// ExternalModel (either API group) and MaaSModelRef, Failed or Invalid for
// MaaSAuthPolicy and MaaSSubscription. The error names the object, its
// Ready condition and the command that shows more. Other kinds use the
// default readiness.
func maasReadiness(obj *unstructured.Unstructured) waiters.Condition {
	gk := obj.GroupVersionKind().GroupKind()
	var cond waiters.Condition
	switch gk.Group + "/" + gk.Kind {
	case "inference.opendatahub.io/ExternalProvider", "inference.opendatahub.io/ExternalModel", "maas.opendatahub.io/ExternalModel":
		cond = waiters.Phase([]string{"Ready"}, "Failed")
	case "maas.opendatahub.io/MaaSModelRef":
		cond = modelRefAccepted
	case "maas.opendatahub.io/MaaSAuthPolicy", "maas.opendatahub.io/MaaSSubscription":
		cond = waiters.Phase([]string{"Active"}, "Invalid", "Failed")
	default:
		return readiness(obj)
	}
	return withFix(cond, obj)
}

// withFix adds the inspect command to a terminal failure of cond.
func withFix(cond waiters.Condition, obj *unstructured.Unstructured) waiters.Condition {
	return func(live *unstructured.Unstructured) waiters.Result {
		r := cond(live)
		if r.Failed != nil {
			detail := ""
			if c, ok := waiters.GetCondition(live, "Ready"); ok {
				detail = " (" + c.String() + ")"
			}
			r.Failed = fmt.Errorf("%w%s; the MaaS controller will not retry until the cause is fixed: see 'oc describe %s %s -n %s'",
				r.Failed, detail, strings.ToLower(obj.GetKind())+"."+obj.GroupVersionKind().Group, obj.GetName(), obj.GetNamespace())
		}
		return r
	}
}

func maasTargets(e *Env, stepID string, objs []*unstructured.Unstructured) []waiters.Target {
	var ts []waiters.Target
	for _, o := range objs {
		t := target(o, e, stepID)
		t.Cond = maasReadiness(o)
		ts = append(ts, t)
	}
	return ts
}

// applyMaaSObjects applies a step's MaaS objects (Namespaces only when
// missing) and waits with maasReadiness.
func applyMaaSObjects(id string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		var rest []*unstructured.Unstructured
		for _, o := range e.objects(id) {
			if o.GetKind() == "Namespace" {
				if err := ensureNamespace(ctx, e, id, o); err != nil {
					return err
				}
				continue
			}
			rest = append(rest, o)
		}
		if err := applyObjects(ctx, e, id, rest); err != nil {
			return err
		}
		return waiters.All(ctx, e.Clients, maasTargets(e, id, rest)...)
	}
}

// applyModels creates the ExternalModels first, in the API group of the
// installed release (inference.opendatahub.io on 3.5, maas.opendatahub.io
// on 3.3/3.4, case B16), waits for them to be Ready and for the HTTPRoute
// the MaaS controller generates to be accepted by the Gateway, and only
// then creates the MaaSModelRefs. A route the Gateway refuses for its
// namespace is reported with the namespace and reason (case B15).
func applyModels(ctx context.Context, e *Env) error {
	const id = "models/model"
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
	for _, t := range maasTargets(e, id, models) {
		live, err := waiters.For(ctx, e.Clients, t)
		if err != nil {
			return err
		}
		route, _, _ := unstructured.NestedString(live.Object, "status", "httpRouteName")
		if route == "" {
			continue // the 3.3/3.4 ExternalModel does not report its route
		}
		if err := waitRouteAccepted(ctx, e, id, live.GetNamespace(), route); err != nil {
			return err
		}
	}
	if err := applyObjects(ctx, e, id, refs); err != nil {
		return err
	}
	return waiters.All(ctx, e.Clients, maasTargets(e, id, refs)...)
}

// waitRouteAccepted waits until HTTPRoute ns/name is Accepted by the MaaS
// Gateway. NotAllowedByListeners (the Gateway selects route namespaces by
// label and this one lacks it) fails at once, naming the namespace and the
// Gateway; other reasons are waited on.
func waitRouteAccepted(ctx context.Context, e *Env, id, ns, name string) error {
	g := e.Inv.Gateway
	t := waiters.Target{GVK: httpRouteGVK, Namespace: ns, Name: name,
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
						return waiters.Result{Status: st, Failed: fmt.Errorf("Gateway %s/%s does not accept routes from namespace %s (%s): label the namespace as the listener's allowedRoutes.namespaces.selector requires (oc get gateway %s -n %s -o jsonpath='{.spec.listeners[*].allowedRoutes}'), or let maasctl manage the Gateway (allowedRoutes from: All)",
							g.Namespace, g.Name, ns, st, g.Name, g.Namespace)}
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
	_, err := waiters.For(ctx, e.Clients, t)
	return err
}

func accessSteps(*inventory.Inventory) []*Step {
	return []*Step{
		{
			ID: "access/auth-policy", Title: "MaaSAuthPolicy objects (who may call which model)",
			After: []string{"models/model"},
			Apply: applyMaaSObjects("access/auth-policy"), Check: checkObjects("access/auth-policy"),
		},
		{
			ID: "access/subscription", Title: "MaaSSubscription objects (token limits per user)",
			After: []string{"models/model", "access/auth-policy"},
			Apply: func(ctx context.Context, e *Env) error {
				if err := applyMaaSObjects("access/subscription")(ctx, e); err != nil {
					return err
				}
				return waiters.All(ctx, e.Clients, pairedModelRefs(e)...)
			},
			Check: func(ctx context.Context, e *Env) (bool, string, error) {
				ok, msg, err := checkObjects("access/subscription")(ctx, e)
				if !ok || err != nil {
					return ok, msg, err
				}
				return checkConditions(ctx, e, pairedModelRefs(e))
			},
		},
	}
}

// pairedModelRefs are the MaaSModelRefs that must turn Ready once both
// their MaaSAuthPolicy and MaaSSubscription exist (governance pairing).
func pairedModelRefs(e *Env) []waiters.Target {
	var ts []waiters.Target
	for _, o := range e.objects("models/model") {
		if o.GetKind() != "MaaSModelRef" {
			continue
		}
		t := target(o, e, "access/subscription")
		t.Cond = withFix(modelRefReady, o)
		ts = append(ts, t)
	}
	return ts
}
