package steps

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

var (
	crdGVR        = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	secretGVK     = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	serviceGVK    = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
)

// Istio control plane that OpenShift's ingress operator deploys for Gateway
// API (OSSM 3, Istio CR "openshift-gateway"): its presence is the dependency
// the Kuadrant operator looks for at start (case B01).
const (
	istiodNamespace  = "openshift-ingress"
	istiodDeployment = "istiod-openshift-gateway"
)

func platformSteps(inv *inventory.Inventory) []*Step {
	gatewayAfter := []string{"platform/gatewayclass", "platform/certificate"}
	steps := []*Step{
		{
			ID: "platform/monitoring", Title: "User Workload Monitoring (cluster-monitoring-config)",
			Apply: applyMonitoring, Check: checkMonitoring,
		},
		plainStep("platform/gatewayclass", "GatewayClass "+inv.Gateway.ClassName+" (installs Service Mesh for Gateway API)"),
		{
			ID: "platform/certificate", Title: "Certificate for " + "the MaaS host (Secret " + inv.Gateway.CertSecret + ")",
			Apply: func(ctx context.Context, e *Env) error {
				if err := applyAndWait("platform/certificate")(ctx, e); err != nil {
					return err
				}
				return waiters.All(ctx, e.Clients, certSecretTarget(e))
			},
			Check: func(ctx context.Context, e *Env) (bool, string, error) {
				ok, msg, err := checkObjects("platform/certificate")(ctx, e)
				if !ok || err != nil {
					return ok, msg, err
				}
				s := certSecretTarget(e)
				if _, err := e.Clients.Kube.CoreV1().Secrets(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{}); err != nil {
					return false, "Secret " + s.Namespace + "/" + s.Name + " missing", nil
				}
				return true, "", nil
			},
		},
		withAfter(plainStep("platform/gateway", "Gateway "+inv.Gateway.Namespace+"/"+inv.Gateway.Name), gatewayAfter...),
	}
	if inv.Gateway.CreateRoute {
		steps = append(steps, withAfter(plainStep("platform/route", "passthrough Route "+inv.Gateway.RouteName), "platform/gateway"))
	}
	steps = append(steps,
		&Step{
			ID: "platform/kuadrant", Title: "Kuadrant " + inv.Kuadrant.Namespace + "/" + inv.Kuadrant.Name + " (operator restarted once if needed)",
			After: []string{"operators/rhcl", "platform/gateway"},
			Apply: applyKuadrant, Check: checkObjects("platform/kuadrant"),
		},
	)
	if inv.Kuadrant.AuthorinoTLS {
		steps = append(steps, &Step{
			ID: "platform/authorino-tls", Title: "Authorino TLS with a service-CA certificate",
			After: []string{"platform/kuadrant"},
			Apply: applyAuthorinoTLS, Check: checkObjects("platform/authorino-tls"),
		})
	}
	return steps
}

func plainStep(id, title string) *Step {
	return &Step{ID: id, Title: title, Apply: applyAndWait(id), Check: checkObjects(id)}
}

func withAfter(s *Step, after ...string) *Step {
	s.After = append(s.After, after...)
	return s
}

func certSecretTarget(e *Env) waiters.Target {
	return waiters.Target{GVK: secretGVK, Namespace: e.Inv.Gateway.Namespace, Name: e.Inv.Gateway.CertSecret}
}

