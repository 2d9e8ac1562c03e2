package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

var (
	certificateRequestGVK = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "CertificateRequest"}
	challengeGVK          = schema.GroupVersionKind{Group: "acme.cert-manager.io", Version: "v1", Kind: "Challenge"}
	crdGVR                = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVK         = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	secretGVK             = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	serviceGVK            = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
)

// Istio control plane that OpenShift's ingress operator deploys for Gateway
// API (OSSM 3, Istio CR "openshift-gateway"): its presence is the dependency
// the Kuadrant operator looks for at start (case B01).
const (
	istiodNamespace  = "openshift-ingress"
	istiodDeployment = "istiod-openshift-gateway"
)

// gatewayReady is platform/gateway's wait rule: the readiness table's, and
// while the Gateway is Programmed=False with reason AddressNotAssigned and
// its Service is of type LoadBalancer, the status says that no load
// balancer has assigned an address and names the fix, so that progress
// and a timed-out wait carry it (doctor's MAAS-D003 says the same).
func gatewayReady(serviceType string) func(*unstructured.Unstructured) waiters.Condition {
	return func(obj *unstructured.Unstructured) waiters.Condition {
		if obj.GetKind() != "Gateway" || serviceType != "LoadBalancer" {
			return nil
		}
		base := waiters.Readiness(obj)
		return func(live *unstructured.Unstructured) waiters.Result {
			r := base(live)
			if r.Done || r.Failed != nil {
				return r
			}
			if c, ok := waiters.GetCondition(live, "Programmed"); ok && c.Status == "False" && c.Reason == "AddressNotAssigned" {
				r.Status += "; no load balancer has assigned an address to the Gateway's Service (gateway.serviceType LoadBalancer): on a cluster without one use gateway.serviceType=ClusterIP (the passthrough Route serves the Gateway) and run maasctl install again"
			}
			return r
		}
	}
}

func platformSteps(inv *inventory.Inventory) []*Step {
	g, k := inv.Gateway, inv.Kuadrant
	steps := []*Step{
		{
			ID: "platform/monitoring", Title: "User Workload Monitoring (cluster-monitoring-config)",
			Apply: applyMonitoring, Check: checkMonitoring, Desired: monitoringDesired, Render: renderMonitoring,
			Removal: Removal{Keep: keepMonitoring},
		},
		{ID: "platform/gatewayclass", Title: "GatewayClass " + g.ClassName + " (installs Service Mesh for Gateway API)"},
		{
			ID: "platform/certificate", Title: "Certificate for " + "the MaaS host (Secret " + g.CertSecret + ")",
			Apply: applyCertificate,
			Check: func(ctx context.Context, e *Env, s *Step) (bool, string, error) {
				ok, msg, err := checkObjects(ctx, e, s)
				if !ok || err != nil {
					return ok, msg, err
				}
				t := certSecretTarget(e)
				if _, err := e.Clients.Kube.CoreV1().Secrets(t.Namespace).Get(ctx, t.Name, metav1.GetOptions{}); err != nil {
					return false, "Secret " + t.Namespace + "/" + t.Name + " missing", nil
				}
				return true, "", nil
			},
			// The wait reads the CertificateRequests for why a Certificate
			// is not Ready.
			Access: withAccess(func(*Env) []Access {
				return append(readAccess("", "secrets", g.Namespace), readAccess("cert-manager.io", "certificaterequests", g.Namespace)...)
			}),
		},
		{
			ID: "platform/gateway", Title: "Gateway " + g.Namespace + "/" + g.Name,
			After: []string{"platform/gatewayclass", "platform/certificate"},
			Ready: gatewayReady(g.ServiceType),
		},
	}
	if g.CreateRoute {
		steps = append(steps, &Step{ID: "platform/route", Title: "passthrough Route " + g.RouteName, After: []string{"platform/gateway"}})
	}
	steps = append(steps, &Step{
		ID: "platform/kuadrant", Title: "Kuadrant " + k.Namespace + "/" + k.Name + " (operator restarted once if needed)",
		After: []string{"operators/rhcl", "platform/gateway"},
		Apply: applyKuadrant, Render: renderKuadrant,
		// waitKuadrant reads the Limitador and Authorino CRs when Kuadrant
		// stalls (missingKuadrantComponent).
		Access: withAccess(func(*Env) []Access {
			out := append(readAccess("apps", "deployments", istiodNamespace), readAccess("", "pods", k.OperatorNamespace)...)
			for _, gvk := range kuadrantComponentOrder {
				out = append(out, Access{"get", gvk.Group, strings.ToLower(gvk.Kind) + "s", k.Namespace, ""})
			}
			return append(out, Access{"deletecollection", "", "pods", k.OperatorNamespace, ""})
		}),
	})
	if k.AuthorinoTLS {
		steps = append(steps, &Step{
			ID: "platform/authorino-tls", Title: "Authorino TLS with a service-CA certificate",
			After: []string{"platform/kuadrant"},
			Apply: applyAuthorinoTLS, Check: checkAuthorinoTLS, Desired: authorinoTLSDesired, Render: renderAuthorinoTLS,
			// The Deployment is done once the pods with the service CA
			// trust run (the readiness table has no Deployment rule).
			Ready: func(o *unstructured.Unstructured) waiters.Condition {
				if o.GetKind() == "Deployment" {
					return waiters.DeploymentRolledOut
				}
				return nil
			},
			// The upstream Authorino operator creates no Service while the
			// listener's TLS Secret is missing, and that Secret comes from
			// the Service's annotation: the Service goes first, alone.
			RenderApart: true,
			// The objects exist before the step patches them: no create.
			Access: func(e *Env, s *Step, resource func(schema.GroupVersionKind) string) []Access {
				return append(ObjectAccess(e.objects(s.ID), resource, false), readAccess("", "secrets", k.Namespace)...)
			},
		})
	}
	return steps
}

func certSecretTarget(e *Env) waiters.Target {
	return waiters.Target{GVK: secretGVK, Namespace: e.Inv.Gateway.Namespace, Name: e.Inv.Gateway.CertSecret}
}

