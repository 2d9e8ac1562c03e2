package e2e

// Cases N01, N02 and N04 of ../shared/cases/SECOND-SET.md: the OpenShift
// 4.19+ gateway (Gateway API CRDs the ingress operator owns, Service Mesh
// Subscriptions that block its own) and the RHCL version gate, against the
// local control plane with the real OLM.

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/steps"
)

// ingressOperatorUser is the ingress operator's service account, the only
// writer of Gateway API CRDs OpenShift 4.19+ admits
// (openshift/cluster-ingress-operator#1192).
const ingressOperatorUser = "system:serviceaccount:openshift-ingress-operator:ingress-operator"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// withOpenShiftVersion sets the fixture's ClusterVersion to version v.
func withOpenShiftVersion(v string) func([]*unstructured.Unstructured) {
	return func(objs []*unstructured.Unstructured) {
		for _, o := range objs {
			if o.GetKind() == "ClusterVersion" {
				setClusterVersion(o, v)
			}
		}
	}
}

func setClusterVersion(cv *unstructured.Unstructured, v string) {
	_ = unstructured.SetNestedField(cv.Object, v, "status", "desired", "version")
	hist, _, _ := unstructured.NestedSlice(cv.Object, "status", "history")
	for i := range hist {
		if m, ok := hist[i].(map[string]any); ok {
			m["version"] = v
		}
	}
	_ = unstructured.SetNestedSlice(cv.Object, hist, "status", "history")
}

