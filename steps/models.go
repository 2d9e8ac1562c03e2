package steps

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

func modelSteps(*inventory.Inventory) []*Step {
	return []*Step{
		{
			ID: "models/prepare", Title: "label model namespaces and API-key Secrets for MaaS",
			After: []string{"rhoai/dsc"},
			Apply: func(ctx context.Context, e *Env) error {
				if err := checkProviderSecrets(ctx, e); err != nil {
					return err
				}
				return applyAndWait("models/prepare")(ctx, e)
			},
			Check: checkApplied("models/prepare"),
		},
		withAfter(plainStep("models/provider", "ExternalProvider for each model server"), "models/prepare"),
		withAfter(plainStep("models/model", "ExternalModel and MaaSModelRef for each model"), "models/provider"),
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

func accessSteps(*inventory.Inventory) []*Step {
	return []*Step{
		{
			ID: "access/auth-policy", Title: "MaaSAuthPolicy objects (who may call which model)",
			After: []string{"models/model"},
			Apply: applyWithNamespaces("access/auth-policy"), Check: checkObjects("access/auth-policy"),
		},
		{
			ID: "access/subscription", Title: "MaaSSubscription objects (token limits per user)",
			After: []string{"models/model", "access/auth-policy"},
			Apply: func(ctx context.Context, e *Env) error {
				if err := applyAndWait("access/subscription")(ctx, e); err != nil {
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
		t.Cond = modelRefReady
		ts = append(ts, t)
	}
	return ts
}

// applyWithNamespaces is applyAndWait except that Namespaces are only
// created when missing (the operator may have created them already).
func applyWithNamespaces(id string) func(ctx context.Context, e *Env) error {
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
		return waitReady(ctx, e, id, rest)
	}
}