// monitoringConfig returns the live cluster-monitoring-config ConfigMap (or
// nil) and its config.yaml parsed.
func monitoringConfig(ctx context.Context, e *Env, s *Step) (*unstructured.Unstructured, map[string]any, error) {
	want := e.objects(s.ID)[0]
	live, err := e.Clients.Get(ctx, want)
	if apierrors.IsNotFound(err) {
		return nil, map[string]any{}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	cfg := map[string]any{}
	raw, _, _ := unstructured.NestedString(live.Object, "data", "config.yaml")
	if err := yaml.Unmarshal([]byte(raw), &cfg); err != nil {
		return nil, nil, fmt.Errorf("ConfigMap openshift-monitoring/cluster-monitoring-config: config.yaml is not valid YAML (%v): fix it by hand, then re-run", err)
	}
	if cfg == nil {
		cfg = map[string]any{}
	}
	return live, cfg, nil
}

// applyMonitoring merges enableUserWorkload: true into config.yaml, keeping
// every other setting (OpenShift docs "Enabling monitoring for user-defined
// projects"). MaaS reports Degraded without it.
func applyMonitoring(ctx context.Context, e *Env, s *Step) error {
	_, cfg, err := monitoringConfig(ctx, e, s)
	if err != nil {
		return err
	}
	if cfg["enableUserWorkload"] == true {
		e.progress(s.ID, "User Workload Monitoring already on")
		return nil
	}
	cfg["enableUserWorkload"] = true
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	cm := e.objects(s.ID)[0].DeepCopy()
	if err := unstructured.SetNestedField(cm.Object, string(b), "data", "config.yaml"); err != nil {
		return err
	}
	_, err = e.Clients.Apply(ctx, cm)
	return err
}

func checkMonitoring(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	live, cfg, err := monitoringConfig(ctx, e, s)
	if err != nil {
		return false, "", err
	}
	if live == nil {
		return false, "ConfigMap openshift-monitoring/cluster-monitoring-config missing", nil
	}
	if cfg["enableUserWorkload"] != true {
		return false, "enableUserWorkload is not true", nil
	}
	return true, "", nil
}

// Kuadrant operator restarts: the operator reads its dependencies once at
// start, so one restart after Istio exists is the documented fix; more do
// not help (case B01).
const (
	maxKuadrantRestarts = 1
	// kuadrantRecheck bounds the wait for Ready after the restarted
	// operator pod is Running.
	kuadrantRecheck = 2 * time.Minute
)

// applyKuadrant applies the Kuadrant CR and waits for Ready. The Kuadrant
// operator checks for its Gateway API provider only when it starts; if it
// started before Istio existed, Kuadrant stays Ready=False with reason
// MissingDependency until the operator pod is restarted (case B01,
// Kuadrant/kuadrant-operator#1784). maasctl restarts it once, only after the
// Istio control plane exists, waits for the new pod, and judges by the
// condition reason, never by the message text. If the reason persists it
// stops, quoting the operator's message and naming the GatewayClass and the
// restart command.
func applyKuadrant(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	objs := e.objects(id)
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			if err := ensureNamespace(ctx, e, id, o); err != nil {
				return err
			}
			continue
		}
		if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{o}); err != nil {
			return err
		}
	}
	kq := objs[len(objs)-1]
	k := e.Inv.Kuadrant
	restartCmd := fmt.Sprintf("oc delete pod -n %s -l %s", k.OperatorNamespace, k.OperatorSelector)
	t := target(kq, e, s)
	t.Cond = kuadrantReadyOrMissing
	obj, err := waitKuadrant(ctx, e, id, t)
	if err != nil {
		return err
	}
	c, _ := waiters.GetCondition(obj, "Ready")
	if c.Status == "True" {
		return nil
	}
	e.progress(id, "Kuadrant reports MissingDependency: waiting for the Istio control plane (%s/%s) before restarting the Kuadrant operator", istiodNamespace, istiodDeployment)
	if err := waiters.All(ctx, e.Clients, waiters.Target{GVK: deploymentGVK, Namespace: istiodNamespace, Name: istiodDeployment}); err != nil {
		return &Problem{
			Message: fmt.Sprintf("Kuadrant %s/%s is Ready=False (MissingDependency): %q, and the Gateway API provider (Istio, Deployment %s/%s) never appeared: %v",
				k.Namespace, k.Name, c.Message, istiodNamespace, istiodDeployment, err),
			Fix: fmt.Sprintf("make sure GatewayClass %s is Accepted ('oc get gatewayclass %s'), then restart the Kuadrant operator: %s",
				e.Inv.Gateway.ClassName, e.Inv.Gateway.ClassName, restartCmd),
			Err: err}
	}
	for restarts := 0; restarts < maxKuadrantRestarts; restarts++ {
		if err := restartKuadrantOperator(ctx, e, id); err != nil {
			return err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, kuadrantRecheck)
	defer cancel()
	last, err := waiters.For(rctx, e.Clients, target(kq, e, s))
	if err == nil {
		return nil
	}
	if !waiters.IsTimeout(err) || ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	if last != nil {
		c, _ = waiters.GetCondition(last, "Ready")
	}
	if c.Reason == "MissingDependency" {
		return &Problem{
			Message: fmt.Sprintf("Kuadrant %s/%s is still Ready=False (MissingDependency) after %d restart(s) of its operator: %q", k.Namespace, k.Name, maxKuadrantRestarts, c.Message),
			Fix: fmt.Sprintf("install the missing dependency (for the Gateway API provider: GatewayClass %s must be Accepted, 'oc get gatewayclass %s'), then restart the operator: %s",
				e.Inv.Gateway.ClassName, e.Inv.Gateway.ClassName, restartCmd)}
	}
	return &Problem{
		Message: fmt.Sprintf("%v; the Kuadrant operator was restarted once and Kuadrant is still not Ready", err),
		Fix:     fmt.Sprintf("check 'oc get kuadrant %s -n %s -o yaml' and the operator log ('oc logs -n %s -l %s')", k.Name, k.Namespace, k.OperatorNamespace, k.OperatorSelector),
		Err:     err}
}

// kuadrantReadyOrMissing ends applyKuadrant's first wait: the Kuadrant CR
// is Ready=True, or Ready=False with reason MissingDependency (case B01).
// It judges by the condition's reason alone: the message is the
// operator's prose and changes between releases (RHCL 1.4 and
// kuadrant-operator v1.5.2 word it differently), so a restart never
// depends on it.
func kuadrantReadyOrMissing(obj *unstructured.Unstructured) waiters.Result {
	c, ok := waiters.GetCondition(obj, "Ready")
	if !ok {
		return waiters.Result{Status: "no Ready condition yet"}
	}
	return waiters.Result{Done: c.Status == "True" || c.Reason == "MissingDependency", Status: c.String()}
}

// Requests for a reconcile of the Kuadrant CR (waitKuadrant).
const (
	// kuadrantStall is how long Kuadrant may report a component CR
	// missing, or report no Ready condition while one is missing, before
	// maasctl asks its operator to reconcile again.
	kuadrantStall = 45 * time.Second
	// maxKuadrantNudges bounds those requests in one wait.
	maxKuadrantNudges = 3
)

// Kuadrant's components: the reason of its Ready=False condition when one
// is not ready (kuadrant-operator v1.5.2
// internal/controller/kuadrant_status_updater.go calculateStatus) and the
// kind of the CR its operator makes for it.
var kuadrantComponents = map[string]schema.GroupVersionKind{
	"LimitadorNotReady": {Group: "limitador.kuadrant.io", Version: "v1alpha1", Kind: "Limitador"},
	"AuthorinoNotReady": {Group: "operator.authorino.kuadrant.io", Version: "v1beta1", Kind: "Authorino"},
}