// changeOpenShiftVersion rewrites the live ClusterVersion's status to v,
// as the cluster-version operator would after an upgrade.
func changeOpenShiftVersion(t *testing.T, c *cluster, v string) {
	t.Helper()
	for _, o := range testenv.FixtureObjects() {
		if o.GetKind() == "ClusterVersion" {
			setClusterVersion(o, v)
			if err := testenv.ApplyObjects(context.Background(), c.restConfig(), o); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatal("the fixture has no ClusterVersion")
}

// recordMaasctl puts a recording proxy between maasctl and the API server
// (the test's own clients and the simulators keep talking to it directly).
func recordMaasctl(t *testing.T, c *cluster) *faultproxy.Proxy {
	t.Helper()
	p, err := startProxy(context.Background(), t, c, faultproxy.Options{Record: true}, c.env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(c.dir, "proxy.kubeconfig")
	if err := p.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	c.kubeconfig = path
	return p
}

// writes returns the recorded write requests whose path starts with
// prefix, except the dry-run access reviews preflight sends.
func writes(p *faultproxy.Proxy, prefix string) []string {
	var out []string
	for _, r := range p.Requests() {
		if !slices.Contains([]string{"POST", "PUT", "PATCH", "DELETE"}, r.Method) || !strings.HasPrefix(r.Path, prefix) {
			continue
		}
		if strings.Contains(r.Path, "/selfsubjectaccessreviews") || strings.Contains(r.Path, "/selfsubjectreviews") || strings.Contains(r.Path, "/selfsubjectrulesreviews") {
			continue
		}
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

// preflightReport runs maasctl preflight -o json.
func preflightReport(t *testing.T, c *cluster, args ...string) (*steps.PreflightReport, run) {
	t.Helper()
	r := c.maasctl(t, append([]string{"preflight", "-o", "json"}, args...)...)
	var rep steps.PreflightReport
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("preflight -o json (exit %d): %v\n%s\n%s", r.exit, err, r.stdout, r.stderr)
	}
	return &rep, r
}

// findings returns the findings of check.
func findings(rep *steps.PreflightReport, check string) []steps.Finding {
	var out []steps.Finding
	for _, f := range rep.Findings {
		if f.Check == check {
			out = append(out, f)
		}
	}
	return out
}

// asIngressOperator is a client acting as the ingress operator (the
// harness's admin impersonates its service account, in system:masters so
// that RBAC lets it through and only the admission policy decides).
func asIngressOperator(t *testing.T, c *cluster) dynamic.ResourceInterface {
	t.Helper()
	cfg := c.restConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: ingressOperatorUser, Groups: []string{"system:masters", "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn.Resource(crdGVR)
}

// TestN01GatewayAPICRDsOwnedByThePlatform is case N01: on OpenShift 4.20.3
// whose Gateway API CRDs carry the platform's annotations (standard
// v1.2.1) and a ValidatingAdmissionPolicy lets only the ingress operator
// write CRDs of gateway.networking.k8s.io, maasctl preflight passes and a
// whole install succeeds with zero write requests to any CRD (a recording
// proxy in front of maasctl). Variants: the ingress operator leaves one CRD
// too old, then deletes one; each time preflight fails with
// GATEWAY_API_CRDS_NOT_PLATFORM_MANAGED naming the CRD and the OpenShift
// version, at once and without touching a CRD.
func TestN01GatewayAPICRDsOwnedByThePlatform(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{edit: withOpenShiftVersion("4.20.3")})
	ctx := context.Background()
	crds := c.clients.Dynamic.Resource(crdGVR)
	// What OCP ships: the three CRDs annotated standard v1.2.1 (set as the
	// admin, before the policy exists).
	for _, name := range steps.GatewayAPICRDs {
		patch := `{"metadata":{"annotations":{"gateway.networking.k8s.io/bundle-version":"v1.2.1","gateway.networking.k8s.io/channel":"standard"}}}`
		if _, err := crds.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("annotate %s: %v", name, err)
		}
	}
	c.create(t, `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: sim-ocp-gwapi-crd-owner}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: ["apiextensions.k8s.io"]
      apiVersions: ["v1"]
      resources: ["customresourcedefinitions"]
      operations: ["CREATE", "UPDATE", "DELETE"]
  validations:
  - expression: >-
      (object != null ? object.spec.group : oldObject.spec.group) != 'gateway.networking.k8s.io'
      || request.userInfo.username.endsWith(':openshift-ingress-operator:ingress-operator')
    message: "sim: Gateway API CRDs belong to the cluster ingress operator"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: sim-ocp-gwapi-crd-owner}
spec: {policyName: sim-ocp-gwapi-crd-owner, validationActions: ["Deny"]}
`)
	// The policy is in force (it takes effect asynchronously): an admin's
	// write to a Gateway API CRD is denied, so any write of maasctl's
	// would fail the install, not only show in the recording.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := crds.Patch(ctx, "httproutes.gateway.networking.k8s.io", types.MergePatchType, []byte(`{"metadata":{"labels":{"n01-probe":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && strings.Contains(err.Error(), "belong to the cluster ingress operator") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the admission policy never denied an admin's CRD write (last error %v)", err)
		}
		time.Sleep(200 * time.Millisecond) // polling the policy's activation; no watch reports it
	}
	p := recordMaasctl(t, c)

	rep, r := preflightReport(t, c)
	if fs := findings(rep, "gateway-api-crds"); len(fs) != 0 || !slices.Contains(rep.Passed, "gateway-api-crds") {
		t.Fatalf("gateway-api-crds on platform-owned standard v1.2.1 CRDs: %+v (exit %d)", fs, r.exit)
	}
	mustSucceed(t, c.install(t))
	if w := writes(p, "/apis/apiextensions.k8s.io/"); len(w) != 0 {
		t.Errorf("maasctl sent %d CRD write(s), want 0: %v", len(w), w)
	}
	gets := 0
	for _, req := range p.Requests() {
		if req.Method == "GET" && strings.HasSuffix(req.Path, "/customresourcedefinitions/gateways.gateway.networking.k8s.io") {
			gets++
			// Established and serving v1, as discovery shows: its
			// annotations are all maasctl reads of it.
			if !strings.Contains(req.Accept, "as=PartialObjectMetadata") {
				t.Errorf("maasctl read the whole CRD gateways.gateway.networking.k8s.io (Accept %q); its metadata is all the check needs", req.Accept)
			}
		}
	}
	if gets == 0 {
		t.Errorf("maasctl never read CRD gateways.gateway.networking.k8s.io: its version was not checked")
	}

	t.Run("too old", func(t *testing.T) {
		// The ingress operator (the only permitted writer) at an older
		// bundle, as a cluster upgraded from before 4.19 may keep.
		patch := `{"metadata":{"annotations":{"gateway.networking.k8s.io/bundle-version":"v1.1.0"}}}`
		if _, err := asIngressOperator(t, c).Patch(ctx, "gateways.gateway.networking.k8s.io", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("patch as the ingress operator: %v", err)
		}
		rep, r := preflightReport(t, c)
		if r.exit == 0 {
			t.Errorf("preflight exit 0 with a v1.1.0 Gateway CRD")
		}
		fs := findings(rep, "gateway-api-crds")
		if len(fs) != 1 || fs[0].Code != steps.CodeGatewayAPICRDs || fs[0].Severity != steps.SeverityError {
			t.Fatalf("gateway-api-crds findings %+v, want one %s error", fs, steps.CodeGatewayAPICRDs)
		}
		mustContain(t, "finding", fs[0].Message, "gateways.gateway.networking.k8s.io", "v1.1.0", "older than v1.2.1", "OpenShift 4.20.3", "platform-owned Gateway API CRDs missing or too old")
		mustContain(t, "fix", fs[0].Fix, "maasctl never installs Gateway API CRDs", "ingress operator")
		if w := writes(p, "/apis/apiextensions.k8s.io/"); len(w) != 0 {
			t.Errorf("CRD writes after the old CRD: %v", w)
		}
	})
	t.Run("v1 not served", func(t *testing.T) {
		// The ingress operator stops serving HTTPRoute v1 (the version
		// maasctl writes): discovery no longer lists it, and the finding
		// says which requirement the CRD misses.
		ing := asIngressOperator(t, c)
		setServed := func(served bool) {
			t.Helper()
			crd, err := ing.Get(ctx, "httproutes.gateway.networking.k8s.io", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
			for _, v := range versions {
				if m := v.(map[string]any); m["name"] == "v1" {
					m["served"] = served
				}
			}
			if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
				t.Fatal(err)
			}
			if _, err := ing.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("set HTTPRoute v1 served=%v as the ingress operator: %v", served, err)
			}
		}
		setServed(false)
		defer setServed(true)
		rep, r := preflightReport(t, c)
		if r.exit == 0 {
			t.Errorf("preflight exit 0 with HTTPRoute v1 not served")
		}
		var msgs []string
		for _, f := range findings(rep, "gateway-api-crds") {
			msgs = append(msgs, f.Message)
		}
		mustContain(t, "findings", strings.Join(msgs, "\n"), "httproutes.gateway.networking.k8s.io does not serve v1 (maasctl writes HTTPRoute v1)", "OpenShift 4.20.3")
	})
	t.Run("missing", func(t *testing.T) {
		if err := asIngressOperator(t, c).Delete(ctx, "httproutes.gateway.networking.k8s.io", metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete as the ingress operator: %v", err)
		}
		if err := waitCRDGone(ctx, crds, "httproutes.gateway.networking.k8s.io"); err != nil {
			t.Fatal(err)
		}
		r := c.install(t)
		mustFail(t, r)
		msg := failure(r, steps.PreflightStepID)
		mustContain(t, "preflight failure", msg, steps.CodeGatewayAPICRDs, "httproutes.gateway.networking.k8s.io does not exist", "OpenShift 4.20.3")
		if w := writes(p, "/apis/apiextensions.k8s.io/"); len(w) != 0 {
			t.Errorf("CRD writes after the CRD was deleted: %v", w)
		}
		if r.wall > 30*time.Second {
			t.Errorf("install took %s to stop on a missing platform CRD; it must stop at preflight without retries", r.wall)
		}
	})
}

