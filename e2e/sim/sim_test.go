package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/e2e/testenv"
)

// cluster is a local control plane with the simulators running on it.
type cluster struct {
	dyn  dynamic.Interface
	kube kubernetes.Interface
	cfg  *rest.Config
}

// startCluster starts the local control plane (with the default fixture)
// and the simulators, both stopped in t.Cleanup. It skips when the control
// plane binaries are not built, unless MAASCTL_REQUIRE_TESTENV=1.
//
// opts.Delay[OLM] goes to the control plane (the real OLM's operator pods
// turn Ready that long after they start); the rest to the simulators.
func startCluster(t *testing.T, opts Options) *cluster {
	t.Helper()
	olmDelay, delays := SplitOLMDelay(opts.Delay)
	opts.Delay = delays
	return startWith(t, testenv.Options{Logf: t.Logf, OperatorPodReadyDelay: olmDelay}, opts)
}

// startRealKuadrant is startCluster with the real Kuadrant, Authorino and
// Limitador operators and the Authorino server in the control plane
// (testenv Options.RealKuadrant), and Istio's CRDs for them.
func startRealKuadrant(t *testing.T, opts Options) *cluster {
	t.Helper()
	olmDelay, delays := SplitOLMDelay(opts.Delay)
	opts.Delay = delays
	crds, err := testenv.IstioCRDFile(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	opts.IstioCRDs = crds
	return startWith(t, testenv.Options{Logf: t.Logf, OperatorPodReadyDelay: olmDelay, RealKuadrant: true}, opts)
}

// startAPIServerOnly is startCluster without kube-controller-manager,
// kube-scheduler, kwok and OLM: for behaviour that lives in the API server
// alone (admission policies), started in a fraction of the time.
func startAPIServerOnly(t *testing.T, opts Options) *cluster {
	t.Helper()
	return startWith(t, testenv.Options{Logf: t.Logf, NoControllers: true, NoOLM: true}, opts)
}

func (c *cluster) apply(t *testing.T, g schema.GroupVersionResource, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	_, err := c.dyn.Resource(g).Namespace(u.GetNamespace()).Create(t.Context(), u, metav1.CreateOptions{FieldValidation: "Strict"})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create %s %s/%s: %v", g.Resource, u.GetNamespace(), u.GetName(), err)
	}
}

// phaseHistory records, from now on, every status.phase object ns/name of
// g is written with (one entry per write that changes it). The returned
// func waits up to settle for the last recorded phase to be last, then
// returns the history.
func (c *cluster) phaseHistory(t *testing.T, g schema.GroupVersionResource, ns, name string) func(settle time.Duration, last string) []string {
	t.Helper()
	w, err := c.dyn.Resource(g).Namespace(ns).Watch(t.Context(), metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatalf("watch %s %s/%s: %v", g.Resource, ns, name, err)
	}
	t.Cleanup(w.Stop)
	var (
		mu   sync.Mutex
		seen []string
	)
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			p := str(u, "status", "phase")
			mu.Lock()
			if p != "" && (len(seen) == 0 || seen[len(seen)-1] != p) {
				seen = append(seen, p)
			}
			mu.Unlock()
		}
	}()
	return func(settle time.Duration, last string) []string {
		deadline := time.Now().Add(settle)
		for {
			mu.Lock()
			out := slices.Clone(seen)
			mu.Unlock()
			if (len(out) > 0 && out[len(out)-1] == last) || time.Now().After(deadline) {
				return out
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// nameListWatch lists and watches the one object ns/name of g.
func (c *cluster) nameListWatch(g schema.GroupVersionResource, ns, name string) *cache.ListWatch {
	ri := c.dyn.Resource(g).Namespace(ns)
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (kwatch.Interface, error) {
			o.FieldSelector = sel
			return ri.Watch(ctx, o)
		},
	}
}

// waitScale multiplies every waitFor timeout. The timeouts are bounds on
// "this never happens", not speed targets (those are benchmarks): the real
// OLM and the simulators share two cores with the e2e package's control
// planes in make test (CI of stop 39: a wait ran out while an InstallPlan
// of rhcl-operator.v1.4.1 still had every step Unknown).
const waitScale = 3

// waitFor watches one object until ok accepts it, failing t after
// timeout (times waitScale) with the last state seen.
func (c *cluster) waitFor(t *testing.T, g schema.GroupVersionResource, ns, name string, timeout time.Duration, what string, ok func(*unstructured.Unstructured) bool) *unstructured.Unstructured {
	t.Helper()
	timeout *= waitScale
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	lw := c.nameListWatch(g, ns, name)
	var last *unstructured.Unstructured
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev kwatch.Event) (bool, error) {
		u, isU := ev.Object.(*unstructured.Unstructured)
		if !isU || ev.Type == kwatch.Deleted {
			return false, nil
		}
		last = u
		return ok(u), nil
	})
	if err != nil {
		state := "not found"
		if last != nil {
			st, _, _ := unstructured.NestedFieldNoCopy(last.Object, "status")
			state = fmt.Sprintf("status %v", st)
		}
		t.Fatalf("%s %s/%s: %s not reached within %s (%v); last %s", g.Resource, ns, name, what, timeout, err, state)
	}
	return last
}

func exists(*unstructured.Unstructured) bool { return true }

func hasCondition(typ, status, reason string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		c := findCondition(u, typ)
		return c != nil && c["status"] == status && (reason == "" || c["reason"] == reason)
	}
}

func fieldIs(want string, path ...string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool { return str(u, path...) == want }
}

// subscribe creates a Subscription (and, when ogTargets is not nil, the
// namespace and an OperatorGroup) the way maasctl's operators steps do.
func (c *cluster) subscribe(t *testing.T, ns, pkg, channel, source string, ogTargets []any) {
	t.Helper()
	if ogTargets != nil {
		c.apply(t, gvrNamespace, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
		spec := map[string]any{}
		if len(ogTargets) > 0 {
			spec["targetNamespaces"] = ogTargets
		}
		c.apply(t, gvrOperatorGroup, map[string]any{
			"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
			"metadata": map[string]any{"name": pkg, "namespace": ns}, "spec": spec,
		})
	}
	spec := map[string]any{
		"name": pkg, "channel": channel, "source": source, "sourceNamespace": "openshift-marketplace",
		"installPlanApproval": "Automatic",
	}
	if pkg == "rhcl-operator" {
		// As maasctl's operators/rhcl step sets it (inventory
		// EnvGatewayControllerNames): the real Kuadrant operator enforces
		// policies only on Gateways of a class whose controller it knows
		// as Istio's; the OpenShift class's is not among its defaults.
		spec["config"] = map[string]any{"env": []any{
			map[string]any{"name": "ISTIO_GATEWAY_CONTROLLER_NAMES", "value": openshiftGatewayController},
		}}
	}
	c.apply(t, gvrSubscription, map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
		"metadata": map[string]any{"name": pkg, "namespace": ns},
		"spec":     spec,
	})
}

// waitInstalled waits for what maasctl's OLM waiter checks: Subscription
// AtLatestKnown with installedCSV, its InstallPlan Complete, the CSV
// Succeeded and every owned CRD Established.
func (c *cluster) waitInstalled(t *testing.T, ns, sub, csv string) *unstructured.Unstructured {
	t.Helper()
	s := c.waitFor(t, gvrSubscription, ns, sub, 2*time.Minute, "state AtLatestKnown", func(u *unstructured.Unstructured) bool {
		return str(u, "status", "state") == "AtLatestKnown" && str(u, "status", "installedCSV") == csv
	})
	c.waitFor(t, gvrInstallPlan, ns, str(s, "status", "installPlanRef", "name"), time.Minute, "phase Complete", fieldIs("Complete", "status", "phase"))
	got := c.waitFor(t, gvrCSV, ns, csv, 2*time.Minute, "phase Succeeded", fieldIs("Succeeded", "status", "phase"))
	owned := sliceOf(got, "spec", "customresourcedefinitions", "owned")
	if len(owned) == 0 {
		t.Fatalf("csv %s owns no CRDs", csv)
	}
	for _, o := range owned {
		c.waitFor(t, gvrCRD, "", mstr(o.(map[string]any), "name"), time.Minute, "Established", hasCondition("Established", "True", ""))
	}
	return got
}