// kuadrantComponentOrder is the order in which waitKuadrant looks for a
// missing component CR when Kuadrant has reported no Ready condition.
var kuadrantComponentOrder = []schema.GroupVersionKind{kuadrantComponents["LimitadorNotReady"], kuadrantComponents["AuthorinoNotReady"]}

// kuadrantComponentNames are the names of those CRs (kuadrant-operator
// v1.5.2 api/v1beta1/topology.go LinkKuadrantToLimitador and
// LinkKuadrantToAuthorino: only these names, in the Kuadrant CR's
// namespace, belong to it).
var kuadrantComponentNames = map[string]string{"Limitador": "limitador", "Authorino": "authorino"}

// waitKuadrant is waiters.For on the Kuadrant CR (target t) that asks the
// Kuadrant operator to reconcile again, by setting the CR's reconcile
// trigger annotations (kuadrantTriggerTimeAnnotation and
// kuadrantTriggerReasonAnnotation), when Kuadrant has reported a component
// not ready, or no Ready condition at all, for kuadrantStall while that
// component's CR does not exist (kuadrantComponents,
// kuadrantComponentNames; with no condition, the first missing of
// kuadrantComponentOrder, and only when a reconcile is known to have run:
// the other component's CR exists, the CR has kuadrantReconciledFinalizer,
// or an operator pod has been Ready for the whole stall):
// up to maxKuadrantNudges times, then it waits on until ctx ends.
//
// Why: kuadrant-operator v1.5.2 creates the Limitador and Authorino CRs
// only in a reconcile started by an event of the Kuadrant CR or of those
// kinds (LimitadorReconciler and AuthorinoReconciler subscriptions), runs
// a reconcile's tasks on one context that the first failing task cancels
// (a conflict adding the DeveloperPortal finalizer ends a concurrent apply
// with "context canceled", seen in its log), and policy-machinery v0.8.0
// logs a failed reconcile without retrying it (controller.propagate).
// When the last event's reconcile lost its component apply so, Kuadrant
// stays Ready=False ("limitador resource not in topology") until its CR's
// generation or trigger annotations next change (its status writes start
// no reconcile): for 10 minutes in an e2e run after an uninstall and a
// reinstall. A reconcile whose task failed writes no status either (the
// Kuadrant status updater is the workflow's postcondition, which
// policy-machinery v0.8.0 controller/workflow.go Run skips after a task
// error), so a Kuadrant CR whose only reconcile lost its Limitador create
// has no Ready condition at all: seen in a CI run of
// TestKuadrantStalledComponentReconciled, where the denied create and the
// Authorino events fell into one reconcile. The trigger changes no spec.
func waitKuadrant(ctx context.Context, e *Env, id string, t waiters.Target) (*unstructured.Unstructured, error) {
	// Each 45 s wait starts from "not seen yet": report a status only when
	// it differs from the last one any of them reported.
	var mu sync.Mutex
	shown, onChange := "", t.OnChange
	t.OnChange = func(r waiters.Result) {
		mu.Lock()
		changed := r.Status != shown
		shown = r.Status
		mu.Unlock()
		if changed && onChange != nil {
			onChange(r)
		}
	}
	nudges := 0
	for {
		wctx, cancel := context.WithTimeout(ctx, kuadrantStall)
		obj, err := waiters.For(wctx, e.Clients, t)
		cancel()
		if err == nil || !waiters.IsTimeout(err) || ctx.Err() != nil {
			return obj, err
		}
		if nudges == maxKuadrantNudges {
			return waiters.For(ctx, e.Clients, t)
		}
		if obj == nil {
			continue
		}
		suspects, reported, reconciled := kuadrantSuspects(obj)
		comp, found, err := missingKuadrantComponent(ctx, e, obj.GetNamespace(), suspects)
		if err != nil {
			return obj, err
		}
		if comp == nil {
			continue // they exist (or none is suspect): their own events drive the operator
		}
		if !reconciled && found == 0 {
			// No status, no finalizer, no component: only an operator
			// that has been ready for the whole stall shows that a
			// reconcile of this CR ran and failed (else it may be down
			// or still starting, and a trigger would use up the nudges a
			// failed reconcile may need later).
			ready, err := kuadrantOperatorReadyFor(ctx, e, kuadrantStall)
			if err != nil {
				return obj, err
			}
			if !ready {
				continue
			}
		}
		nudges++
		e.progress(id, "Kuadrant %s/%s has reported %s for %s and %s %s/%s does not exist: the Kuadrant operator does not retry a failed reconcile, so maasctl sets its reconcile trigger on the Kuadrant CR (%s) (%d of %d)",
			obj.GetNamespace(), obj.GetName(), reported, kuadrantStall, comp.GetKind(), comp.GetNamespace(), comp.GetName(), kuadrantTriggerTimeAnnotation, nudges, maxKuadrantNudges)
		if err := annotate(ctx, e, obj, map[string]string{
			kuadrantTriggerTimeAnnotation:   time.Now().UTC().Format(time.RFC3339Nano),
			kuadrantTriggerReasonAnnotation: "maasctl: " + comp.GetKind() + " " + comp.GetName() + " missing",
		}); err != nil {
			return obj, err
		}
	}
}

// kuadrantSuspects reads the Ready condition of a Kuadrant CR (kuadrant)
// that has not become Ready: the component kinds whose CR may be missing,
// in the order to look for them; the condition as a progress message
// names it; and whether the CR shows that its operator has reconciled it
// (a Ready condition, or the finalizer kuadrantReconciledFinalizer).
// Ready=False with a component's reason (kuadrantComponents) suspects
// that component; no Ready condition at all suspects both (the reconcile
// that failed was the one that would have written the status); any
// other condition suspects none.
func kuadrantSuspects(kuadrant *unstructured.Unstructured) (kinds []schema.GroupVersionKind, reported string, reconciled bool) {
	c, _ := waiters.GetCondition(kuadrant, "Ready")
	gvk, ok := kuadrantComponents[c.Reason]
	switch {
	case c.Status == "False" && ok:
		return []schema.GroupVersionKind{gvk}, c.String(), true
	case c.Status == "":
		return kuadrantComponentOrder, "no Ready condition", slices.Contains(kuadrant.GetFinalizers(), kuadrantReconciledFinalizer)
	}
	return nil, c.String(), true
}