// waitCRDGone waits (bounded) until a deleted CRD is gone.
func waitCRDGone(ctx context.Context, crds dynamic.NamespaceableResourceInterface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		if _, err := crds.Get(ctx, name, metav1.GetOptions{}); err != nil {
			if strings.Contains(err.Error(), "not found") {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond): // the CRD finaliser's progress is not watched here
		}
	}
}

func subscription(ns, name, pkg, approval string, annotations map[string]any) *unstructured.Unstructured {
	s := obj("operators.coreos.com/v1alpha1", "Subscription", ns, name, map[string]any{
		"spec": map[string]any{"name": pkg, "channel": "stable", "source": "redhat-operators", "sourceNamespace": "openshift-marketplace", "installPlanApproval": approval},
	})
	if annotations != nil {
		s.Object["metadata"].(map[string]any)["annotations"] = annotations
	}
	return s
}

// TestN02ConflictingOSSMSubscription is case N02: on OpenShift 4.20.8 an
// OSSM 2 Subscription (openshift-operators/servicemeshoperator) stops
// preflight with OSSM_SUBSCRIPTION_CONFLICT naming it and the fix, maasctl
// writes no GatewayClass or Gateway, and install stops in seconds. The
// whole kind: a hand-installed OSSM 3 Subscription stops it too on 4.20.8,
// the ingress operator's own (annotated) one does not, and on 4.21.22 the
// hand-installed one only warns.
func TestN02ConflictingOSSMSubscription(t *testing.T) {
	parallel(t)
	gc := obj("gateway.networking.k8s.io/v1", "GatewayClass", "", "openshift-default", map[string]any{
		"spec": map[string]any{"controllerName": "openshift.io/gateway-controller/v1"},
		"status": map[string]any{"conditions": []any{map[string]any{
			"type": "Accepted", "status": "Unknown", "reason": "Pending", "message": "Waiting for controller", "lastTransitionTime": "2026-01-01T00:00:00Z",
		}}},
	})
	c := newCaseCluster(t, caseOptions{noSim: true, edit: withOpenShiftVersion("4.20.8"), extra: []*unstructured.Unstructured{
		subscription("openshift-operators", "servicemeshoperator", "servicemeshoperator", "Automatic", nil), gc,
	}})
	ctx := context.Background()
	p := recordMaasctl(t, c)
	subs := c.clients.Dynamic.Resource(schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "subscriptions"}).Namespace("openshift-operators")

	rep, r := preflightReport(t, c)
	if r.exit == 0 {
		t.Errorf("preflight exit 0 with an OSSM 2 Subscription on 4.20.8")
	}
	fs := findings(rep, "ossm-subscriptions")
	if len(fs) != 1 || fs[0].Code != steps.CodeOSSMConflict || fs[0].Severity != steps.SeverityError {
		t.Fatalf("ossm-subscriptions findings %+v, want one %s error", fs, steps.CodeOSSMConflict)
	}
	mustContain(t, "finding", fs[0].Message, "Subscription openshift-operators/servicemeshoperator", "OpenShift 4.20.8",
		"(now: GatewayClass openshift-default is Accepted=Unknown (Pending): Waiting for controller)")
	mustContain(t, "fix", fs[0].Fix, "oc delete subscription servicemeshoperator -n openshift-operators", "ingress operator reinstall")

	inst := c.install(t)
	mustFail(t, inst)
	mustContain(t, "preflight failure", failure(inst, steps.PreflightStepID), steps.CodeOSSMConflict, "openshift-operators/servicemeshoperator")
	if inst.wall > 10*time.Second {
		t.Errorf("install took %s with the conflict present; it must stop at preflight, not wait for the Gateway", inst.wall)
	}
	if w := writes(p, "/apis/gateway.networking.k8s.io/"); len(w) != 0 {
		t.Errorf("maasctl wrote Gateway API objects: %v", w)
	}
	if w := writes(p, "/apis/operators.coreos.com/"); len(w) != 0 {
		t.Errorf("maasctl wrote OLM objects: %v", w)
	}

	// Replace it with a hand-installed OSSM 3 Subscription.
	if err := subs.Delete(ctx, "servicemeshoperator", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.ApplyObjects(ctx, c.restConfig(), subscription("openshift-operators", "servicemeshoperator3", "servicemeshoperator3", "Automatic", nil)); err != nil {
		t.Fatal(err)
	}
	t.Run("hand-installed OSSM 3 on 4.20.8", func(t *testing.T) {
		rep, _ := preflightReport(t, c)
		fs := findings(rep, "ossm-subscriptions")
		if len(fs) != 1 || fs[0].Code != steps.CodeOSSMConflict || fs[0].Severity != steps.SeverityError {
			t.Fatalf("ossm-subscriptions findings %+v, want one %s error", fs, steps.CodeOSSMConflict)
		}
		mustContain(t, "finding", fs[0].Message, "openshift-operators/servicemeshoperator3", "package servicemeshoperator3", "not created by the OpenShift ingress operator")
	})
	t.Run("hand-installed OSSM 3 on 4.21.22 warns", func(t *testing.T) {
		changeOpenShiftVersion(t, c, "4.21.22")
		rep, _ := preflightReport(t, c)
		fs := findings(rep, "ossm-subscriptions")
		if len(fs) != 1 || fs[0].Severity != steps.SeverityWarning {
			t.Fatalf("ossm-subscriptions findings %+v on 4.21.22, want one warning", fs)
		}
		mustContain(t, "warning", fs[0].Message, "openshift-operators/servicemeshoperator3", "4.21.22")
		changeOpenShiftVersion(t, c, "4.20.8")
	})
	t.Run("the ingress operator's own on 4.20.8 passes", func(t *testing.T) {
		if err := subs.Delete(ctx, "servicemeshoperator3", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		own := subscription("openshift-operators", "servicemeshoperator3", "servicemeshoperator3", "Manual", map[string]any{"ingress.operator.openshift.io/owned": ""})
		if err := testenv.ApplyObjects(ctx, c.restConfig(), own); err != nil {
			t.Fatal(err)
		}
		rep, _ := preflightReport(t, c)
		if fs := findings(rep, "ossm-subscriptions"); len(fs) != 0 {
			t.Fatalf("ossm-subscriptions findings %+v for the ingress operator's own Subscription, want none", fs)
		}
	})
	if w := writes(p, "/apis/gateway.networking.k8s.io/"); len(w) != 0 {
		t.Errorf("maasctl wrote Gateway API objects: %v", w)
	}
}

// TestN04RHCLVersionGate is case N04's preflight: an installed
// rhcl-operator.v1.4.0 CSV (in kuadrant-system, not the inventory's
// namespace) stops preflight with DEPENDENCY_VERSION_DENIED naming the CSV
// and "upgrade to >= 1.4.1"; with 1.4.1 the check passes. The whole kind:
// an inventory startingCSV pinned to 1.4.0 is refused even with minVersion
// lowered to 1.3.0.
func TestN04RHCLVersionGate(t *testing.T) {
	parallel(t)
	csv := func(v string) *unstructured.Unstructured {
		return obj("operators.coreos.com/v1alpha1", "ClusterServiceVersion", "kuadrant-system", "rhcl-operator.v"+v, map[string]any{
			"spec": map[string]any{"displayName": "Red Hat Connectivity Link", "version": v, "install": map[string]any{"strategy": "deployment", "spec": map[string]any{"deployments": []any{}}}},
		})
	}
	c := newCaseCluster(t, caseOptions{noSim: true, extra: []*unstructured.Unstructured{
		namespace("kuadrant-system"), csv("1.4.0"),
		obj("operators.coreos.com/v1alpha1", "Subscription", "kuadrant-system", "rhcl-operator", map[string]any{
			"spec": map[string]any{"name": "rhcl-operator", "channel": "stable", "source": "redhat-operators", "sourceNamespace": "openshift-marketplace"},
		}),
	}})
	ctx := context.Background()
	rep, r := preflightReport(t, c)
	if r.exit == 0 {
		t.Errorf("preflight exit 0 with RHCL 1.4.0 installed")
	}
	var denied []steps.Finding
	for _, f := range findings(rep, "rhcl-version") {
		if f.Code == steps.CodeDependencyVersionDenied && f.Severity == steps.SeverityError {
			denied = append(denied, f)
		}
	}
	if len(denied) == 0 {
		t.Fatalf("no %s finding: %+v", steps.CodeDependencyVersionDenied, rep.Findings)
	}
	mustContain(t, "finding", denied[0].Message, "CSV kuadrant-system/rhcl-operator.v1.4.0", "rhcl-operator 1.4.0 is a denied version", "without authentication")
	mustContain(t, "fix", denied[0].Fix, "upgrade to >= 1.4.1")
	inst := c.install(t)
	mustFail(t, inst)
	mustContain(t, "preflight failure", failure(inst, steps.PreflightStepID), steps.CodeDependencyVersionDenied, "rhcl-operator.v1.4.0")
	for _, s := range c.list(t, gvkSub, "openshift-operators") {
		t.Errorf("Subscription %s/%s created although preflight failed", s.GetNamespace(), s.GetName())
	}

	// 1.4.1 instead: the check passes.
	csvs := c.clients.Dynamic.Resource(schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "clusterserviceversions"}).Namespace("kuadrant-system")
	if err := csvs.Delete(ctx, "rhcl-operator.v1.4.0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The real OLM holds a CSV's deletion on its finalizer until it has
	// cleaned up: wait until the CSV is gone.
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := csvs.Get(ctx, "rhcl-operator.v1.4.0", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CSV kuadrant-system/rhcl-operator.v1.4.0 still there 3 minutes after its deletion (last error %v)", err)
		}
	}
	if err := testenv.ApplyObjects(ctx, c.restConfig(), csv("1.4.1")); err != nil {
		t.Fatal(err)
	}
	rep, _ = preflightReport(t, c)
	if fs := findings(rep, "rhcl-version"); len(fs) != 0 || !slices.Contains(rep.Passed, "rhcl-version") {
		t.Errorf("rhcl-version with 1.4.1 installed: %+v, want a pass", fs)
	}

	t.Run("startingCSV pinned to 1.4.0", func(t *testing.T) {
		rep, r := preflightReport(t, c, "--set", "operators[rhcl].startingCSV=rhcl-operator.v1.4.0", "--set", "operators[rhcl].minVersion=1.3.0")
		if r.exit == 0 {
			t.Errorf("preflight exit 0 with startingCSV rhcl-operator.v1.4.0")
		}
		fs := findings(rep, "rhcl-version")
		if len(fs) != 1 || fs[0].Code != steps.CodeDependencyVersionDenied {
			t.Fatalf("rhcl-version findings %+v, want one %s", fs, steps.CodeDependencyVersionDenied)
		}
		mustContain(t, "finding", fs[0].Message, "operators[rhcl].startingCSV pins rhcl-operator.v1.4.0", "denied")
		mustContain(t, "fix", fs[0].Fix, "upgrade to >= 1.4.1")
	})
}

