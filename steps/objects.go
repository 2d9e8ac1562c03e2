package steps

import (
	"context"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// readiness returns the condition that means "ready" for an object of the
// given kind, as the owning operator reports it. Kinds without one are ready
// when they exist.
func readiness(obj *unstructured.Unstructured) waiters.Condition {
	gk := obj.GroupVersionKind().GroupKind()
	switch gk.Group + "/" + gk.Kind {
	case "postgresql.cnpg.io/Cluster":
		// CNPG: condition Ready (reason ClusterIsReady) – cloudnative-pg api/v1 cluster_conditions.go.
		return waiters.ConditionTrue("Ready")
	case "operator.openshift.io/LeaderWorkerSetOperator":
		return waiters.ConditionTrue("Available")
	case "gateway.networking.k8s.io/GatewayClass":
		return waiters.ConditionTrue("Accepted")
	case "cert-manager.io/Certificate":
		return waiters.ConditionTrue("Ready")
	case "gateway.networking.k8s.io/Gateway":
		return waiters.And(waiters.ConditionTrue("Accepted"), waiters.ConditionTrue("Programmed"))
	case "route.openshift.io/Route":
		return routeAdmitted
	case "kuadrant.io/Kuadrant", "operator.authorino.kuadrant.io/Authorino":
		return waiters.ConditionTrue("Ready")
	case "dscinitialization.opendatahub.io/DSCInitialization":
		return waiters.Phase([]string{"Ready"}, "Error")
	case "inference.opendatahub.io/ExternalProvider", "inference.opendatahub.io/ExternalModel":
		return waiters.Phase([]string{"Ready"})
	case "maas.opendatahub.io/MaaSModelRef":
		// A MaaSModelRef stays Pending ("no governance pairing") until a
		// MaaSAuthPolicy and a MaaSSubscription both reference it (case
		// B17), so its own step only waits for it to be accepted; the
		// access steps wait for Ready.
		return modelRefAccepted
	case "maas.opendatahub.io/MaaSAuthPolicy", "maas.opendatahub.io/MaaSSubscription":
		return waiters.Phase([]string{"Active"}, "Invalid")
	}
	return waiters.Exists()
}

// modelRefAccepted is done when the MaaS controller reconciled the
// MaaSModelRef: phase Pending or Ready, never Failed or Invalid.
func modelRefAccepted(obj *unstructured.Unstructured) waiters.Result {
	return waiters.Phase([]string{"Pending", "Ready", "Unhealthy"}, "Invalid", "Failed")(obj)
}

// modelRefReady is done at phase Ready (governance paired, runtime healthy).
var modelRefReady = waiters.Phase([]string{"Ready"}, "Invalid")

// routeAdmitted is done when the default router admitted the Route
// (status.ingress[].conditions[type=Admitted], openshift/api route/v1).
func routeAdmitted(obj *unstructured.Unstructured) waiters.Result {
	ingress, _, _ := unstructured.NestedSlice(obj.Object, "status", "ingress")
	for _, in := range ingress {
		m, _ := in.(map[string]any)
		conds, _ := m["conditions"].([]any)
		for _, c := range conds {
			cm, _ := c.(map[string]any)
			if cm["type"] == "Admitted" {
				st := fmt.Sprintf("Admitted=%v by router %v", cm["status"], m["routerName"])
				return waiters.Result{Done: cm["status"] == "True", Status: st}
			}
		}
	}
	return waiters.Result{Status: "not admitted by a router yet"}
}

func target(obj *unstructured.Unstructured, e *Env, stepID string) waiters.Target {
	return waiters.Target{
		GVK: obj.GroupVersionKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
		Cond: readiness(obj),
		OnChange: func(r waiters.Result) {
			if !r.Done {
				e.progress(stepID, "waiting for %s: %s", kube.Describe(obj), r.Status)
			}
		},
	}
}

// applyObjects server-side applies objs in order.
func applyObjects(ctx context.Context, e *Env, stepID string, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		if _, err := e.Clients.Apply(ctx, o); err != nil {
			return err
		}
		e.progress(stepID, "applied %s", kube.Describe(o))
	}
	return nil
}

// waitReady waits for every object with a readiness condition.
func waitReady(ctx context.Context, e *Env, stepID string, objs []*unstructured.Unstructured) error {
	var ts []waiters.Target
	for _, o := range objs {
		ts = append(ts, target(o, e, stepID))
	}
	return waiters.All(ctx, e.Clients, ts...)
}

// applyAndWait is the Apply of a plain step: apply its rendered objects, then
// wait until each is ready.
func applyAndWait(id string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		objs := e.objects(id)
		if err := applyObjects(ctx, e, id, objs); err != nil {
			return err
		}
		return waitReady(ctx, e, id, objs)
	}
}