// kuadrantOperatorReadyFor reports whether a Kuadrant operator pod
// (kuadrant.operatorSelector in kuadrant.operatorNamespace) has been Ready
// for at least d: its Ready condition True since d ago or longer.
func kuadrantOperatorReadyFor(ctx context.Context, e *Env, d time.Duration) (bool, error) {
	k := e.Inv.Kuadrant
	pods, err := e.Clients.Kube.CoreV1().Pods(k.OperatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: k.OperatorSelector})
	if err != nil {
		return false, fmt.Errorf("list Kuadrant operator pods (%s in %s): %w", k.OperatorSelector, k.OperatorNamespace, err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() && time.Since(c.LastTransitionTime.Time) >= d {
				return true, nil
			}
		}
	}
	return false, nil
}

// kuadrantReconciledFinalizer is the finalizer kuadrant-operator v1.5.2's
// DeveloperPortalReconciler adds to the Kuadrant CR in a reconcile
// (internal/controller/developerportal_reconciler.go): a sign that the
// operator has reconciled the CR even when it wrote no status.
const kuadrantReconciledFinalizer = "kuadrant.io/developerportal"

// missingKuadrantComponent returns the first of kinds (Kuadrant component
// kinds, kuadrantComponents) whose CR (kuadrantComponentNames) does not
// exist in namespace ns, as an object that names it (nil when each
// exists), and how many of kinds do exist. A kind not served counts as
// missing; an error other than NotFound is returned.
func missingKuadrantComponent(ctx context.Context, e *Env, ns string, kinds []schema.GroupVersionKind) (missing *unstructured.Unstructured, found int, err error) {
	for _, gvk := range kinds {
		comp := &unstructured.Unstructured{}
		comp.SetGroupVersionKind(gvk)
		comp.SetNamespace(ns)
		comp.SetName(kuadrantComponentNames[gvk.Kind])
		_, err := e.Clients.Get(ctx, comp)
		switch {
		case err == nil:
			found++
		case apierrors.IsNotFound(err) || kube.IsNotServed(err):
			if missing == nil {
				missing = comp
			}
		default:
			return nil, 0, err
		}
	}
	return missing, found, nil
}

// The Kuadrant CR's reconcile trigger: kuadrant-operator v1.5.2 starts a
// reconcile on an update of the Kuadrant CR only when its generation or
// these annotations changed (internal/controller/state_of_the_world.go
// getKuadrantWatcherPredicate, internal/extension/utils.go
// AnnotationsChanged); its extension manager sets them so itself
// (TriggerReconciliation). Another annotation, or a status change, starts
// none.
const (
	kuadrantTriggerTimeAnnotation   = "extensions.kuadrant.io/trigger-time"
	kuadrantTriggerReasonAnnotation = "extensions.kuadrant.io/trigger-reason"
)

// annotate merges annotations into live's metadata (a merge patch by
// maasctl's field manager). It changes no spec.
func annotate(ctx context.Context, e *Env, live *unstructured.Unstructured, annotations map[string]string) error {
	ri, _, err := e.Clients.Resource(live.GroupVersionKind(), live.GetNamespace())
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, live.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager})
	return err
}

// restartKuadrantOperator deletes the Kuadrant operator pods and waits
// until a replacement pod (one that did not exist before) is Running.
func restartKuadrantOperator(ctx context.Context, e *Env, id string) error {
	k := e.Inv.Kuadrant
	pods := e.Clients.Kube.CoreV1().Pods(k.OperatorNamespace)
	before, err := pods.List(ctx, metav1.ListOptions{LabelSelector: k.OperatorSelector})
	if err != nil {
		return fmt.Errorf("list Kuadrant operator pods (%s in %s): %w", k.OperatorSelector, k.OperatorNamespace, err)
	}
	if len(before.Items) == 0 {
		return &Problem{Message: fmt.Sprintf("no Kuadrant operator pod matches %s in %s", k.OperatorSelector, k.OperatorNamespace),
			Fix: "set kuadrant.operatorNamespace and kuadrant.operatorSelector to where the RHCL operator runs"}
	}
	old := map[types.UID]bool{}
	for _, p := range before.Items {
		old[p.UID] = true
	}
	e.progress(id, "restarting the Kuadrant operator (pods %s in %s)", k.OperatorSelector, k.OperatorNamespace)
	if err := pods.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: k.OperatorSelector}); err != nil {
		return fmt.Errorf("restart Kuadrant operator (delete pods %s in %s): %w", k.OperatorSelector, k.OperatorNamespace, err)
	}
	lw := waiters.SelectorListWatch(pods.List, pods.Watch, k.OperatorSelector)
	_, err = watchtools.UntilWithSync(ctx, lw, &corev1.Pod{}, nil, func(ev watch.Event) (bool, error) {
		p, ok := ev.Object.(*corev1.Pod)
		return ok && ev.Type != watch.Deleted && !old[p.UID] && p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil && errors.Is(ctx.Err(), context.Canceled) { // at the step's deadline the message below says what to check
		return waiters.Ended(ctx, []waiters.Blocked{{Object: fmt.Sprintf("a new Running pod %s in %s (the Kuadrant operator after its restart)", k.OperatorSelector, k.OperatorNamespace), Status: "none yet"}})
	}
	if err != nil {
		return fmt.Errorf("the Kuadrant operator did not come back after the restart (no new Running pod %s in %s): %w", k.OperatorSelector, k.OperatorNamespace, err)
	}
	return nil
}

// certRetry bounds the retries of a Certificate create that fails in
// cert-manager's admission webhook (not serving yet right after the
// operator installs, cert-manager#3133 and #7687).
const certRetry = 2 * time.Minute

// applyCertificate applies the Gateway Certificate (retrying transient
// webhook failures), then waits for it and its Secret. While it is not
// Ready, the newest CertificateRequest's condition (and, where the ACME
// kinds are served, the Challenge's reason) is shown; a Failed or Denied
// request ends the step at once. The final error names the Certificate,
// the request and the challenge state rather than a bare timeout (case B13).
func applyCertificate(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	objs := e.objects(id)
	for _, o := range objs {
		if err := applyRetryingWebhook(ctx, e, id, o); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan error, 1)
	for _, o := range objs {
		go watchCertificateRequests(wctx, e, id, o, failed)
	}
	done := make(chan error, 1)
	go func() {
		if err := waitReady(wctx, e, s, objs); err != nil {
			done <- err
			return
		}
		done <- waiters.All(wctx, e.Clients, certSecretTarget(e))
	}()
	var err error
	select {
	case err = <-done:
	case err = <-failed:
		cancel()
		<-done
	}
	if err != nil && waiters.IsTimeout(err) {
		for _, o := range objs {
			if why := certificateIssuance(context.Background(), e, o); why != "" {
				return &Problem{
					Message: fmt.Sprintf("Certificate %s/%s not Ready: %s; the Gateway listener stays unresolved (InvalidCertificateRef) until it is: %v", o.GetNamespace(), o.GetName(), why, err),
					Fix:     fmt.Sprintf("check 'oc describe certificate %s -n %s' and the issuer", o.GetName(), o.GetNamespace()),
					Err:     err}
			}
		}
	}
	return err
}

// applyRetryingWebhook applies obj, retrying with backoff while the
// apiserver answers InternalError or ServiceUnavailable (an admission
// webhook not serving yet), for at most certRetry.
func applyRetryingWebhook(ctx context.Context, e *Env, id string, obj *unstructured.Unstructured) error {
	var last error
	// DelayFunc keeps retrying at the cap until rctx ends;
	// ExponentialBackoffWithContext would stop once the delay reached
	// the cap (wait.Backoff.Cap zeroes Steps), after about 15 s.
	backoff := wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 20, Cap: 15 * time.Second}
	rctx, cancel := context.WithTimeout(ctx, certRetry)
	defer cancel()
	err := backoff.DelayFunc().Until(rctx, true, false, func(ctx context.Context) (bool, error) {
		_, err := e.Clients.Apply(ctx, obj)
		switch {
		case err == nil:
			e.progress(id, "applied %s", kube.Describe(obj))
			return true, nil
		case apierrors.IsInternalError(err), apierrors.IsServiceUnavailable(err):
			last = err
			e.progress(id, "%s: the apiserver or an admission webhook is not ready, retrying: %v", kube.Describe(obj), err)
			return false, nil
		}
		return false, err
	})
	if err != nil && last != nil && (errors.Is(err, context.DeadlineExceeded) || wait.Interrupted(err)) {
		return fmt.Errorf("%w (still failing after %s of retries)", last, certRetry)
	}
	return err
}