// monitoringConfig returns the live cluster-monitoring-config ConfigMap (or
// nil) and its config.yaml parsed.
func monitoringConfig(ctx context.Context, e *Env) (*unstructured.Unstructured, map[string]any, error) {
	want := e.objects("platform/monitoring")[0]
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
func applyMonitoring(ctx context.Context, e *Env) error {
	_, cfg, err := monitoringConfig(ctx, e)
	if err != nil {
		return err
	}
	if cfg["enableUserWorkload"] == true {
		e.progress("platform/monitoring", "User Workload Monitoring already on")
		return nil
	}
	cfg["enableUserWorkload"] = true
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	cm := e.objects("platform/monitoring")[0].DeepCopy()
	if err := unstructured.SetNestedField(cm.Object, string(b), "data", "config.yaml"); err != nil {
		return err
	}
	_, err = e.Clients.Apply(ctx, cm)
	return err
}

func checkMonitoring(ctx context.Context, e *Env) (bool, string, error) {
	live, cfg, err := monitoringConfig(ctx, e)
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

// applyKuadrant applies the Kuadrant CR and waits for Ready. The Kuadrant
// operator checks for its Gateway API provider only when it starts; if it
// started before Istio existed, Kuadrant stays Ready=False with reason
// MissingDependency until the operator pod is restarted (case B01,
// Kuadrant/kuadrant-operator#1784). maasctl restarts it once, only after the
// Istio control plane exists, and judges by the condition reason, never by
// the message text.
func applyKuadrant(ctx context.Context, e *Env) error {
	const id = "platform/kuadrant"
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
	readyOrMissing := func(obj *unstructured.Unstructured) waiters.Result {
		c, ok := waiters.GetCondition(obj, "Ready")
		if !ok {
			return waiters.Result{Status: "no Ready condition yet"}
		}
		return waiters.Result{Done: c.Status == "True" || c.Reason == "MissingDependency", Status: c.String()}
	}
	t := target(kq, e, id)
	t.Cond = readyOrMissing
	obj, err := waiters.For(ctx, e.Clients, t)
	if err != nil {
		return err
	}
	if c, _ := waiters.GetCondition(obj, "Ready"); c.Status == "True" {
		return nil
	}
	e.progress(id, "Kuadrant reports MissingDependency: waiting for the Istio control plane (%s/%s) before restarting the Kuadrant operator", istiodNamespace, istiodDeployment)
	if err := waiters.All(ctx, e.Clients, waiters.Target{GVK: deploymentGVK, Namespace: istiodNamespace, Name: istiodDeployment}); err != nil {
		return fmt.Errorf("Kuadrant is MissingDependency and the Istio control plane never appeared: %w; check 'oc get gatewayclass %s' and 'oc get istio'", err, e.Inv.Gateway.ClassName)
	}
	k := e.Inv.Kuadrant
	e.progress(id, "restarting the Kuadrant operator (pods %s in %s)", k.OperatorSelector, k.OperatorNamespace)
	err = e.Clients.Kube.CoreV1().Pods(k.OperatorNamespace).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: k.OperatorSelector})
	if err != nil {
		return fmt.Errorf("restart Kuadrant operator (delete pods %s in %s): %w", k.OperatorSelector, k.OperatorNamespace, err)
	}
	if err := waitReady(ctx, e, id, []*unstructured.Unstructured{kq}); err != nil {
		if waiters.IsTimeout(err) {
			return fmt.Errorf("%w; the Kuadrant operator was restarted once and Kuadrant is still not Ready: check 'oc get kuadrant %s -n %s -o yaml' and the operator log ('oc logs -n %s -l %s')",
				err, k.Name, k.Namespace, k.OperatorNamespace, k.OperatorSelector)
		}
		return err
	}
	return nil
}

// applyAuthorinoTLS annotates the Authorino Service so OpenShift's service CA
// issues a serving certificate, then turns on Authorino's listener TLS with
// it (RHOAI MaaS docs "Configure Authorino TLS"; case B12). The Service is
// created by the Authorino operator, so the step waits for it first and
// never creates it.
func applyAuthorinoTLS(ctx context.Context, e *Env) error {
	const id = "platform/authorino-tls"
	objs := e.objects(id)
	svc, authorino := objs[0], objs[1]
	k := e.Inv.Kuadrant
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
	if err := waiters.All(ctx, e.Clients, waiters.Target{GVK: authorino.GroupVersionKind(), Namespace: authorino.GetNamespace(), Name: authorino.GetName()}); err != nil {
		return err
	}
	if err := applyObjects(ctx, e, id, []*unstructured.Unstructured{authorino}); err != nil {
		return err
	}
	return waitReady(ctx, e, id, []*unstructured.Unstructured{authorino})
}
