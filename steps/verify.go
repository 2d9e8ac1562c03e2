package steps

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

// verifySteps re-reads the end state the deployment README lists under
// "Verify the deployment" (reference/DEPLOYMENT.md) once everything ran.
func verifySteps(inv *inventory.Inventory) []*Step {
	after := []string{"access/subscription", "rhoai/dashboard"}
	if inv.Gateway.CreateRoute {
		after = append(after, "platform/route")
	}
	return []*Step{{
		ID: "verify/status", Title: "verify: DSC, Kuadrant, Gateway, maas-api, models and policies ready",
		After: after,
		Apply: func(ctx context.Context, e *Env) error {
			ok, msg, err := verifyStatus(ctx, e)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("verify: %s", msg)
			}
			return nil
		},
		Check: verifyStatus,
	}}
}

func verifyStatus(ctx context.Context, e *Env) (bool, string, error) {
	var objs []*unstructured.Unstructured
	for _, id := range []string{"platform/kuadrant", "platform/gateway", "models/provider", "models/model", "access/auth-policy", "access/subscription"} {
		for _, o := range e.objects(id) {
			if o.GetKind() != "Namespace" {
				objs = append(objs, o)
			}
		}
	}
	if ok, msg, err := checkLive(ctx, e, objs); !ok || err != nil {
		return ok, msg, err
	}
	if ok, msg, err := checkConditions(ctx, e, pairedModelRefs(e)); !ok || err != nil {
		return ok, msg, err
	}
	return checkDSC(ctx, e)
}