// certificateRequestsOf lists the CertificateRequests cert-manager made for
// cert (annotation cert-manager.io/certificate-name), newest first.
func certificateRequestsOf(ctx context.Context, e *Env, cert *unstructured.Unstructured) []unstructured.Unstructured {
	items, err := listOptional(ctx, e.Clients, certificateRequestGVK, cert.GetNamespace(), "")
	if err != nil {
		return nil
	}
	var out []unstructured.Unstructured
	for _, it := range items {
		if it.GetAnnotations()["cert-manager.io/certificate-name"] == cert.GetName() {
			out = append(out, it)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		ti, tj := out[i].GetCreationTimestamp(), out[j].GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return tj.Before(&ti)
		}
		return out[i].GetName() > out[j].GetName()
	})
	return out
}

// certificateIssuance describes why cert is not issued: the newest
// CertificateRequest's Ready condition and any pending ACME Challenge for
// its names. Empty when nothing is known.
func certificateIssuance(ctx context.Context, e *Env, cert *unstructured.Unstructured) string {
	var parts []string
	if crs := certificateRequestsOf(ctx, e, cert); len(crs) > 0 {
		cr := crs[0]
		if c, ok := waiters.GetCondition(&cr, "Ready"); ok {
			parts = append(parts, fmt.Sprintf("CertificateRequest %s %s", cr.GetName(), c))
		}
	}
	names, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	challenges, _ := listOptional(ctx, e.Clients, challengeGVK, cert.GetNamespace(), "")
	for _, ch := range challenges {
		dns, _, _ := unstructured.NestedString(ch.Object, "spec", "dnsName")
		if !slices.Contains(names, dns) {
			continue
		}
		state, _, _ := unstructured.NestedString(ch.Object, "status", "state")
		reason, _, _ := unstructured.NestedString(ch.Object, "status", "reason")
		typ, _, _ := unstructured.NestedString(ch.Object, "spec", "type")
		if state != "valid" {
			parts = append(parts, fmt.Sprintf("Challenge %s (%s for %s) %s: %s", ch.GetName(), typ, dns, state, reason))
		}
	}
	return strings.Join(parts, "; ")
}

// watchCertificateRequests reports the state of cert's CertificateRequests
// as progress and sends a terminal failure (Ready=False with reason Failed,
// or Denied=True) to failed. It returns when ctx ends.
func watchCertificateRequests(ctx context.Context, e *Env, id string, cert *unstructured.Unstructured, failed chan<- error) {
	ri, _, err := e.Clients.Resource(certificateRequestGVK, cert.GetNamespace())
	if err != nil {
		return
	}
	lw := waiters.ListThenWatch(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	})
	last := ""
	_, _ = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		cr, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || ev.Type == watch.Deleted || cr.GetAnnotations()["cert-manager.io/certificate-name"] != cert.GetName() {
			return false, nil
		}
		c, ok := waiters.GetCondition(cr, "Ready")
		if !ok {
			return false, nil
		}
		if st := cr.GetName() + " " + c.String(); st != last {
			last = st
			e.progress(id, "CertificateRequest %s", st)
		}
		denied, _ := waiters.GetCondition(cr, "Denied")
		if (c.Status == "False" && c.Reason == "Failed") || denied.Status == "True" {
			select {
			case failed <- &Problem{
				Message: fmt.Sprintf("Certificate %s/%s cannot be issued: CertificateRequest %s %s", cert.GetNamespace(), cert.GetName(), cr.GetName(), c),
				Fix:     fmt.Sprintf("fix the issuer, then delete the request so cert-manager retries ('oc delete certificaterequest %s -n %s')", cr.GetName(), cr.GetNamespace())}:
			default:
			}
			return true, nil
		}
		return false, nil
	})
}