// operatorPods lists the running pods with the Kuadrant operator labels.
func (c *cluster) operatorPods(t *testing.T) []corev1.Pod {
	t.Helper()
	l, err := c.kube.CoreV1().Pods("openshift-operators").List(t.Context(), metav1.ListOptions{LabelSelector: "app=kuadrant,control-plane=controller-manager"})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// TestRHCLSubscription covers the OLM happy path for RHCL: the real OLM
// installs the generated bundle, its CRDs and the operator Deployment. What
// the Kuadrant operator then does (MissingDependency until its pod is
// replaced, case B01; the Authorino CR) is the real operator's, proven in
// e2e TestRealKuadrantOperator; no simulator here writes it.
func TestRHCLSubscription(t *testing.T) {
	c := startCluster(t, Options{})
	c.subscribe(t, "openshift-operators", "rhcl-operator", "stable-1.4", "redhat-operators", nil)
	csv := c.waitInstalled(t, "openshift-operators", "rhcl-operator", "rhcl-operator.v1.4.1")
	if v := str(csv, "spec", "version"); v != "1.4.1" {
		t.Errorf("csv spec.version %q, want 1.4.1", v)
	}
	for _, crd := range []string{"kuadrants.kuadrant.io", "authpolicies.kuadrant.io", "tokenratelimitpolicies.kuadrant.io", "authorinos.operator.authorino.kuadrant.io"} {
		c.waitFor(t, gvrCRD, "", crd, time.Minute, "Established", hasCondition("Established", "True", ""))
	}
	c.waitFor(t, gvrDeployment, "openshift-operators", "kuadrant-operator-controller-manager", time.Minute, "Available", hasCondition("Available", "True", ""))
	if n := len(c.operatorPods(t)); n != 1 {
		t.Fatalf("%d running kuadrant operator pods, want 1", n)
	}
}

// installRHOAI subscribes rhods-operator the way maasctl does and waits
// until the DSC CRD is served.
func (c *cluster) installRHOAI(t *testing.T, version string) {
	t.Helper()
	c.subscribe(t, "redhat-ods-operator", "rhods-operator", "stable-"+version, "redhat-operators", []any{})
	csv := map[string]string{RHOAI34: "rhods-operator.3.4.4", RHOAI35: "rhods-operator.3.5.0"}[version]
	c.waitInstalled(t, "redhat-ods-operator", "rhods-operator", csv)
	c.waitFor(t, gvrDSCI, "", defaultDSCI, time.Minute, "phase Ready", fieldIs(phaseReady, "status", "phase"))
}

func dsc(components map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "datasciencecluster.opendatahub.io/v2", "kind": "DataScienceCluster",
		"metadata": map[string]any{"name": "default-dsc"},
		"spec":     map[string]any{"components": components},
	}
}

func managed() map[string]any { return map[string]any{"managementState": "Managed"} }

// TestDSC35IgnoresKserveModelsAsService: on 3.5 only
// aigateway.modelsAsAService enables MaaS; kserve.modelsAsService Managed
// alone must not deploy maas-api or register the MaaS CRDs.
func TestDSC35IgnoresKserveModelsAsService(t *testing.T) {
	c := startCluster(t, Options{RHOAIVersion: RHOAI35})
	c.installRHOAI(t, RHOAI35)
	c.apply(t, gvrDSC, dsc(map[string]any{
		"dashboard": managed(),
		"kserve":    map[string]any{"managementState": "Managed", "modelsAsService": managed()},
	}))
	// Dashboard and kserve settle first; then the DSC must be Ready without MaaS.
	d := c.waitFor(t, gvrDSC, "", "default-dsc", 2*time.Minute, "DashboardReady and KserveReady", func(u *unstructured.Unstructured) bool {
		return conditionTrue(u, "DashboardReady") && conditionTrue(u, "KserveReady")
	})
	if p := str(d, "status", "phase"); p != phaseReady {
		t.Errorf("phase %q, want %q; Ready: %v", p, phaseReady, findCondition(d, "Ready"))
	}
	if st := findCondition(d, "ModelsAsAServiceReady"); st == nil || st["status"] != "False" || st["reason"] != "Removed" {
		t.Errorf("ModelsAsAServiceReady = %v, want False/Removed", st)
	}
	for _, crd := range []string{"maasmodelrefs.maas.opendatahub.io", "maassubscriptions.maas.opendatahub.io"} {
		if _, err := c.dyn.Resource(gvrCRD).Get(t.Context(), crd, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("crd %s: got err %v, want NotFound", crd, err)
		}
	}
	if _, err := c.kube.AppsV1().Deployments(aiGatewayInfraNS).Get(t.Context(), maasAPIDeployment, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("deployment %s/%s: got err %v, want NotFound", aiGatewayInfraNS, maasAPIDeployment, err)
	}
	c.waitFor(t, gvrDashboardConfig, defaultAppsNamespace, dashboardConfigName, time.Minute, "exists", exists)
}

// TestDSC35MaaSNeedsDBSecret: with aigateway.modelsAsAService Managed, MaaS
// registers its CRDs but maas-api waits for Secret maas-db-config (case B06).
func TestDSC35MaaSNeedsDBSecret(t *testing.T) {
	c := startCluster(t, Options{RHOAIVersion: RHOAI35})
	c.installRHOAI(t, RHOAI35)
	c.apply(t, gvrDSC, dsc(map[string]any{
		"dashboard": managed(),
		"kserve":    managed(),
		"aigateway": map[string]any{"managementState": "Managed", "modelsAsAService": managed()},
	}))
	d := c.waitFor(t, gvrDSC, "", "default-dsc", 2*time.Minute, "MaaS prerequisites reported",
		hasCondition("ModelsAsAServiceReady", "False", "PrerequisitesMissing"))
	if msg := mstr(findCondition(d, "ModelsAsAServiceReady"), "message"); !strings.Contains(msg, "maas-db-config") || !strings.Contains(msg, aiGatewayInfraNS) {
		t.Errorf("message %q does not name the secret and its namespace", msg)
	}
	if p := str(d, "status", "phase"); p != phaseNotReady {
		t.Errorf("phase %q, want %q", p, phaseNotReady)
	}
	for _, crd := range []string{"maasmodelrefs.maas.opendatahub.io", "externalproviders.inference.opendatahub.io"} {
		c.waitFor(t, gvrCRD, "", crd, time.Minute, "Established", hasCondition("Established", "True", ""))
	}
	if _, err := c.kube.AppsV1().Deployments(aiGatewayInfraNS).Get(t.Context(), maasAPIDeployment, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("maas-api exists before its database secret: %v", err)
	}
}

func TestConditionsKeepTransitionTime(t *testing.T) {
	old := []any{map[string]any{"type": "Ready", "status": "False", "reason": "A", "message": "", "lastTransitionTime": "2020-01-01T00:00:00Z"}}
	tests := []struct {
		name      string
		want      condition
		keepsTime bool
	}{
		{name: "same status, new reason", want: cond("Ready", false, "B", "x"), keepsTime: true},
		{name: "status flips", want: cond("Ready", true, "Ready", ""), keepsTime: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := conditions(old, tt.want)[0].(map[string]any)
			if kept := got["lastTransitionTime"] == "2020-01-01T00:00:00Z"; kept != tt.keepsTime {
				t.Fatalf("lastTransitionTime %v, keep=%v", got["lastTransitionTime"], tt.keepsTime)
			}
			if got["reason"] != tt.want.Reason {
				t.Errorf("reason %v, want %s", got["reason"], tt.want.Reason)
			}
		})
	}
}