// checkObjects is the Check of a plain step: every rendered object exists,
// holds every field maasctl sets, and is ready.
// Namespaces only need to exist: steps create missing ones and leave
// existing ones (which may belong to the platform or an operator) alone.
func checkObjects(id string) func(ctx context.Context, e *Env) (bool, string, error) {
	return func(ctx context.Context, e *Env) (bool, string, error) {
		return checkLive(ctx, e, e.objects(id))
	}
}

// checkApplied is checkObjects for steps that apply every object, Namespaces
// included, so every field is compared.
func checkApplied(id string) func(ctx context.Context, e *Env) (bool, string, error) {
	return func(ctx context.Context, e *Env) (bool, string, error) {
		return checkLiveFields(ctx, e, e.objects(id), true)
	}
}

func checkLive(ctx context.Context, e *Env, objs []*unstructured.Unstructured) (bool, string, error) {
	return checkLiveFields(ctx, e, objs, false)
}

func checkLiveFields(ctx context.Context, e *Env, objs []*unstructured.Unstructured, namespaceFields bool) (bool, string, error) {
	// The reads are independent: observeWorkers at a time; the verdict is
	// the first problem in objs' order.
	lives := make([]*unstructured.Unstructured, len(objs))
	errs := make([]error, len(objs))
	inParallel(len(objs), observeWorkers, func(i int) {
		lives[i], errs[i] = e.Clients.Get(ctx, objs[i])
	})
	for i, o := range objs {
		live, err := lives[i], errs[i]
		if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
			return false, kube.Describe(o) + " missing", nil
		}
		if err != nil {
			return false, "", err
		}
		if o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1" && !namespaceFields {
			continue
		}
		if path, ok := Contains(live.Object, o.Object); !ok {
			return false, fmt.Sprintf("%s drifted at %s", kube.Describe(o), path), nil
		}
		if r := readiness(o)(live); !r.Done {
			return false, fmt.Sprintf("%s not ready: %s", kube.Describe(o), r.Status), nil
		}
	}
	return true, "", nil
}

// Contains reports whether every field of want is present with an equal
// value in live (numbers compare by value), and otherwise the first path
// that differs. Lists compare element by element and must have equal length.
func Contains(live, want any) (string, bool) {
	return contains(live, want, "")
}

func contains(live, want any, path string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return path, false
		}
		for k, wv := range w {
			if p, ok := contains(l[k], wv, path+"."+k); !ok {
				return p, false
			}
		}
		return "", true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			return path, false
		}
		for i := range w {
			if p, ok := contains(l[i], w[i], fmt.Sprintf("%s[%d]", path, i)); !ok {
				return p, false
			}
		}
		return "", true
	}
	if wf, ok := number(want); ok {
		lf, ok := number(live)
		return path, ok && lf == wf
	}
	return path, reflect.DeepEqual(live, want)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// stepTimeout is the timeout of s for inventory e.Inv.
func stepTimeout(s *Step, e *Env) time.Duration {
	if s.Timeout > 0 {
		return s.Timeout
	}
	return time.Duration(e.Inv.WaitTimeoutSeconds) * time.Second
}

// ensureNamespace creates ns when it is missing and leaves an existing one
// alone: namespaces such as openshift-operators belong to the platform.
func ensureNamespace(ctx context.Context, e *Env, stepID string, ns *unstructured.Unstructured) error {
	_, err := e.Clients.Get(ctx, ns)
	if err == nil {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("get %s: %w", kube.Describe(ns), err)
	}
	return applyObjects(ctx, e, stepID, []*unstructured.Unstructured{ns})
}

// checkConditions evaluates each target once against the live object.
func checkConditions(ctx context.Context, e *Env, ts []waiters.Target) (bool, string, error) {
	type read struct {
		live       *unstructured.Unstructured
		mappingErr error
		err        error
	}
	reads := make([]read, len(ts))
	inParallel(len(ts), observeWorkers, func(i int) {
		ri, _, err := e.Clients.Resource(ts[i].GVK, ts[i].Namespace)
		if err != nil {
			reads[i].mappingErr = err
			return
		}
		reads[i].live, reads[i].err = ri.Get(ctx, ts[i].Name, metav1.GetOptions{})
	})
	for i, t := range ts {
		if err := reads[i].mappingErr; err != nil {
			return false, t.String() + ": " + err.Error(), nil
		}
		live, err := reads[i].live, reads[i].err
		if apierrors.IsNotFound(err) {
			return false, t.String() + " missing", nil
		}
		if err != nil {
			return false, "", err
		}
		if r := t.Cond(live); !r.Done {
			return false, t.String() + " not ready: " + r.Status, nil
		}
	}
	return true, "", nil
}