// applyAuthorinoTLS annotates the Authorino Service so OpenShift's service CA
// issues a serving certificate, then turns on Authorino's listener TLS with
// it (RHOAI MaaS docs "Configure Authorino TLS"; case B12). The Service is
// created by the Authorino operator, so the step waits for it first and
// never creates it (unblockAuthorinoService when the operator will not).
// After TLS is on, it waits for the Kuadrant operator to keep it on
// (waitTLSKept), applying it again when that operator reverted it.
//
// The same Authorino CR apply mounts OpenShift's service CA bundle
// (spec.volumes, merged with the items others put there:
// mergeVolumes); once the authorino-operator has mounted it in the
// Deployment, the step points SSL_CERT_FILE at it there and waits for the
// rollout: Authorino's HTTPS calls to maas-api (API key validation) trust
// the service CA only then (the upstream MaaS TLS guide's outbound flow,
// which RHOAI leaves to the installer).
func applyAuthorinoTLS(ctx context.Context, e *Env, s *Step) error {
	id := s.ID
	objs := e.objects(id)
	svc, authorino, deploy := objs[0], objs[1], objs[2]
	k := e.Inv.Kuadrant
	if err := unblockAuthorinoService(ctx, e, id, svc, authorino); err != nil {
		return err
	}
	if err := waiters.All(ctx, e.Clients, waiters.Target{GVK: serviceGVK, Namespace: svc.GetNamespace(), Name: svc.GetName(),
		OnChange: func(r waiters.Result) {
			e.progress(id, "waiting for Service %s/%s (created by the Authorino operator): %s", svc.GetNamespace(), svc.GetName(), r.Status)
		}}); err != nil {
		return err
	}
	if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{svc}); err != nil {
		return err
	}
	if err := waiters.All(ctx, e.Clients, waiters.Target{GVK: secretGVK, Namespace: k.Namespace, Name: k.AuthorinoCertSecret,
		OnChange: func(r waiters.Result) {
			e.progress(id, "waiting for the service CA to write Secret %s/%s: %s", k.Namespace, k.AuthorinoCertSecret, r.Status)
		}}); err != nil {
		return err
	}
	// The wait's last sight of the CR is the live CR whose volumes the
	// apply keeps (mergeVolumes): no read after it.
	live, err := waiters.For(ctx, e.Clients, waiters.Target{GVK: authorino.GroupVersionKind(), Namespace: authorino.GetNamespace(), Name: authorino.GetName()})
	if err != nil {
		return err
	}
	authorino = mergeVolumes(live, authorino)
	for attempt := 1; ; attempt++ {
		if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{authorino}); err != nil {
			return err
		}
		if err := waitReady(ctx, e, s, []*unstructured.Unstructured{authorino}); err != nil {
			return err
		}
		kept, err := waitTLSKept(ctx, e, id, authorino)
		if err != nil {
			return err
		}
		if kept {
			break
		}
		if attempt == maxTLSReverts {
			return fmt.Errorf("Authorino %s/%s: the Kuadrant operator turned listener TLS off again %d times after maasctl turned it on; check that nothing else manages the CR (oc get authorino %s -n %s --show-managed-fields), then run maasctl install again",
				authorino.GetNamespace(), authorino.GetName(), attempt, authorino.GetName(), authorino.GetNamespace())
		}
		e.progress(id, "the Kuadrant operator wrote listener TLS off again (its Authorino reconcile applies the TLS settings it last read, with force); applying TLS on again")
	}
	if err := waitCAMounted(ctx, e, id, objs[1], deploy); err != nil {
		return err
	}
	if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{deploy}); err != nil {
		return err
	}
	return waitReady(ctx, e, s, []*unstructured.Unstructured{deploy})
}

// caMounts returns the mountPath of each spec.volumes item of the Authorino
// CR cr (maasctl's rendered one).
func caMounts(cr *unstructured.Unstructured) []string {
	items, _, _ := unstructured.NestedSlice(cr.Object, "spec", "volumes", "items")
	return itemStrings(items, "mountPath")
}