// TestN04InstallPlanForDeniedVersion is case N04's InstallPlan test on the
// real OLM: the Subscription is Manual and pinned to
// rhcl-operator.v1.4.0, which the catalog offers (1.4.1 replaces it), the
// inventory's minVersion is lowered to 1.3.0 and preflight's rhcl-version
// check is ignored, so only the policy at approval stands between the
// plan and the cluster: with --approve-installplans the plan is still
// never approved, the step fails naming the CSV and the upgrade, and the
// CSV is never installed.
func TestN04InstallPlanForDeniedVersion(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	r := c.install(t, "--only", "operators/rhcl", "--set", "operators[rhcl].approval=Manual", "--set", "operators[rhcl].startingCSV=rhcl-operator.v1.4.0",
		"--set", "operators[rhcl].minVersion=1.3.0", "--ignore-preflight", "rhcl-version", "--approve-installplans", "--set", "waitTimeoutSeconds=90")
	mustFail(t, r)
	msg := failure(r, "operators/rhcl")
	mustContain(t, "operators/rhcl failure", msg, steps.CodeDependencyVersionDenied, "rhcl-operator.v1.4.0", "upgrade to >= 1.4.1", "maasctl will not approve it")
	plans := 0
	for _, ip := range c.list(t, gvkIP, "") {
		csvs, _, _ := unstructured.NestedStringSlice(ip.Object, "spec", "clusterServiceVersionNames")
		if !slices.Contains(csvs, "rhcl-operator.v1.4.0") {
			continue
		}
		plans++
		if a, _, _ := unstructured.NestedBool(ip.Object, "spec", "approved"); a {
			t.Errorf("InstallPlan %s/%s (%v) for the denied rhcl-operator.v1.4.0 was approved", ip.GetNamespace(), ip.GetName(), csvs)
		}
	}
	if plans == 0 {
		t.Fatalf("OLM made no InstallPlan for rhcl-operator.v1.4.0: the case did not apply")
	}
	if c.exists(t, "operators.coreos.com/v1alpha1", "ClusterServiceVersion", "openshift-operators", "rhcl-operator.v1.4.0") {
		t.Errorf("CSV rhcl-operator.v1.4.0 was installed")
	}
}