func TestHostsIntersect(t *testing.T) {
	tests := []struct {
		name string
		a, b string
		want bool
	}{
		{name: "equal", a: "maas.apps.x", b: "maas.apps.x", want: true},
		{name: "wildcard listener", a: "*.apps.x", b: "maas.apps.x", want: true},
		{name: "wildcard route", a: "maas.apps.x", b: "*.apps.x", want: true},
		{name: "wildcard does not match apex", a: "*.apps.x", b: "apps.x", want: false},
		{name: "different", a: "maas.apps.x", b: "api.apps.x", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := hostsIntersect(tt.a, tt.b); got != tt.want {
				t.Fatalf("hostsIntersect(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
			}
		})
	}
}

func TestOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/olm", 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{name: "defaults", opts: Options{CRDDir: dir}},
		{name: "bad version", opts: Options{CRDDir: dir, RHOAIVersion: "3.6"}, wantErr: "rhoai version"},
		{name: "unknown delay", opts: Options{CRDDir: dir, Delay: map[string]time.Duration{"dscc": time.Second}}, wantErr: "unknown controller"},
		{name: "negative delay", opts: Options{CRDDir: dir, Delay: map[string]time.Duration{DSC: -time.Second}}, wantErr: "negative"},
		{name: "no crd dir", opts: Options{CRDDir: dir + "/nope"}, wantErr: "no olm/ folder"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := tt.opts.withDefaults()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.RHOAIVersion != RHOAI35 || o.Logger == nil {
					t.Errorf("defaults not applied: %+v", o)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// TestOLMFailureModes covers case B02 against one cluster: Manual approval,
// a missing OperatorGroup, a second OperatorGroup after install, and an
// unknown channel.
func TestOLMFailureModes(t *testing.T) {
	c := startCluster(t, Options{})

	t.Run("manual approval waits for approved", func(t *testing.T) {
		c.apply(t, gvrNamespace, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "lws-manual"}})
		c.apply(t, gvrOperatorGroup, map[string]any{
			"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
			"metadata": map[string]any{"name": "og", "namespace": "lws-manual"},
			"spec":     map[string]any{"targetNamespaces": []any{"lws-manual"}},
		})
		c.apply(t, gvrSubscription, map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
			"metadata": map[string]any{"name": "leader-worker-set", "namespace": "lws-manual"},
			"spec": map[string]any{"name": "leader-worker-set", "channel": "stable-v1.0", "source": "redhat-operators",
				"sourceNamespace": "openshift-marketplace", "installPlanApproval": "Manual"},
		})
		s := c.waitFor(t, gvrSubscription, "lws-manual", "leader-worker-set", time.Minute, "InstallPlanPending RequiresApproval",
			hasCondition("InstallPlanPending", "True", "RequiresApproval"))
		if st := str(s, "status", "state"); st != "UpgradePending" {
			t.Errorf("state %q, want UpgradePending", st)
		}
		ip := str(s, "status", "installPlanRef", "name")
		c.waitFor(t, gvrInstallPlan, "lws-manual", ip, time.Minute, "RequiresApproval", fieldIs("RequiresApproval", "status", "phase"))
		if _, err := c.dyn.Resource(gvrCSV).Namespace("lws-manual").Get(t.Context(), "leader-worker-set.v1.0.0", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("csv exists before approval: %v", err)
		}
		_, err := c.dyn.Resource(gvrInstallPlan).Namespace("lws-manual").Patch(t.Context(), ip, "application/merge-patch+json",
			[]byte(`{"spec":{"approved":true}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.waitInstalled(t, "lws-manual", "leader-worker-set", "leader-worker-set.v1.0.0")
	})

	t.Run("second operatorgroup fails the csv", func(t *testing.T) {
		c.apply(t, gvrOperatorGroup, map[string]any{
			"apiVersion": "operators.coreos.com/v1", "kind": "OperatorGroup",
			"metadata": map[string]any{"name": "og-b", "namespace": "lws-manual"},
		})
		c.waitFor(t, gvrCSV, "lws-manual", "leader-worker-set.v1.0.0", time.Minute, "Failed TooManyOperatorGroups",
			func(u *unstructured.Unstructured) bool {
				return str(u, "status", "phase") == "Failed" && str(u, "status", "reason") == "TooManyOperatorGroups"
			})
		if err := c.dyn.Resource(gvrOperatorGroup).Namespace("lws-manual").Delete(t.Context(), "og-b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitFor(t, gvrCSV, "lws-manual", "leader-worker-set.v1.0.0", time.Minute, "Succeeded again", fieldIs("Succeeded", "status", "phase"))
	})

	t.Run("no operatorgroup: nothing is resolved", func(t *testing.T) {
		// The real catalog operator (v0.46.0) does not resolve a
		// namespace without an OperatorGroup: the Subscription gets its
		// catalog health and nothing else, and no InstallPlan is made.
		// (The simulated OLM this replaces made a plan that stayed
		// Installing with Installed=False; that was not what OLM does.)
		c.apply(t, gvrNamespace, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": "no-og"}})
		c.apply(t, gvrSubscription, map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
			"metadata": map[string]any{"name": "leader-worker-set", "namespace": "no-og"},
			"spec":     map[string]any{"name": "leader-worker-set", "channel": "stable-v1.0", "source": "redhat-operators", "sourceNamespace": "openshift-marketplace"},
		})
		c.waitFor(t, gvrSubscription, "no-og", "leader-worker-set", time.Minute, "catalogHealth", func(u *unstructured.Unstructured) bool {
			return len(sliceOf(u, "status", "catalogHealth")) > 0
		})
		time.Sleep(5 * time.Second) // a resolution would have made its plan by now (the other subtests: < 5 s)
		s, err := c.dyn.Resource(gvrSubscription).Namespace("no-og").Get(t.Context(), "leader-worker-set", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if v := str(s, "status", "installPlanRef", "name") + str(s, "status", "currentCSV"); v != "" {
			t.Errorf("subscription without an OperatorGroup was resolved: installPlanRef/currentCSV %q", v)
		}
		ips, err := c.dyn.Resource(gvrInstallPlan).Namespace("no-og").List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(ips.Items) != 0 {
			t.Errorf("%d InstallPlans in a namespace without an OperatorGroup, want 0", len(ips.Items))
		}
	})

	t.Run("unknown channel fails resolution", func(t *testing.T) {
		c.apply(t, gvrSubscription, map[string]any{
			"apiVersion": "operators.coreos.com/v1alpha1", "kind": "Subscription",
			"metadata": map[string]any{"name": "rhods-operator", "namespace": "openshift-operators"},
			"spec":     map[string]any{"name": "rhods-operator", "channel": "stable-3.9", "source": "redhat-operators", "sourceNamespace": "openshift-marketplace"},
		})
		s := c.waitFor(t, gvrSubscription, "openshift-operators", "rhods-operator", time.Minute, "ResolutionFailed",
			hasCondition("ResolutionFailed", "True", "ConstraintsNotSatisfiable"))
		if msg := mstr(findCondition(s, "ResolutionFailed"), "message"); !strings.Contains(msg, "stable-3.9") {
			t.Errorf("message %q does not name the channel", msg)
		}
	})
}

// TestInstallContractFlow walks the writes and waits of maasctl's default
// install (/tmp/helpers/INSTALL-CONTRACT.md) against the simulators, in the
// documented order, with plain creates standing in for maasctl.
func TestInstallContractFlow(t *testing.T) {
	// The real Kuadrant, Authorino and Limitador operators and the
	// Authorino server: the MaaS subscription must not report Active
	// before the real Kuadrant accepted its policy.
	c := startRealKuadrant(t, Options{})
	const (
		dbNS     = "rhoai-maas-db"
		modelNS  = "llm-coding-assistant"
		host     = "maas.apps.openshift.example.com"
		password = "s3cr3t-P@ss"
	)
	ns := func(name string) {
		c.apply(t, gvrNamespace, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": name}})
	}

	t.Run("operators", func(t *testing.T) {
		c.subscribe(t, "openshift-operators", "cloudnative-pg", "stable-v1", "certified-operators", nil)
		c.subscribe(t, "openshift-operators", "rhcl-operator", "stable-1.4", "redhat-operators", nil)
		c.subscribe(t, "openshift-lws-operator", "leader-worker-set", "stable-v1.0", "redhat-operators", []any{"openshift-lws-operator"})
		c.subscribe(t, "redhat-ods-operator", "rhods-operator", "stable-3.5", "redhat-operators", []any{})
		c.waitInstalled(t, "openshift-operators", "cloudnative-pg", "cloudnative-pg.v1.30.0")
		c.waitInstalled(t, "openshift-operators", "rhcl-operator", "rhcl-operator.v1.4.1")
		c.waitInstalled(t, "openshift-lws-operator", "leader-worker-set", "leader-worker-set.v1.0.0")
		c.waitInstalled(t, "redhat-ods-operator", "rhods-operator", "rhods-operator.3.5.0")
		c.apply(t, gvrLWSOperator, map[string]any{
			"apiVersion": "operator.openshift.io/v1", "kind": "LeaderWorkerSetOperator",
			"metadata": map[string]any{"name": "cluster"}, "spec": map[string]any{"managementState": "Managed"},
		})
		c.waitFor(t, gvrLWSOperator, "", "cluster", time.Minute, "Available", hasCondition("Available", "True", ""))
	})

	t.Run("database", func(t *testing.T) {
		ns(dbNS)
		_, err := c.kube.CoreV1().Secrets(dbNS).Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "maas-postgres-secret"},
			Type:       corev1.SecretTypeBasicAuth,
			StringData: map[string]string{"username": "maas", "password": password},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.apply(t, gvrCNPGCluster, map[string]any{
			"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
			"metadata": map[string]any{"name": "maas-postgres", "namespace": dbNS},
			"spec": map[string]any{
				"instances":  int64(1),
				"storage":    map[string]any{"size": "5Gi"},
				"postgresql": map[string]any{"parameters": map[string]any{"max_connections": "100"}},
				"bootstrap": map[string]any{"initdb": map[string]any{
					"database": "maas", "owner": "maas", "secret": map[string]any{"name": "maas-postgres-secret"},
				}},
			},
		})
		cl := c.waitFor(t, gvrCNPGCluster, dbNS, "maas-postgres", time.Minute, "Ready ClusterIsReady", hasCondition("Ready", "True", "ClusterIsReady"))
		if p := str(cl, "status", "phase"); p != cnpgPhaseHealthy {
			t.Errorf("phase %q, want %q", p, cnpgPhaseHealthy)
		}
		c.waitFor(t, gvrService, dbNS, "maas-postgres-rw", time.Minute, "exists", exists)
		if _, err := c.kube.CoreV1().Secrets(dbNS).Get(t.Context(), "maas-postgres-app", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("maas-postgres-app: err %v, want NotFound (custom initdb secret, case B07)", err)
		}
	})

	t.Run("platform", func(t *testing.T) {
		c.apply(t, gvrGatewayClass, map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
			"metadata": map[string]any{"name": "openshift-default"},
			"spec":     map[string]any{"controllerName": openshiftGatewayController},
		})
		c.waitFor(t, gvrGatewayClass, "", "openshift-default", time.Minute, "Accepted", hasCondition("Accepted", "True", "Accepted"))
		c.apply(t, gvrGateway, map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"name": "maas-default-gateway", "namespace": "openshift-ingress",
				"annotations": map[string]any{serviceTypeAnnotation: "ClusterIP"}},
			"spec": map[string]any{
				"gatewayClassName": "openshift-default",
				"listeners": []any{map[string]any{
					"name": "https", "port": int64(443), "protocol": "HTTPS", "hostname": host,
					"tls":           map[string]any{"mode": "Terminate", "certificateRefs": []any{map[string]any{"name": "maas-gateway-tls"}}},
					"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}},
				}},
			},
		})
		// Case B13: until the Certificate's Secret exists the listener is
		// unresolved.
		gw := c.waitFor(t, gvrGateway, "openshift-ingress", "maas-default-gateway", time.Minute, "Programmed=False",
			hasCondition("Programmed", "False", "Invalid"))
		l := sliceOf(gw, "status", "listeners")[0].(map[string]any)
		if rc := conditionIn(l["conditions"], "ResolvedRefs"); rc["reason"] != "InvalidCertificateRef" {
			t.Errorf("listener ResolvedRefs %v, want reason InvalidCertificateRef", rc)
		}
		c.apply(t, gvrCertificate, map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
			"metadata": map[string]any{"name": "maas-default-gateway-cert", "namespace": "openshift-ingress"},
			"spec": map[string]any{
				"secretName": "maas-gateway-tls", "dnsNames": []any{host},
				"issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "letsencrypt-production"},
			},
		})
		c.waitFor(t, gvrCertificate, "openshift-ingress", "maas-default-gateway-cert", time.Minute, "Ready", hasCondition("Ready", "True", "Ready"))
		gw = c.waitFor(t, gvrGateway, "openshift-ingress", "maas-default-gateway", time.Minute, "Programmed", hasCondition("Programmed", "True", "Programmed"))
		if len(sliceOf(gw, "status", "addresses")) == 0 {
			t.Errorf("gateway has no addresses")
		}
		svc := c.waitFor(t, gvrService, "openshift-ingress", "maas-default-gateway-openshift-default", time.Minute, "exists", exists)
		if typ := str(svc, "spec", "type"); typ != "ClusterIP" {
			t.Errorf("gateway service type %q, want ClusterIP", typ)
		}
		// Other controllers add conditions to the Gateway and its
		// listeners (the Kuadrant operator its kuadrant.io/*PolicyAffected
		// ones; the real one, running here, removes any of those no policy
		// backs, so the condition written here is of another writer's
		// type). The gateway controller keeps them, as Istio does, when it
		// reconciles the Gateway again (here: for an annotation change),
		// instead of stripping them each time and fighting their writers.
		// The real operator's own condition is checked below, once the
		// MaaS Gateway AuthPolicy is enforced.
		const foreign = "example.com/PolicyAffected"
		affected := map[string]any{"type": foreign, "status": "True", "reason": "Accepted",
			"message":            "Object affected by a policy of another controller",
			"lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": gw.GetGeneration()}
		st := gw.DeepCopy()
		if err := unstructured.SetNestedSlice(st.Object, append(sliceOf(st, "status", "conditions"), affected), "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		ls := sliceOf(st, "status", "listeners")
		l0 := ls[0].(map[string]any)
		l0["conditions"] = append(l0["conditions"].([]any), runtime.DeepCopyJSONValue(affected))
		if err := unstructured.SetNestedSlice(st.Object, ls, "status", "listeners"); err != nil {
			t.Fatal(err)
		}
		gws := c.dyn.Resource(gvrGateway).Namespace("openshift-ingress")
		if _, err := gws.UpdateStatus(t.Context(), st, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := gws.Patch(t.Context(), "maas-default-gateway", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"example.com/poke":"1"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			live, err := gws.Get(t.Context(), "maas-default-gateway", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			lc := sliceOf(live, "status", "listeners")[0].(map[string]any)["conditions"]
			if findCondition(live, foreign) == nil || conditionIn(lc, foreign) == nil {
				t.Fatalf("the gateway controller removed another controller's %s condition (Gateway %v, listener %v)",
					foreign, sliceOf(live, "status", "conditions"), lc)
			}
			if findCondition(live, "Programmed") == nil {
				t.Fatalf("Gateway lost its Programmed condition: %v", sliceOf(live, "status", "conditions"))
			}
		}
		c.apply(t, gvrRoute, map[string]any{
			"apiVersion": "route.openshift.io/v1", "kind": "Route",
			"metadata": map[string]any{"name": "maas-default-gateway-https", "namespace": "openshift-ingress"},
			"spec": map[string]any{
				"host": host,
				"to":   map[string]any{"kind": "Service", "name": "maas-default-gateway-openshift-default"},
				"port": map[string]any{"targetPort": "https"},
				"tls":  map[string]any{"termination": "passthrough"},
			},
		})
		c.waitFor(t, gvrRoute, "openshift-ingress", "maas-default-gateway-https", time.Minute, "Admitted", func(u *unstructured.Unstructured) bool {
			in := sliceOf(u, "status", "ingress")
			return len(in) > 0 && conditionIn(in[0].(map[string]any)["conditions"], "Admitted")["status"] == "True"
		})

		ns("kuadrant-system")
		c.apply(t, gvrKuadrant, map[string]any{
			"apiVersion": "kuadrant.io/v1beta1", "kind": "Kuadrant",
			"metadata": map[string]any{"name": "kuadrant", "namespace": "kuadrant-system"},
		})
		// The operator pod started before Istio: one restart is needed (B01).
		c.waitFor(t, gvrKuadrant, "kuadrant-system", "kuadrant", time.Minute, "MissingDependency", hasCondition("Ready", "False", "MissingDependency"))
		for _, p := range c.operatorPods(t) {
			if err := c.kube.CoreV1().Pods("openshift-operators").Delete(t.Context(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		c.waitFor(t, gvrKuadrant, "kuadrant-system", "kuadrant", 2*time.Minute, "Ready", hasCondition("Ready", "True", "Ready"))
		c.waitFor(t, gvrService, "kuadrant-system", "authorino-authorino-authorization", time.Minute, "exists", exists)
		_, err := c.kube.CoreV1().Services("kuadrant-system").Patch(t.Context(), "authorino-authorino-authorization", "application/merge-patch+json",
			[]byte(`{"metadata":{"annotations":{"service.beta.openshift.io/serving-cert-secret-name":"authorino-server-cert"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.waitFor(t, gvrSecret, "kuadrant-system", "authorino-server-cert", time.Minute, "exists", exists)
		// The real kuadrant-operator force-applies spec.listener.tls as its
		// last read had it (docs/findings.md, finding 8): a reconcile that read the CR
		// before the patch turns TLS off again, and RHOAI then finds no
		// Authorino with TLS (seen in a whole-package run). Like
		// platform/authorino-tls, the flow waits until that operator's own
		// apply carries TLS on, and patches it on again if it was reverted.
		for attempt := 1; ; attempt++ {
			_, err = c.dyn.Resource(gvrAuthorino).Namespace("kuadrant-system").Patch(t.Context(), "authorino", "application/merge-patch+json",
				[]byte(`{"spec":{"listener":{"tls":{"enabled":true,"certSecretRef":{"name":"authorino-server-cert"}}}}}`), metav1.PatchOptions{})
			if err != nil {
				t.Fatal(err)
			}
			last := c.waitFor(t, gvrAuthorino, "kuadrant-system", "authorino", time.Minute, "listener TLS off, or on in the Kuadrant operator's apply", func(u *unstructured.Unstructured) bool {
				return listenerTLSOff(u) || kuadrantAppliedTLS(u)
			})
			if !listenerTLSOff(last) {
				break
			}
			if attempt == 3 {
				t.Fatalf("the Kuadrant operator turned listener TLS off again %d times", attempt)
			}
			t.Logf("the Kuadrant operator turned listener TLS off again (attempt %d); patching it on again", attempt)
		}
		c.waitFor(t, gvrAuthorino, "kuadrant-system", "authorino", 2*time.Minute, "Ready", hasCondition("Ready", "True", "Provisioned"))
	})

	t.Run("rhoai", func(t *testing.T) {
		ns(aiGatewayInfraNS)
		_, err := c.kube.CoreV1().Secrets(aiGatewayInfraNS).Create(t.Context(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: maasDBSecret},
			StringData: map[string]string{maasDBKey: "postgresql://maas:s3cr3t-P%40ss@maas-postgres-rw.rhoai-maas-db.svc:5432/maas?sslmode=require"},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.waitFor(t, gvrDSCI, "", defaultDSCI, time.Minute, "Ready", fieldIs(phaseReady, "status", "phase"))
		c.apply(t, gvrDSC, dsc(map[string]any{
			"dashboard": managed(),
			"kserve":    managed(),
			"aigateway": map[string]any{"managementState": "Managed", "modelsAsAService": managed()},
			"ogx":       managed(),
		}))
		d := c.waitFor(t, gvrDSC, "", "default-dsc", 3*time.Minute, "Ready", fieldIs(phaseReady, "status", "phase"))
		for _, typ := range []string{"Ready", "AIGatewayReady", "ModelsAsAServiceReady"} {
			if !conditionTrue(d, typ) {
				t.Errorf("condition %s not True: %v", typ, findCondition(d, typ))
			}
		}
		c.waitFor(t, gvrDeployment, aiGatewayInfraNS, maasAPIDeployment, time.Minute, "Available", hasCondition("Available", "True", ""))
		c.waitFor(t, gvrDashboardConfig, defaultAppsNamespace, dashboardConfigName, time.Minute, "exists", exists)
	})

	t.Run("models and access", func(t *testing.T) {
		_, err := c.kube.CoreV1().Secrets(modelNS).Patch(t.Context(), "llama-coder-api-key", "application/merge-patch+json",
			[]byte(`{"metadata":{"labels":{"inference.llm-d.ai/ipp-managed":"true"}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c.apply(t, gvrExternalProvider, map[string]any{
			"apiVersion": "inference.opendatahub.io/v1alpha1", "kind": "ExternalProvider",
			"metadata": map[string]any{"name": "llama-coder-provider", "namespace": modelNS,
				"annotations": map[string]any{"maas.opendatahub.io/tls": "false", maasPortAnnotation: "8080"}},
			"spec": map[string]any{
				"endpoint": "llama-coder.llm-coding-assistant.svc.cluster.local", "provider": "openai",
				"auth": map[string]any{"type": "apikey", "secretRef": map[string]any{"name": "llama-coder-api-key"}},
			},
		})
		c.waitFor(t, gvrExternalProvider, modelNS, "llama-coder-provider", time.Minute, "Ready", fieldIs("Ready", "status", "phase"))
		c.apply(t, gvrExternalModel, map[string]any{
			"apiVersion": "inference.opendatahub.io/v1alpha1", "kind": "ExternalModel",
			"metadata": map[string]any{"name": "qwen35-9b-coder", "namespace": modelNS},
			"spec": map[string]any{"externalProviderRefs": []any{map[string]any{
				"ref": map[string]any{"name": "llama-coder-provider"}, "apiFormat": "openai-chat",
				"path": "/v1/chat/completions", "targetModel": "qwen35-9b-coder",
			}}},
		})
		c.waitFor(t, gvrExternalModel, modelNS, "qwen35-9b-coder", time.Minute, "Ready", fieldIs("Ready", "status", "phase"))
		c.apply(t, gvrMaaSModelRef, map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
			"metadata": map[string]any{"name": "qwen35-9b-coder", "namespace": modelNS},
			"spec":     map[string]any{"modelRef": map[string]any{"kind": "ExternalModel", "name": "qwen35-9b-coder"}},
		})
		// Runtime ready but not governed yet: Pending with the endpoint known.
		ref := c.waitFor(t, gvrMaaSModelRef, modelNS, "qwen35-9b-coder", time.Minute, "RuntimeReady, awaiting governance",
			hasCondition("RuntimeReady", "True", "RuntimeHealthy"))
		if p := str(ref, "status", "phase"); p != "Pending" {
			t.Errorf("phase before governance %q, want Pending", p)
		}
		if e := str(ref, "status", "endpoint"); e != "https://"+host+"/"+modelNS+"/qwen35-9b-coder" {
			t.Errorf("endpoint %q", e)
		}
		c.apply(t, gvrMaaSAuthPolicy, map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSAuthPolicy",
			"metadata": map[string]any{"name": "llama-coder-access", "namespace": maasNamespace},
			"spec": map[string]any{
				"subjects":  map[string]any{"groups": []any{map[string]any{"name": "system:authenticated"}}},
				"modelRefs": []any{map[string]any{"name": "qwen35-9b-coder", "namespace": modelNS}},
			},
		})
		// Every phase the subscription goes through, from before it exists.
		phases := c.phaseHistory(t, gvrMaaSSubscription, maasNamespace, "llama-coder-default")
		c.apply(t, gvrMaaSSubscription, map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
			"metadata": map[string]any{"name": "llama-coder-default", "namespace": maasNamespace},
			"spec": map[string]any{
				"owner": map[string]any{"groups": []any{map[string]any{"name": "system:authenticated"}}},
				"modelRefs": []any{map[string]any{"name": "qwen35-9b-coder", "namespace": modelNS,
					"tokenRateLimits": []any{map[string]any{"limit": int64(200000), "window": "1h"}}}},
			},
		})
		// maas-controller v0.2.1: the MaaSAuthPolicy is Active at once, with
		// ConflictingAuthPolicy=False; the one Gateway-level AuthPolicy
		// protects every model and no per-model AuthPolicy exists.
		pol := c.waitFor(t, gvrMaaSAuthPolicy, maasNamespace, "llama-coder-access", time.Minute, "Active", fieldIs("Active", "status", "phase"))
		for _, want := range [][3]string{{"Ready", "True", "Reconciled"}, {"ConflictingAuthPolicy", "False", "NoConflict"}} {
			if !hasCondition(want[0], want[1], want[2])(pol) {
				t.Errorf("MaaSAuthPolicy condition %s = %v, want %s %s", want[0], findCondition(pol, want[0]), want[1], want[2])
			}
		}
		c.waitFor(t, gvrMaaSSubscription, maasNamespace, "llama-coder-default", time.Minute, "Active", fieldIs("Active", "status", "phase"))
		// Active only once Kuadrant accepted the subscription's policy: a
		// policy just created (not yet in the controller's cache, or with no
		// Accepted condition) keeps it Degraded. Accepted, once written, is
		// never removed, so it must be there now.
		if p, err := c.dyn.Resource(gvrTokenPolicy).Namespace(modelNS).Get(t.Context(), "maas-trlp-qwen35-9b-coder", metav1.GetOptions{}); err != nil || !conditionTrue(p, "Accepted") {
			t.Errorf("MaaSSubscription went Active while its TokenRateLimitPolicy was not accepted (err %v, conditions %v)", err, statusConditions(p))
		}
		// Nobody who saw it Active may see it turn back: a policy created
		// but not yet accepted (or not yet in the controller's cache) keeps
		// it Degraded before, never after, Active.
		if seen := phases(5*time.Second, "Active"); slices.Contains(seen, "Active") {
			first := slices.Index(seen, "Active")
			for _, p := range seen[first:] {
				if p != "Active" {
					t.Errorf("MaaSSubscription phases %v: %s after Active", seen, p)
					break
				}
			}
		}
		gwAuth := c.waitFor(t, gvrAuthPolicy, "openshift-ingress", "maas-gateway-auth", time.Minute, "Enforced", hasCondition("Enforced", "True", "Enforced"))
		for k, v := range map[string]string{"app.kubernetes.io/component": "gateway-auth", "app.kubernetes.io/managed-by": "maas-controller"} {
			if got := gwAuth.GetLabels()[k]; got != v {
				t.Errorf("maas-gateway-auth label %s=%q, want %q", k, got, v)
			}
		}
		if k, n := str(gwAuth, "spec", "targetRef", "kind"), str(gwAuth, "spec", "targetRef", "name"); k != "Gateway" || n != "maas-default-gateway" {
			t.Errorf("maas-gateway-auth targets %s %s, want Gateway maas-default-gateway", k, n)
		}
		if o := gwAuth.GetOwnerReferences(); len(o) != 1 || o[0].Kind != "Gateway" || o[0].Name != "maas-default-gateway" {
			t.Errorf("maas-gateway-auth owners %v, want the Gateway", o)
		}
		// The real Kuadrant operator marks the Gateway affected by it, and
		// the simulated gateway controller, which reconciled the Gateway
		// since, keeps that.
		c.waitFor(t, gvrGateway, "openshift-ingress", "maas-default-gateway", time.Minute, "kuadrant.io/AuthPolicyAffected",
			hasCondition("kuadrant.io/AuthPolicyAffected", "True", ""))
		if _, err := c.dyn.Resource(gvrAuthPolicy).Namespace(modelNS).Get(t.Context(), "maas-auth-qwen35-9b-coder", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("per-model AuthPolicy maas-auth-qwen35-9b-coder: err %v, want NotFound (the real controller makes none)", err)
		}
		trlp := c.waitFor(t, gvrTokenPolicy, modelNS, "maas-trlp-qwen35-9b-coder", time.Minute, "exists", exists)
		if o := trlp.GetOwnerReferences(); len(o) != 1 || o[0].Kind != "HTTPRoute" || o[0].Name != "qwen35-9b-coder" {
			t.Errorf("TokenRateLimitPolicy owners %v, want HTTPRoute qwen35-9b-coder", o)
		}
		for k, v := range map[string]string{"maas.opendatahub.io/model": "qwen35-9b-coder", "app.kubernetes.io/managed-by": "maas-controller",
			"app.kubernetes.io/part-of": "maas-subscription", "app.kubernetes.io/component": "token-rate-limit-policy"} {
			if got := trlp.GetLabels()[k]; got != v {
				t.Errorf("TokenRateLimitPolicy label %s=%q, want %q", k, got, v)
			}
		}
		if a := trlp.GetAnnotations()["maas.opendatahub.io/subscriptions"]; a != "llama-coder-default" {
			t.Errorf("TokenRateLimitPolicy subscriptions annotation %q", a)
		}
		limit := mapOf(trlp, "spec", "limits")[maasNamespace+"-llama-coder-default-qwen35-9b-coder-tokens"]
		if pred := fmt.Sprint(limit); !strings.Contains(pred, `auth.identity.selected_subscription_key == "`+maasNamespace+`/llama-coder-default@`+modelNS+`/qwen35-9b-coder"`) {
			t.Errorf("limit %v does not apply to the selected subscription", limit)
		}
		ref = c.waitFor(t, gvrMaaSModelRef, modelNS, "qwen35-9b-coder", time.Minute, "Ready", fieldIs("Ready", "status", "phase"))
		for _, f := range []struct {
			g        schema.GroupVersionResource
			ns, name string
			fin      string
		}{
			{gvrMaaSModelRef, modelNS, "qwen35-9b-coder", "maas.opendatahub.io/model-cleanup"},
			{gvrMaaSAuthPolicy, maasNamespace, "llama-coder-access", "maas.opendatahub.io/authpolicy-cleanup"},
			{gvrMaaSSubscription, maasNamespace, "llama-coder-default", "maas.opendatahub.io/subscription-cleanup"},
		} {
			u, err := c.dyn.Resource(f.g).Namespace(f.ns).Get(t.Context(), f.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(u.GetFinalizers(), f.fin) {
				t.Errorf("%s %s/%s finalizers %v, want %s", f.g.Resource, f.ns, f.name, u.GetFinalizers(), f.fin)
			}
		}

		c.apply(t, gvrMaaSAuthPolicy, map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSAuthPolicy",
			"metadata": map[string]any{"name": "dangling", "namespace": maasNamespace},
			"spec": map[string]any{
				"subjects":  map[string]any{"users": []any{"alice"}},
				"modelRefs": []any{map[string]any{"name": "no-such-model", "namespace": modelNS}},
			},
		})
		p := c.waitFor(t, gvrMaaSAuthPolicy, maasNamespace, "dangling", time.Minute, "Failed", fieldIs("Failed", "status", "phase"))
		if msg := mstr(findCondition(p, "Ready"), "message"); !strings.Contains(msg, "no-such-model") {
			t.Errorf("message %q does not name the missing model", msg)
		}

		// A model whose HTTPRoute does not exist: its subscription is
		// Failed (ReconcileFailed, modelRefStatuses NotFound); one that
		// also lists a routed model is Degraded.
		c.apply(t, gvrMaaSModelRef, map[string]any{
			"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSModelRef",
			"metadata": map[string]any{"name": "routeless", "namespace": modelNS},
			"spec":     map[string]any{"modelRef": map[string]any{"kind": "ExternalModel", "name": "no-such-external-model"}},
		})
		sub := func(name string, models ...string) {
			var refs []any
			for _, m := range models {
				refs = append(refs, map[string]any{"name": m, "namespace": modelNS, "tokenRateLimits": []any{map[string]any{"limit": int64(10), "window": "1m"}}})
			}
			c.apply(t, gvrMaaSSubscription, map[string]any{
				"apiVersion": "maas.opendatahub.io/v1alpha1", "kind": "MaaSSubscription",
				"metadata": map[string]any{"name": name, "namespace": maasNamespace},
				"spec":     map[string]any{"owner": map[string]any{"users": []any{"alice"}}, "modelRefs": refs},
			})
		}
		sub("routeless-sub", "routeless")
		sub("partial-sub", "qwen35-9b-coder", "routeless")
		f := c.waitFor(t, gvrMaaSSubscription, maasNamespace, "routeless-sub", time.Minute, "Failed", fieldIs("Failed", "status", "phase"))
		if !hasCondition("Ready", "False", "ReconcileFailed")(f) {
			t.Errorf("Failed subscription Ready = %v, want False ReconcileFailed", findCondition(f, "Ready"))
		}
		if rs := sliceOf(f, "status", "modelRefStatuses"); len(rs) != 1 || mstr(rs[0].(map[string]any), "reason") != "NotFound" {
			t.Errorf("modelRefStatuses %v, want one with reason NotFound", rs)
		}
		d := c.waitFor(t, gvrMaaSSubscription, maasNamespace, "partial-sub", time.Minute, "Degraded", fieldIs("Degraded", "status", "phase"))
		if !hasCondition("Ready", "True", "Reconciled")(d) {
			t.Errorf("Degraded subscription Ready = %v, want True Reconciled", findCondition(d, "Ready"))
		}
		c.waitFor(t, gvrTokenPolicy, modelNS, "maas-trlp-qwen35-9b-coder", time.Minute, "both subscriptions", func(u *unstructured.Unstructured) bool {
			return u.GetAnnotations()["maas.opendatahub.io/subscriptions"] == "llama-coder-default,partial-sub"
		})
		// Deleting a subscription: the running controller drops the
		// model's policy (the remaining subscriptions rebuild it) and its
		// finalizer.
		if err := c.dyn.Resource(gvrMaaSSubscription).Namespace(maasNamespace).Delete(t.Context(), "partial-sub", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitGone(t, gvrMaaSSubscription, maasNamespace, "partial-sub", time.Minute)
		c.waitFor(t, gvrTokenPolicy, modelNS, "maas-trlp-qwen35-9b-coder", time.Minute, "rebuilt for the remaining subscription", func(u *unstructured.Unstructured) bool {
			return u.GetAnnotations()["maas.opendatahub.io/subscriptions"] == "llama-coder-default"
		})
	})

	// With the DataScienceCluster gone, so is the MaaS controller (deployed
	// with maas-api, owned by the DSC): nothing removes the finalizers of
	// MaaS objects deleted afterwards.
	t.Run("finalizers without the controller", func(t *testing.T) {
		if err := c.dyn.Resource(gvrDSC).Delete(t.Context(), "default-dsc", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		c.waitGone(t, gvrDeployment, aiGatewayInfraNS, maasAPIDeployment, 2*time.Minute)
		if err := c.dyn.Resource(gvrMaaSAuthPolicy).Namespace(maasNamespace).Delete(t.Context(), "llama-coder-access", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		u := c.waitFor(t, gvrMaaSAuthPolicy, maasNamespace, "llama-coder-access", time.Minute, "deletionTimestamp", func(u *unstructured.Unstructured) bool {
			return u.GetDeletionTimestamp() != nil
		})
		if !slices.Contains(u.GetFinalizers(), "maas.opendatahub.io/authpolicy-cleanup") {
			t.Errorf("finalizers %v: the deleted MaaSAuthPolicy lost authpolicy-cleanup without its controller", u.GetFinalizers())
		}
	})
}

// waitGone watches one object until it is deleted, failing t after
// timeout (times waitScale).
func (c *cluster) waitGone(t *testing.T, g schema.GroupVersionResource, ns, name string, timeout time.Duration) {
	t.Helper()
	timeout *= waitScale
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	lw := c.nameListWatch(g, ns, name)
	present := false
	_, err := watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, func(st cache.Store) (bool, error) {
		return len(st.List()) == 0, nil
	}, func(ev kwatch.Event) (bool, error) {
		present = ev.Type != kwatch.Deleted
		return ev.Type == kwatch.Deleted, nil
	})
	if err != nil {
		t.Fatalf("%s %s/%s not gone within %s (present %v): %v", g.Resource, ns, name, timeout, present, err)
	}
}

// conditionIn finds condition typ in a conditions list.
func conditionIn(l any, typ string) map[string]any {
	s, _ := l.([]any)
	for _, c := range s {
		if cm, ok := c.(map[string]any); ok && cm["type"] == typ {
			return cm
		}
	}
	return nil
}

// TestDelay: Options.Delay is the time from a controller's trigger to the
// status that ends a client's wait. With an OLM delay the Subscription's
// install work starts at once (the InstallPlan appears well within the
// delay), but the CSV reaches Succeeded (its operator pods Ready) no
// earlier than the delay after the Subscription was created (case B02 a:
// a CSV not yet Succeeded must count as progress). Real OLM reports
// installedCSV as soon as the CSV exists, so the test does not ask for it
// to be empty before the delay (a CI run under load saw it at 2.7 s).
func TestDelay(t *testing.T) {
	// 8 s: the InstallPlan comes from the real catalog operator, whose
	// resolution took 3 s on a loaded 2-core machine.
	const delay = 8 * time.Second
	c := startCluster(t, Options{Delay: map[string]time.Duration{OLM: delay}})
	start := time.Now()
	c.subscribe(t, "openshift-operators", "rhcl-operator", "stable-1.4", "redhat-operators", nil)
	s := c.waitFor(t, gvrSubscription, "openshift-operators", "rhcl-operator", time.Minute, "exists", exists)
	s = c.waitFor(t, gvrSubscription, "openshift-operators", "rhcl-operator", time.Minute, "installPlanRef", func(u *unstructured.Unstructured) bool {
		return str(u, "status", "installPlanRef", "name") != ""
	})
	ip := c.waitFor(t, gvrInstallPlan, "openshift-operators", str(s, "status", "installPlanRef", "name"), time.Minute, "exists", exists)
	// creationTimestamp has one-second resolution.
	if got := ip.GetCreationTimestamp().Sub(s.GetCreationTimestamp().Time); got > delay-2*time.Second {
		t.Errorf("installplan created %s after the subscription, want the install work to start at once (within %s)", got, delay-2*time.Second)
	}
	// Real OLM reports installedCSV (and AtLatestKnown) as soon as the CSV
	// exists (operator-lifecycle-manager v0.46.0 pkg/controller/operators/
	// catalog/operator.go ensureSubscriptionCSVState), so the delay shows
	// in the CSV's phase: not Succeeded before its operator pods are Ready.
	csv, err := c.dyn.Resource(gvrCSV).Namespace("openshift-operators").Get(t.Context(), "rhcl-operator.v1.4.1", metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if before := time.Since(start); err == nil && before < delay-500*time.Millisecond {
		if p := str(csv, "status", "phase"); p == "Succeeded" {
			t.Errorf("CSV rhcl-operator.v1.4.1 Succeeded %s after the subscription, before the %s delay", before, delay)
		}
	}
	c.waitInstalled(t, "openshift-operators", "rhcl-operator", "rhcl-operator.v1.4.1")
	if got := time.Since(start); got < delay {
		t.Fatalf("csv Succeeded and subscription AtLatestKnown %s after the subscription, want at least the %s delay", got, delay)
	}
}

// TestFaults exercises the failure seams: an ACME order stuck on DNS-01
// propagation (case B13).
func TestFaults(t *testing.T) {
	c := startCluster(t, Options{Faults: Faults{
		CertificatePending: true,
	}})

	t.Run("certificate pending on dns-01", func(t *testing.T) {
		c.apply(t, gvrCertificate, map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
			"metadata": map[string]any{"name": "maas-gateway", "namespace": "openshift-ingress"},
			"spec": map[string]any{
				"secretName": "maas-gateway-tls", "dnsNames": []any{"maas.apps.openshift.example.com"},
				"issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "letsencrypt-production"},
			},
		})
		c.waitFor(t, gvrCertificate, "openshift-ingress", "maas-gateway", time.Minute, "Ready=False DoesNotExist", hasCondition("Ready", "False", "DoesNotExist"))
		cr := c.waitFor(t, gvrCertificateRequest, "openshift-ingress", "maas-gateway-1", time.Minute, "Ready=False Pending", hasCondition("Ready", "False", "Pending"))
		if msg := mstr(findCondition(cr, "Ready"), "message"); !strings.Contains(msg, "DNS-01") {
			t.Errorf("certificaterequest message %q does not mention DNS-01", msg)
		}
		if !conditionTrue(cr, "Approved") {
			t.Errorf("certificaterequest not approved: %v", findCondition(cr, "Approved"))
		}
		if _, err := c.kube.CoreV1().Secrets("openshift-ingress").Get(t.Context(), "maas-gateway-tls", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("secret maas-gateway-tls: err %v, want NotFound", err)
		}
	})
}

// TestOLMIsNotASimulator: OLM is real, so the simulators refuse an OLM
// delay (it belongs to testenv.Options.OperatorPodReadyDelay), and
// SplitOLMDelay hands it over.
func TestOLMIsNotASimulator(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "olm"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Options{CRDDir: dir, Delay: map[string]time.Duration{OLM: time.Second}}.withDefaults()
	if err == nil || !strings.Contains(err.Error(), `unknown controller "olm"`) {
		t.Errorf("OLM delay: err %v, want unknown controller", err)
	}
	olm, rest := SplitOLMDelay(map[string]time.Duration{OLM: 2 * time.Second, DSC: time.Second})
	if olm != 2*time.Second || len(rest) != 1 || rest[DSC] != time.Second {
		t.Errorf("SplitOLMDelay = %s, %v; want 2s, map[dsc:1s]", olm, rest)
	}
}

// TestCertManagerWebhookRefuses: cert-manager v1.21.1's webhook refuses at
// admission a Certificate without any subject, an RSA key under 2048 bits
// and a duration not longer than renewBefore (issue 18, measured); the
// simulated one must too, and accept what the real one accepts.
func TestCertManagerWebhookRefuses(t *testing.T) {
	c := startCluster(t, Options{})
	cert := func(name string, spec map[string]any) *unstructured.Unstructured {
		spec["secretName"] = name
		spec["issuerRef"] = map[string]any{"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "letsencrypt"}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
			"metadata": map[string]any{"name": name, "namespace": "openshift-ingress"},
			"spec":     spec,
		}}
	}
	refused := []struct {
		name, want string
		spec       map[string]any
	}{
		{"no-subject", "at least one of commonName", map[string]any{}},
		{"empty-dnsnames", "at least one of commonName", map[string]any{"dnsNames": []any{}}},
		{"rsa-1024", "spec.privateKey.size", map[string]any{"dnsNames": []any{"a.example.com"}, "privateKey": map[string]any{"algorithm": "RSA", "size": int64(1024)}}},
		{"default-algorithm-1024", "spec.privateKey.size", map[string]any{"dnsNames": []any{"a.example.com"}, "privateKey": map[string]any{"size": int64(1024)}}},
		{"ecdsa-128", "spec.privateKey.size", map[string]any{"dnsNames": []any{"a.example.com"}, "privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(128)}}},
		{"short-duration", "spec.duration", map[string]any{"dnsNames": []any{"a.example.com"}, "duration": "1h", "renewBefore": "2h"}},
		{"default-duration", "spec.duration", map[string]any{"dnsNames": []any{"a.example.com"}, "renewBefore": "2400h"}},
	}
	for _, r := range refused {
		_, err := c.dyn.Resource(gvrCertificate).Namespace("openshift-ingress").Create(t.Context(), cert(r.name, r.spec), metav1.CreateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("Certificate %s: err %v, want refused at admission (Invalid) naming %q", r.name, err, r.want)
		}
	}
	accepted := []struct {
		name string
		spec map[string]any
	}{
		{"dns", map[string]any{"dnsNames": []any{"a.example.com"}}},
		{"cn-only", map[string]any{"commonName": "a.example.com"}},
		{"rsa-4096", map[string]any{"dnsNames": []any{"a.example.com"}, "privateKey": map[string]any{"algorithm": "RSA", "size": int64(4096)}}},
		{"ecdsa-256", map[string]any{"dnsNames": []any{"a.example.com"}, "privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)}}},
		{"renew-within", map[string]any{"dnsNames": []any{"a.example.com"}, "duration": "2160h", "renewBefore": "720h"}},
	}
	for _, a := range accepted {
		if _, err := c.dyn.Resource(gvrCertificate).Namespace("openshift-ingress").Create(t.Context(), cert(a.name, a.spec), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Errorf("Certificate %s refused: %v (the real webhook accepts it)", a.name, err)
		}
	}
}

// startWith starts a local control plane with envOpts and the simulators
// with opts on it, both stopped when t ends.
func startWith(t *testing.T, envOpts testenv.Options, opts Options) *cluster {
	t.Helper()
	env, err := testenv.Start(t.Context(), envOpts)
	if errors.Is(err, testenv.ErrNotBuilt) {
		if os.Getenv(testenv.EnvRequire) == "1" {
			t.Fatalf("%s=1 but: %v", testenv.EnvRequire, err)
		}
		t.Skipf("local control plane not available: %v", err)
	}
	if err != nil {
		t.Fatalf("start control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	cfg := env.RESTConfig()
	opts.Logger = zaptest.NewLogger(t)
	h, err := Start(context.Background(), cfg, opts)
	if err != nil {
		t.Fatalf("start simulators: %v", err)
	}
	t.Cleanup(func() {
		if err := h.Stop(); err != nil {
			t.Errorf("stop simulators: %v", err)
		}
	})
	return &cluster{dyn: dynamic.NewForConfigOrDie(cfg), kube: kubernetes.NewForConfigOrDie(cfg), cfg: cfg}
}

// listenerTLSOff reports whether the Authorino CR u sets listener TLS off.
func listenerTLSOff(u *unstructured.Unstructured) bool {
	on, found, _ := unstructured.NestedBool(u.Object, "spec", "listener", "tls", "enabled")
	return found && !on
}

// kuadrantAppliedTLS reports whether kuadrant-operator's server-side apply
// entry in u's managedFields holds spec.listener.tls.enabled (its
// AuthorinoReconciler, internal/controller/authorino_reconciler.go).
func kuadrantAppliedTLS(u *unstructured.Unstructured) bool {
	for _, mf := range u.GetManagedFields() {
		if mf.Manager != "kuadrant-operator" || mf.Operation != metav1.ManagedFieldsOperationApply || mf.FieldsV1 == nil {
			continue
		}
		var f map[string]any
		if json.Unmarshal(mf.FieldsV1.Raw, &f) != nil {
			continue
		}
		if _, found, _ := unstructured.NestedFieldNoCopy(f, "f:spec", "f:listener", "f:tls", "f:enabled"); found {
			return true
		}
	}
	return false
}