// itemStrings returns the string field of each object of a list (items
// that are not objects, or lack the field, give none).
func itemStrings(items []any, field string) []string {
	var out []string
	for _, it := range items {
		if m, ok := it.(map[string]any); ok {
			if v, ok := m[field].(string); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// waitCAMounted waits until the Deployment deploy (as rendered: name and
// namespace) mounts every spec.volumes item of cr in its first container,
// as authorino-operator v0.21.0 does on its next reconcile of the CR
// (pkg/reconcilers/deployment_mutator.go AuthorinoDeployment,
// DeploymentVolumeMountsMutator): SSL_CERT_FILE set before then names a
// file the pod does not have yet.
func waitCAMounted(ctx context.Context, e *Env, id string, cr, deploy *unstructured.Unstructured) error {
	want := caMounts(cr)
	return waiters.All(ctx, e.Clients, waiters.Target{GVK: deploy.GroupVersionKind(), Namespace: deploy.GetNamespace(), Name: deploy.GetName(),
		Cond: func(u *unstructured.Unstructured) waiters.Result {
			if missing := missingMounts(u, want); len(missing) > 0 {
				return waiters.Result{Status: "waiting for the Authorino operator to mount " + strings.Join(missing, ", ")}
			}
			return waiters.Result{Done: true, Status: "service CA bundle mounted"}
		},
		OnChange: func(r waiters.Result) {
			e.progress(id, "Deployment %s/%s: %s", deploy.GetNamespace(), deploy.GetName(), r.Status)
		}})
}

// missingMounts returns the paths of want that the first container of the
// Deployment u does not mount.
func missingMounts(u *unstructured.Unstructured, want []string) []string {
	have := map[string]bool{}
	containers, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(containers) > 0 {
		c, _ := containers[0].(map[string]any)
		mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
		for _, p := range itemStrings(mounts, "mountPath") {
			have[p] = true
		}
	}
	var out []string
	for _, p := range want {
		if !have[p] {
			out = append(out, p)
		}
	}
	return out
}

// withLiveVolumes returns the Authorino CR cr with the spec.volumes items
// of the live CR that cr does not name kept before cr's own. The CRD
// declares spec.volumes.items without a list type, so an apply replaces
// the whole list: a volume someone else mounted would be lost. A CR that
// does not exist yet, or is not served, gets cr as it is.
func withLiveVolumes(ctx context.Context, e *Env, cr *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	live, err := e.Clients.Get(ctx, cr)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return cr, nil
	}
	if err != nil {
		return nil, err
	}
	return mergeVolumes(live, cr), nil
}

// mergeVolumes is withLiveVolumes on a live CR already read.
func mergeVolumes(live, cr *unstructured.Unstructured) *unstructured.Unstructured {
	ours, _, _ := unstructured.NestedSlice(cr.Object, "spec", "volumes", "items")
	theirs, _, _ := unstructured.NestedSlice(live.Object, "spec", "volumes", "items")
	named := map[string]bool{}
	for _, n := range itemStrings(ours, "name") {
		named[n] = true
	}
	var items []any
	for _, it := range theirs {
		if m, ok := it.(map[string]any); ok {
			if n, _ := m["name"].(string); !named[n] {
				items = append(items, it)
			}
		}
	}
	if len(items) == 0 {
		return cr
	}
	out := cr.DeepCopy()
	_ = unstructured.SetNestedSlice(out.Object, append(items, ours...), "spec", "volumes", "items")
	return out
}

// checkAuthorinoTLS is platform/authorino-tls's Check: the Service and the
// Authorino CR (its volumes merged as Apply writes them) as checkLive
// judges them, then the Deployment's container carrying each env variable
// the step sets, by name: the container's other variables are someone
// else's.
func checkAuthorinoTLS(ctx context.Context, e *Env, s *Step) (bool, string, error) {
	objs := e.objects(s.ID)
	cr, err := withLiveVolumes(ctx, e, objs[1])
	if err != nil {
		return false, "", err
	}
	if ok, msg, err := checkLive(ctx, e, s, []*unstructured.Unstructured{objs[0], cr}); err != nil || !ok {
		return ok, msg, err
	}
	deploy := objs[2]
	live, err := e.Clients.Get(ctx, deploy)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return false, kube.Describe(deploy) + " missing", nil
	}
	if err != nil {
		return false, "", err
	}
	if path := envDrift(live, deploy); path != "" {
		return false, differsAt(kube.Describe(deploy), path), nil
	}
	if r := s.readiness(deploy)(live); !r.Done {
		return false, fmt.Sprintf("%s not ready: %s", kube.Describe(deploy), r.Status), nil
	}
	return true, "", nil
}

// envDrift returns the path of the first env variable of want's containers
// that live's container of the same name lacks or sets otherwise; "" when
// every one is as wanted.
func envDrift(live, want *unstructured.Unstructured) string {
	liveEnv := map[string]map[string]any{}
	lc, _, _ := unstructured.NestedSlice(live.Object, "spec", "template", "spec", "containers")
	for _, c := range lc {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		env, _, _ := unstructured.NestedSlice(cm, "env")
		for _, v := range env {
			if vm, ok := v.(map[string]any); ok {
				n, _ := vm["name"].(string)
				liveEnv[name+"/"+n] = vm
			}
		}
	}
	wc, _, _ := unstructured.NestedSlice(want.Object, "spec", "template", "spec", "containers")
	for _, c := range wc {
		cm, _ := c.(map[string]any)
		name, _ := cm["name"].(string)
		env, _, _ := unstructured.NestedSlice(cm, "env")
		for _, v := range env {
			vm, _ := v.(map[string]any)
			n, _ := vm["name"].(string)
			path := fmt.Sprintf("spec.template.spec.containers[%s].env[%s]", name, n)
			got, ok := liveEnv[name+"/"+n]
			if !ok {
				return path
			}
			if p, ok := contains(got, vm, path); !ok {
				return p
			}
		}
	}
	return ""
}

// maxTLSReverts bounds how often platform/authorino-tls turns listener TLS
// on again after the Kuadrant operator turned it off.
const maxTLSReverts = 3

// tlsKeptWait bounds waitTLSKept's wait for the Kuadrant operator's apply.
const tlsKeptWait = 30 * time.Second

// kuadrantFieldManager is the server-side apply field manager of
// kuadrant-operator v1.5.2 (internal/controller/common.go FieldManagerName).
const kuadrantFieldManager = "kuadrant-operator"

// waitTLSKept waits until the Kuadrant operator has taken the listener TLS
// on into its own apply of the Authorino CR, and reports false when it
// wrote TLS off instead. kuadrant-operator v1.5.2's AuthorinoReconciler
// (internal/controller/authorino_reconciler.go) runs on every Authorino
// event and force-applies spec.listener.tls as its topology last saw it:
// a reconcile that read the CR before maasctl's change turns TLS off
// again. Once its apply carries enabled: true, the operator co-owns that
// value and keeps copying it. The operator creates the CR with a plain
// create and applies it only on a later reconcile (seen 7 s later with
// `make demo` on a loaded machine, when that first apply turned TLS off
// after this wait had taken the missing apply for "not Kuadrant's"), so a
// CR that operator created (a managedFields entry of its manager,
// byManager) waits for that apply too. A CR it never wrote (Authorino
// deployed otherwise, or by a Kuadrant operator that does not apply it)
// is done at once; one whose operator has not applied within tlsKeptWait
// counts as kept (it applies without force when the CR sets tracing, and
// cedes the field then).
func waitTLSKept(ctx context.Context, e *Env, id string, authorino *unstructured.Unstructured) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, tlsKeptWait)
	defer cancel()
	live, err := waiters.For(wctx, e.Clients, waiters.Target{GVK: authorino.GroupVersionKind(), Namespace: authorino.GetNamespace(), Name: authorino.GetName(),
		Cond: tlsKept, ManagedFields: true, OnChange: func(r waiters.Result) { e.progress(id, "%s", r.Status) }})
	// A timeout with the operator's apply still missing counts as kept: it
	// applies without force when the CR sets tracing, and cedes the field.
	if err != nil && !(waiters.IsTimeout(err) && ctx.Err() == nil) {
		return false, err
	}
	if err == nil {
		return !tlsOff(live), nil // the object the condition judged done
	}
	live, err = e.Clients.Get(ctx, authorino)
	if err != nil {
		return false, err
	}
	return !tlsOff(live), nil
}

// tlsKept is waitTLSKept's condition on the Authorino CR u: done when
// listener TLS is off, or on and either in the Kuadrant operator's apply
// or in a CR Kuadrant does not own.
func tlsKept(u *unstructured.Unstructured) waiters.Result {
	if tlsOff(u) {
		return waiters.Result{Done: true, Status: "listener TLS off"}
	}
	if o := ownsTLSEnabled(u, kuadrantFieldManager); o != nil && *o || o == nil && !byManager(u, kuadrantFieldManager) {
		return waiters.Result{Done: true, Status: "listener TLS on"}
	}
	return waiters.Result{Status: "waiting for the Kuadrant operator to apply the Authorino with listener TLS on"}
}

// tlsOff reports whether the Authorino CR u sets listener TLS off.
func tlsOff(u *unstructured.Unstructured) bool {
	on, found, _ := unstructured.NestedBool(u.Object, "spec", "listener", "tls", "enabled")
	return found && !on
}

// byManager reports whether manager has any managedFields entry in u
// (kuadrant-operator v1.5.2 creates the Authorino CR with a plain create:
// an Update entry of its manager).
func byManager(u *unstructured.Unstructured, manager string) bool {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager == manager {
			return true
		}
	}
	return false
}

// ownsTLSEnabled reports whether manager's Apply entry in u's managedFields
// holds spec.listener.tls.enabled: nil when manager has no Apply entry.
func ownsTLSEnabled(u *unstructured.Unstructured, manager string) *bool {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != manager || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var f map[string]any
		if err := json.Unmarshal(mf.FieldsV1.Raw, &f); err != nil {
			continue
		}
		_, found, _ := unstructured.NestedFieldNoCopy(f, "f:spec", "f:listener", "f:tls", "f:enabled")
		return &found
	}
	return nil
}

// reconcileRequestedAnnotation is the annotation unblockAuthorinoService
// writes on an Authorino CR to make its operator reconcile it; the value is
// the time of the request (RFC 3339).
const reconcileRequestedAnnotation = "maasctl.io/reconcile-requested-at"

// unblockAuthorinoService makes the Authorino operator re-create the
// authorization Service svc when nothing else will. authorino-operator
// v0.21.0 watches only Authorino CRs and the Deployments it owns
// (controllers/authorino_controller.go SetupWithManager), so a Service
// deleted after the operator reported the CR Ready comes back only on the
// CR's next change; and its preflight (installationPreflightCheck) creates
// no Service while listener TLS names a Secret that does not exist, which is
// the case once the service-CA Secret went with its Service (owner
// reference). With the Service missing and the operator done with the CR
// (Ready, or stopped at TlsSecretNotProvided):
//   - listener TLS on and its Secret missing: the listener TLS is applied
//     off; the rest of the step turns it on again once the service CA has
//     re-issued the Secret for the re-created Service;
//   - otherwise: the CR gets the annotation reconcileRequestedAnnotation.
//
// Nothing is written while the Service exists, the CR does not, or the
// operator has not finished its last reconcile (no Ready condition yet, or
// another reason).
func unblockAuthorinoService(ctx context.Context, e *Env, id string, svc, authorino *unstructured.Unstructured) error {
	missing := func(o *unstructured.Unstructured) (bool, error) {
		_, err := e.Clients.Get(ctx, o)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	}
	if gone, err := missing(svc); err != nil || !gone {
		return err
	}
	live, err := e.Clients.Get(ctx, authorino)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return nil
	}
	if err != nil {
		return err
	}
	rc, ok := waiters.GetCondition(live, "Ready")
	if !ok || (rc.Status != "True" && rc.Reason != "TlsSecretNotProvided") {
		return nil
	}
	// Read the Service again: the operator writes Ready after its Services.
	if gone, err := missing(svc); err != nil || !gone {
		return err
	}
	enabled, found, _ := unstructured.NestedBool(live.Object, "spec", "listener", "tls", "enabled")
	tlsOn := !found || enabled
	secretName, _, _ := unstructured.NestedString(live.Object, "spec", "listener", "tls", "certSecretRef", "name")
	secretGone := secretName == ""
	if secretName != "" {
		sec := &unstructured.Unstructured{}
		sec.SetGroupVersionKind(secretGVK)
		sec.SetNamespace(live.GetNamespace())
		sec.SetName(secretName)
		if secretGone, err = missing(sec); err != nil {
			return err
		}
	}
	where := fmt.Sprintf("Service %s/%s is missing and Authorino %s reports %s", svc.GetNamespace(), svc.GetName(), live.GetName(), rc.String())
	if tlsOn && secretGone {
		e.progress(id, "%s; its listener TLS names a Secret that does not exist, so the Authorino operator creates no Service: turning listener TLS off until the service CA re-issues the certificate", where)
		off := mergeVolumes(live, authorino).DeepCopy()
		if err := unstructured.SetNestedField(off.Object, false, "spec", "listener", "tls", "enabled"); err != nil {
			return err
		}
		return applyObjects(ctx, e, id, []*unstructured.Unstructured{off})
	}
	e.progress(id, "%s; the Authorino operator re-creates its Services only when the CR changes: annotating the CR (%s) so it reconciles", where, reconcileRequestedAnnotation)
	return annotate(ctx, e, live, map[string]string{reconcileRequestedAnnotation: time.Now().UTC().Format(time.RFC3339Nano)})
}

// monitoringDesired is the monitoring ConfigMap as applyMonitoring would
// write it: enableUserWorkload merged into the live config.yaml; nothing
// when it is on already.
func monitoringDesired(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
	_, cfg, err := monitoringConfig(ctx, e, s)
	if err != nil || cfg["enableUserWorkload"] == true {
		return nil, err
	}
	cfg["enableUserWorkload"] = true
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	cm := e.objects(s.ID)[0].DeepCopy()
	if err := unstructured.SetNestedField(cm.Object, string(b), "data", "config.yaml"); err != nil {
		return nil, err
	}
	return desiredOf([]*unstructured.Unstructured{cm}, true), nil
}

// renderMonitoring renders the ConfigMap with only enableUserWorkload,
// which install merges into the cluster's config.yaml instead.
func renderMonitoring(inv *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	if !inv.Monitoring.EnableUserWorkload || len(objs) == 0 {
		return nil, nil, nil
	}
	cm := objs[0].DeepCopy()
	if err := unstructured.SetNestedField(cm.Object, "enableUserWorkload: true\n", "data", "config.yaml"); err != nil {
		return nil, nil, err
	}
	return []*unstructured.Unstructured{cm}, []string{"install merges enableUserWorkload: true into the cluster's existing config.yaml;",
		"this ConfigMap replaces it: copy any other settings the cluster has into it."}, nil
}

// keepMonitoring keeps cluster-monitoring-config when it holds more than
// the enableUserWorkload maasctl wrote.
func keepMonitoring(e RecordEntry, live *unstructured.Unstructured) string {
	if e.Kind != "ConfigMap" {
		return ""
	}
	raw, _, _ := unstructured.NestedString(live.Object, "data", "config.yaml")
	cfg := map[string]any{}
	_ = yaml.Unmarshal([]byte(raw), &cfg)
	data, _ := live.Object["data"].(map[string]any)
	if len(cfg) != 1 || cfg["enableUserWorkload"] != true || len(data) != 1 {
		return "it now holds other monitoring settings"
	}
	return ""
}

// authorinoTLSDesired: both objects are created by the Kuadrant and
// Authorino operators; the step only adds TLS settings once they exist.
func authorinoTLSDesired(ctx context.Context, e *Env, s *Step) ([]DesiredObject, error) {
	var out []DesiredObject
	for _, o := range e.objects(s.ID) {
		live, err := e.Clients.Get(ctx, o)
		if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
			out = append(out, DesiredObject{Obj: o, Note: "cannot be known before the Kuadrant and Authorino operators create it (after step platform/kuadrant runs)"})
			continue
		} else if err != nil {
			return nil, err
		}
		if o.GetKind() == "Authorino" {
			o = mergeVolumes(live, o)
		}
		out = append(out, DesiredObject{Obj: o})
	}
	return out, nil
}

func renderAuthorinoTLS(inv *inventory.Inventory, _ assets.Facts, objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, []string, error) {
	k := inv.Kuadrant
	return objs, []string{"The Service, the Authorino CR and its Deployment are created by the Kuadrant and",
		"Authorino operators; these manifests only add the TLS settings and the service CA",
		"trust. Apply them with server-side apply once the objects exist, the Service file",
		"first: Authorino creates its Services only while its TLS Secret exists; the",
		"Deployment last, once the operator has mounted the CR's service CA volume in it.",
		"spec.volumes.items of the Authorino CR is one list: keep any volume it already has.",
		"The Kuadrant operator may turn listener TLS off again right after the apply (it",
		"force-applies what it last read of the CR); let the GitOps engine re-apply what",
		"drifted (Argo CD: automated sync with selfHeal), as install re-applies it.",
		"If Kuadrant " + k.Namespace + "/" + k.Name + " reports Ready=False reason MissingDependency (its operator started",
		"before Istio existed), restart the operator once, which install does itself:",
		"  oc delete pod -n " + k.OperatorNamespace + " -l " + k.OperatorSelector}, nil
}
