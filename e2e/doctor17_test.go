package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Issue 17, "doctor is blind where verify is not" and "Fixes that do not
// fix": each break of a live install is named by doctor, with and without
// --live-only, and its fix, applied as printed, makes verify pass.

const (
	kuadrantOperatorNS  = "openshift-operators"
	kuadrantOperatorDep = "kuadrant-operator-controller-manager"
	kuadrantOperatorSel = "app=kuadrant,control-plane=controller-manager"
	authorinoNS         = "kuadrant-system"
	authorinoSvc        = "authorino-authorino-authorization"
)

// findingOf returns doctor's finding with code and object, or nil.
func findingOf(rep *doctor.Report, code, object string) *doctor.Finding {
	for i, f := range rep.Findings {
		if f.Code == code && f.Object == object {
			return &rep.Findings[i]
		}
	}
	return nil
}

// expectNamed runs doctor with (p != nil) and without the data path and
// asserts both exit 1 with finding code on object; it returns the fix
// printed by the --live-only run.
func expectNamed(t *testing.T, c *cluster, p *plane, code, object string, extra ...string) string {
	t.Helper()
	var fix string
	for _, pp := range []*plane{nil, p} {
		rep, r := doctorRun(t, c, pp, extra...)
		mode := "--live-only"
		if pp != nil {
			mode = "with the data path"
		}
		f := findingOf(rep, code, object)
		if r.exit != 1 || f == nil || f.Cause == "" || f.Fix == "" || f.Evidence == "" {
			t.Fatalf("doctor %s: exit %d, want 1 with %s on %s; codes %v\n%s", mode, r.exit, code, object, rep.Codes(), r.stdout)
		}
		if fix == "" {
			fix = f.Fix
		}
	}
	return fix
}

// applyFix applies a doctor fix as printed: its first command (up to
// "   (" or "; ") is run, maasctl by the binary under test, oc verbs as the
// same API calls.
func applyFix(t *testing.T, c *cluster, fix string, installArgs ...string) {
	t.Helper()
	cmd := fix
	if i := strings.Index(cmd, "   ("); i >= 0 {
		cmd = cmd[:i]
	}
	if i := strings.Index(cmd, "; "); i >= 0 {
		cmd = cmd[:i]
	}
	f := strings.Fields(cmd)
	switch {
	case len(f) >= 2 && f[0] == "maasctl" && f[1] == "install":
		r := c.maasctl(t, append(append([]string{"install", "-o", "json"}, f[2:]...), installArgs...)...)
		if r.exit != 0 {
			t.Fatalf("fix %q: exit %d\n%s", cmd, r.exit, r.stderr)
		}
	case len(f) == 7 && f[0] == "oc" && f[1] == "scale" && f[2] == "deployment" && f[4] == "-n" && strings.HasPrefix(f[6], "--replicas="):
		patch := fmt.Sprintf(`{"spec":{"replicas":%s}}`, strings.TrimPrefix(f[6], "--replicas="))
		if _, err := c.clients.Kube.AppsV1().Deployments(f[5]).Patch(context.Background(), f[3], types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatalf("fix %q: %v", cmd, err)
		}
	case len(f) == 10 && f[0] == "oc" && f[1] == "patch" && f[4] == "-n" && f[6] == "--type" && f[7] == "merge" && f[8] == "-p":
		gvk, ok := ocKinds[f[2]]
		if !ok {
			t.Fatalf("fix %q: kind %q has no mapping in ocKinds", cmd, f[2])
		}
		ri, _, err := c.clients.Resource(gvk, f[5])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Patch(context.Background(), f[3], types.MergePatchType, []byte(strings.Trim(f[9], "'")), metav1.PatchOptions{}); err != nil {
			t.Fatalf("fix %q: %v", cmd, err)
		}
	default:
		t.Fatalf("fix %q is not a command (from %q)", cmd, fix)
	}
}

// ocKinds maps the lower-case kind an oc command names to its GVK.
var ocKinds = map[string]schema.GroupVersionKind{
	"maassubscription": verify.MaaSSubscriptionGVK,
	"authorino":        verify.AuthorinoGVK,
}

// expectVerifyPasses runs verify live and with the data path, then doctor,
// until both are clean (at most 2 minutes).
func expectVerifyPasses(t *testing.T, c *cluster, p *plane, extra ...string) {
	t.Helper()
	// Both within the same bound: after a fix the real Kuadrant operator
	// can hold a policy at Enforced=False ("waiting for the following
	// components to sync") for a moment after verify passed, when the
	// restored component restarts once more.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rep, r := verifyRun(t, c, p, extra...)
		if r.exit == 0 && rep.Passed {
			d, dr := doctorRun(t, c, p, extra...)
			if dr.exit == 0 && len(d.Errors()) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("doctor after the fix: exit %d, codes %v\n%s", dr.exit, d.Codes(), dr.stdout)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("verify after the fix: exit %d, failed %v\n%s", r.exit, rep.FailedCodes(), r.stdout)
		}
		time.Sleep(2 * time.Second)
	}
}

// deleteGone deletes one object and waits until it is gone.
func deleteGone(t *testing.T, c *cluster, gvk schema.GroupVersionKind, ns, name string) {
	t.Helper()
	ri, _, err := c.clients.Resource(gvk, ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := deleteObject(c, gvk, ns, name); err != nil {
		t.Fatalf("delete %s %s/%s: %v", gvk.Kind, ns, name, err)
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if _, err := ri.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %s/%s still there 3 minutes after its deletion", gvk.Kind, ns, name)
		}
	}
}

// doctorNamesBreaks: on the live install of c, with the model server
// running and p its data plane, the Kuadrant CR deleted, the passthrough
// Route deleted, the Kuadrant operator scaled to 0, an auth policy changed
// outside the inventory, and an endpoint that does not answer or answers
// 404: doctor names each (verify fails), and each fix applied as printed
// makes verify pass again. It runs on TestVerifyDoctorGather's install
// (until 2026-12-07 the test TestDoctorNamesBreaks, with an install of its
// own: the same steps, one whole install more).
func doctorNamesBreaks(t *testing.T, c *cluster, p *plane) {
	expectVerifyPasses(t, c, p)
	// restore returns a failed subtest's cluster to the healthy install
	// so that the next break is judged on its own.
	restore := func(t *testing.T) {
		t.Cleanup(func() {
			if !t.Failed() {
				return
			}
			for _, d := range []string{kuadrantOperatorDep, verify.AuthorinoOperatorDeployment} {
				_, _ = c.clients.Kube.AppsV1().Deployments(kuadrantOperatorNS).Patch(context.Background(), d, types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
			}
			// The Authorino operator does not restore it (its CR sets no
			// spec.replicas).
			_, _ = c.clients.Kube.AppsV1().Deployments(authorinoNS).Patch(context.Background(), "authorino", types.MergePatchType, []byte(`{"spec":{"replicas":1}}`), metav1.PatchOptions{})
			if r := c.install(t); r.exit != 0 {
				t.Logf("restore: install exit %d", r.exit)
			}
		})
	}

	t.Run("Kuadrant CR deleted", func(t *testing.T) {
		restore(t)
		deleteGone(t, c, verify.KuadrantGVK, "kuadrant-system", "kuadrant")
		fix := expectNamed(t, c, p, doctor.CodeObjectMissing, "Kuadrant kuadrant-system/kuadrant")
		rep, r := verifyRun(t, c, p, "--live-only")
		if r.exit != 1 || !strings.Contains(strings.Join(rep.FailedCodes(), " "), verify.CodeKuadrantReady) {
			t.Errorf("verify --live-only: exit %d, failed %v", r.exit, rep.FailedCodes())
		}
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
	})

	t.Run("passthrough Route deleted", func(t *testing.T) {
		restore(t)
		route := get(t, c, "route.openshift.io/v1", "Route", "openshift-ingress", "maas-default-gateway-https")
		deleteGone(t, c, verify.RouteGVK, "openshift-ingress", route.GetName())
		object := "Route openshift-ingress/" + route.GetName()
		fix := expectNamed(t, c, p, doctor.CodeObjectMissing, object)
		rep, r := verifyRun(t, c, p, "--live-only")
		if r.exit != 1 || !strings.Contains(strings.Join(rep.FailedCodes(), " "), verify.CodeRoute) {
			t.Errorf("verify --live-only: exit %d, failed %v, want %s\n%s", r.exit, rep.FailedCodes(), verify.CodeRoute, r.stdout)
		}
		// Without --endpoint doctor derives none from the Route: it says
		// so instead of skipping the data path.
		nr := c.maasctl(t, "doctor", "-o", "json")
		if nr.exit != 1 || !strings.Contains(nr.stdout, doctor.CodeEndpointUnreachable) || !strings.Contains(nr.stdout, doctor.CodeObjectMissing) {
			t.Errorf("doctor without --endpoint: exit %d, want 1 with %s and %s\n%s", nr.exit, doctor.CodeEndpointUnreachable, doctor.CodeObjectMissing, nr.stdout)
		}
		st := c.maasctl(t, "status")
		if !strings.Contains(st.stdout, "UNREACHABLE") || !strings.Contains(st.stdout, route.GetName()+" does not exist") {
			t.Errorf("status does not say the Route is missing:\n%s", st.stdout)
		}
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
		if st := c.maasctl(t, "status"); strings.Contains(st.stdout, "UNREACHABLE") {
			t.Errorf("status after the fix:\n%s", st.stdout)
		}
	})

	t.Run("Kuadrant operator scaled to 0", func(t *testing.T) {
		restore(t)
		ctx := context.Background()
		deps := c.clients.Kube.AppsV1().Deployments(kuadrantOperatorNS)
		if _, err := deps.Patch(ctx, kuadrantOperatorDep, types.MergePatchType, []byte(`{"spec":{"replicas":0}}`), metav1.PatchOptions{FieldManager: "e2e-break"}); err != nil {
			t.Fatal(err)
		}
		waitList(t, c, verify.PodGVK, kuadrantOperatorNS, kuadrantOperatorSel, 2*time.Minute, "no Kuadrant operator pod",
			func(l []*unstructured.Unstructured) bool { return len(l) == 0 })
		fix := expectNamed(t, c, p, doctor.CodeKuadrantOperatorDown, "Deployment "+kuadrantOperatorNS+"/"+kuadrantOperatorDep)
		rep, r := verifyRun(t, c, p, "--live-only")
		if r.exit != 1 {
			t.Errorf("verify --live-only with the operator scaled to 0: exit %d, failed %v\n%s", r.exit, rep.FailedCodes(), r.stdout)
		}
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
	})

	// MAAS-D019: with the Authorino operator down, nothing restores the
	// Authorino Deployment someone scaled to 0; Kuadrant's status stays
	// Ready (stale) while every authenticated call fails with 500
	// AUTH_FAILURE. Doctor names the operator and its scale-up command.
	t.Run("Authorino operator down and Authorino scaled to 0", func(t *testing.T) {
		restore(t)
		ctx := context.Background()
		scale := func(ns, name string, n int) {
			t.Helper()
			if _, err := c.clients.Kube.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)), metav1.PatchOptions{FieldManager: "e2e-break"}); err != nil {
				t.Fatal(err)
			}
		}
		scale(kuadrantOperatorNS, verify.AuthorinoOperatorDeployment, 0)
		waitList(t, c, verify.PodGVK, kuadrantOperatorNS, "control-plane=authorino-operator", 2*time.Minute, "no Authorino operator pod",
			func(l []*unstructured.Unstructured) bool { return len(l) == 0 })
		scale(authorinoNS, "authorino", 0)
		waitList(t, c, verify.EndpointSliceGVK, authorinoNS, "kubernetes.io/service-name="+authorinoSvc, 2*time.Minute, "no ready Authorino endpoint",
			func(l []*unstructured.Unstructured) bool { return readyEndpoints(l) == 0 })
		if rep, r := verifyRun(t, c, p); r.exit != 1 {
			t.Errorf("verify with Authorino down: exit %d, failed %v, want 1\n%s", r.exit, rep.FailedCodes(), r.stdout)
		}
		fix := expectNamed(t, c, p, doctor.CodeAuthService, "Service "+authorinoNS+"/"+authorinoSvc)
		// Two commands: the operator back, and the replicas in the
		// Authorino CR, since the operator restores a Deployment scaled
		// to 0 only from a spec.replicas the CR sets (Kuadrant's sets
		// none).
		want := "oc scale deployment " + verify.AuthorinoOperatorDeployment + " -n " + kuadrantOperatorNS + " --replicas=1; oc patch authorino authorino -n " + authorinoNS + ` --type merge -p '{"spec":{"replicas":1}}'`
		if !strings.HasPrefix(fix, want+"   (") {
			t.Fatalf("fix %q, want %q", fix, want)
		}
		first, second, _ := strings.Cut(fix, "; ")
		applyFix(t, c, first)
		applyFix(t, c, second)
		waitList(t, c, verify.EndpointSliceGVK, authorinoNS, "kubernetes.io/service-name="+authorinoSvc, 2*time.Minute, "Authorino ready again",
			func(l []*unstructured.Unstructured) bool { return readyEndpoints(l) == 1 })
		expectVerifyPasses(t, c, p)
	})

	// MAAS-D019: Authorino's authorization Service deleted. Its
	// service-CA Secret goes with it (owner reference). authorino-operator
	// v0.21.0 watches its CRs and Deployments, not Services, so Authorino
	// and Kuadrant stay Ready while every authenticated call fails.
	// Doctor names the Service and maasctl install, whose
	// platform/authorino-tls step makes the operator re-create it (listener
	// TLS off while the Secret is missing), re-annotates it and turns TLS
	// on again; before that step learnt it, the install waited for the
	// Service until its timeout.
	t.Run("Authorino Service deleted", func(t *testing.T) {
		restore(t)
		ctx := context.Background()
		if err := c.clients.Kube.CoreV1().Services(authorinoNS).Delete(ctx, authorinoSvc, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitList(t, c, verify.SecretGVK, authorinoNS, "", 2*time.Minute, "Secret authorino-server-cert collected with its Service",
			func(l []*unstructured.Unstructured) bool {
				for _, o := range l {
					if o.GetName() == "authorino-server-cert" {
						return false
					}
				}
				return true
			})
		if rep, r := verifyRun(t, c, p); r.exit != 1 {
			t.Errorf("verify with Authorino's Service deleted: exit %d, failed %v, want 1\n%s", r.exit, rep.FailedCodes(), r.stdout)
		}
		object := "Service " + authorinoNS + "/" + authorinoSvc
		fix := expectNamed(t, c, p, doctor.CodeAuthService, object)
		rep, _ := doctorRun(t, c, nil)
		if f := findingOf(rep, doctor.CodeAuthService, object); f == nil || !strings.Contains(f.Evidence, "Authorino authorino Ready=True") || !strings.Contains(f.Cause, "authorino-server-cert") ||
			!strings.HasPrefix(fix, "maasctl install   (its step platform/authorino-tls turns Authorino's listener TLS off") {
			t.Errorf("finding %+v: want evidence Authorino Ready, the cause naming Secret authorino-server-cert and the fix maasctl install", f)
		}
		// The fix, run as printed; the install says what it did.
		r := c.maasctl(t, "install", "-o", "json")
		if r.exit != 0 || !strings.Contains(r.stdout, "turning listener TLS off until the service CA re-issues the certificate") {
			t.Fatalf("maasctl install: exit %d, want 0 and the platform/authorino-tls step turning listener TLS off\n%s\n%s", r.exit, r.stdout, r.stderr)
		}
		expectVerifyPasses(t, c, p)
		svc, err := c.clients.Kube.CoreV1().Services(authorinoNS).Get(ctx, authorinoSvc, metav1.GetOptions{})
		if err != nil || svc.Annotations["service.beta.openshift.io/serving-cert-secret-name"] != "authorino-server-cert" {
			t.Errorf("after the fix: Service %s annotations %v, err %v", authorinoSvc, svc.GetAnnotations(), err)
		}
		waitList(t, c, verify.AuthorinoGVK, authorinoNS, "", time.Minute, "Authorino with listener TLS on again", func(l []*unstructured.Unstructured) bool {
			if len(l) != 1 {
				return false
			}
			on, _, _ := unstructured.NestedBool(l[0].Object, "spec", "listener", "tls", "enabled")
			return on
		})
	})

	// MAAS-D003, certificate branch: the Gateway's Certificate is pointed
	// at another issuer outside the inventory and its Secret is gone, so
	// cert-manager issues nothing and the listener cannot resolve its
	// certificate. Doctor names the changed field and maasctl install,
	// which re-applies the Certificate from the inventory.
	t.Run("Gateway Certificate changed outside the inventory", func(t *testing.T) {
		restore(t)
		patchObject(t, c, verify.CertificateGVK, "openshift-ingress", "maas-default-gateway-cert", `{"spec":{"issuerRef":{"name":"someone-elses-issuer"}}}`)
		if err := c.clients.Kube.CoreV1().Secrets("openshift-ingress").Delete(context.Background(), "maas-gateway-tls", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		waitList(t, c, verify.GatewayGVK, "openshift-ingress", "", 2*time.Minute, "Gateway not Programmed", func(l []*unstructured.Unstructured) bool {
			for _, g := range l {
				if pc, ok := waiters.GetCondition(g, "Programmed"); ok && pc.Status != "True" {
					return true
				}
			}
			return false
		})
		if rep, r := verifyRun(t, c, p, "--live-only"); r.exit != 1 {
			t.Errorf("verify --live-only with the Certificate changed: exit %d, failed %v, want 1\n%s", r.exit, rep.FailedCodes(), r.stdout)
		}
		object := "Gateway openshift-ingress/maas-default-gateway"
		fix := expectNamed(t, c, p, doctor.CodeGatewayNotProgrammed, object)
		rep, _ := doctorRun(t, c, nil)
		if f := findingOf(rep, doctor.CodeGatewayNotProgrammed, object); f == nil || !strings.Contains(f.Evidence, `spec.issuerRef.name "someone-elses-issuer"`) ||
			!strings.HasPrefix(fix, "maasctl install   (re-applies Certificate openshift-ingress/maas-default-gateway-cert") {
			t.Errorf("finding %+v: want the changed issuerRef as evidence and maasctl install re-applying the Certificate as the fix", f)
		}
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
	})

	// MAAS-D015: the ExternalProvider's Secret reference is changed outside
	// the inventory; the MaaS controller reports it Failed (SecretNotFound)
	// although the inventory's Secret exists. Doctor names the changed
	// field and maasctl install, which re-applies the provider.
	t.Run("ExternalProvider changed outside the inventory", func(t *testing.T) {
		restore(t)
		patchObject(t, c, verify.ExternalProviderGVK, modelNS, "llama-coder-provider", `{"spec":{"auth":{"secretRef":{"name":"someone-elses-key"}}}}`)
		waitList(t, c, verify.ExternalProviderGVK, modelNS, "", 2*time.Minute, "ExternalProvider not Ready", func(l []*unstructured.Unstructured) bool {
			for _, u := range l {
				if ph, _, _ := unstructured.NestedString(u.Object, "status", "phase"); u.GetName() == "llama-coder-provider" && ph != "Ready" {
					return true
				}
			}
			return false
		})
		object := "ExternalProvider " + modelNS + "/llama-coder-provider"
		fix := expectNamed(t, c, p, doctor.CodeProviderNotReady, object)
		if want := "maasctl install   (re-applies ExternalProvider " + modelNS + "/llama-coder-provider from the inventory)"; fix != want {
			t.Errorf("fix %q, want %q", fix, want)
		}
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
	})

	t.Run("model server scaled to 0", func(t *testing.T) {
		restore(t)
		t.Cleanup(func() {
			if t.Failed() {
				runLlamaCoder(t, c, 1)
			}
		})
		runLlamaCoder(t, c, 0)
		fix := expectNamed(t, c, p, doctor.CodeModelNotServing, "Service "+modelNS+"/llama-coder")
		if want := "oc scale deployment llama-coder -n " + modelNS + " --replicas=1"; fix != want {
			t.Errorf("fix %q, want %q", fix, want)
		}
		applyFix(t, c, fix)
		waitList(t, c, verify.EndpointSliceGVK, modelNS, "kubernetes.io/service-name=llama-coder", 2*time.Minute, "llama-coder ready again",
			func(l []*unstructured.Unstructured) bool { return readyEndpoints(l) == 1 })
		expectVerifyPasses(t, c, p)
	})

	t.Run("auth policy changed outside the inventory", func(t *testing.T) {
		restore(t)
		patchObject(t, c, verify.MaaSAuthPolicyGVK, maasNS, accessPolicy, `{"spec":{"subjects":{"groups":[{"name":"developers"}]}}}`)
		waitList(t, c, verify.MaaSAuthPolicyGVK, maasNS, "", time.Minute, "MaaSAuthPolicy Active", phaseIs("Active"))
		fix := expectNamed(t, c, p, doctor.Code403, "MaaSModelRef "+modelNS+"/"+modelName)
		applyFix(t, c, fix)
		expectVerifyPasses(t, c, p)
	})

	t.Run("endpoint unreachable", func(t *testing.T) {
		notFound := httptest.NewServer(http.NotFoundHandler())
		defer notFound.Close()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := "http://" + l.Addr().String()
		l.Close()
		for _, ep := range []string{closed, notFound.URL} {
			r := c.maasctl(t, "doctor", "-o", "json", "--endpoint", ep)
			if r.exit != 1 || !strings.Contains(r.stdout, doctor.CodeEndpointUnreachable) || !strings.Contains(r.stdout, "--endpoint https://") {
				t.Errorf("doctor --endpoint %s: exit %d, want 1 with %s naming the Route's endpoint\n%s", ep, r.exit, doctor.CodeEndpointUnreachable, r.stdout)
			}
		}
		// The fix is the endpoint the Route publishes; here that host
		// name is served by the test's data plane.
		expectVerifyPasses(t, c, p)
	})
}

// TestDoctorAccessJudgedByInventory: installed from an inventory that
// grants a group the admin is not in (DEPLOYMENT.md "Grant access to
// specific groups"), doctor run by the admin exits 0 and says "you are not
// in ..." as information; the same live state judged against the default
// inventory is drift, an error fixed by maasctl install.
func TestDoctorAccessJudgedByInventory(t *testing.T) {
	parallel(t)
	fullOnly(t, "doctor judges group access against the installed inventory (TestVerifyDoctorGather's doctor subtests cover doctor on a live install)")
	c := newCluster(t, clusterOptions{})
	inv := inventory.Default()
	for i := range inv.AuthPolicies {
		inv.AuthPolicies[i].Groups = []string{"developers"}
	}
	for i := range inv.Subscriptions {
		inv.Subscriptions[i].Groups = []string{"developers"}
	}
	b, err := yaml.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(c.dir, "site.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, c.install(t, "-f", file))
	runLlamaCoder(t, c, 1)
	rep, r := doctorRun(t, c, nil, "-f", file)
	if r.exit != 0 || len(rep.Errors()) > 0 {
		t.Fatalf("doctor -f site.yaml by an admin outside the granted groups: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	}
	f := findingOf(rep, doctor.CodeNotInGroups, "MaaSModelRef "+modelNS+"/"+modelName)
	if f == nil || f.Severity != doctor.Info || !strings.Contains(f.Evidence, "you are not in authPolicies "+accessPolicy+" (groups developers") {
		t.Fatalf("no information %s saying 'you are not in ...': %+v\n%s", doctor.CodeNotInGroups, f, r.stdout)
	}
	text := c.maasctl(t, "doctor", "--live-only", "-f", file)
	if text.exit != 0 || !strings.Contains(text.stdout, "you are not in") {
		t.Errorf("text doctor: exit %d\n%s", text.exit, text.stdout)
	}
	// Probing the data path as that admin is refused, as intended.
	p := startPlane(t, c)
	if rep, r := doctorRun(t, c, p, "-f", file); r.exit != 0 || len(rep.Errors()) > 0 || !strings.Contains(r.stdout, "you are not in") {
		t.Errorf("doctor -f site.yaml with the data path: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	}
	// Without -f, doctor judges against the inventory the cluster was
	// installed from (site.yaml), and says so.
	rep, r = doctorRun(t, c, nil)
	if r.exit != 0 || len(rep.Errors()) > 0 || !strings.Contains(r.stderr, "judging the cluster against the inventory installed from "+file) {
		t.Fatalf("doctor without -f after install -f site.yaml: exit %d, codes %v\nstdout:\n%s\nstderr:\n%s", r.exit, rep.Codes(), r.stdout, r.stderr)
	}
	// Judged against the default inventory (--defaults) the groups have
	// drifted; the fix, run as printed, goes back to the defaults.
	fix := ""
	rep, r = doctorRun(t, c, nil, "--defaults")
	if f := findingOf(rep, doctor.Code403, "MaaSModelRef "+modelNS+"/"+modelName); r.exit != 1 || f == nil {
		t.Fatalf("doctor --defaults: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	} else {
		fix = f.Fix
	}
	if !strings.Contains(fix, "maasctl install --defaults") {
		t.Errorf("doctor --defaults fix %q does not name 'maasctl install --defaults' (a plain install stops on a cluster installed from site.yaml)", fix)
	}
	applyFix(t, c, fix)
	if rep, r := doctorRun(t, c, nil); r.exit != 0 || len(rep.Errors()) > 0 {
		t.Fatalf("doctor after the fix: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	}
	if vr := c.maasctl(t, "verify", "--live-only"); vr.exit != 0 {
		t.Fatalf("verify --live-only after the fix: exit %d\n%s", vr.exit, vr.stdout)
	}
}

// TestDoctorNamesStepDrift: doctor covers each install step's own live
// Check, not only what verify reads. With the dashboard's MaaS view turned
// off and the LeaderWorkerSetOperator instance deleted (no verify check
// reads either), doctor names both steps (MAAS-D030) with "maasctl
// install", and that fix, applied as printed, leaves doctor clean.
func TestDoctorNamesStepDrift(t *testing.T) {
	parallel(t)
	fullOnly(t, "doctor runs each step's live Check (MAAS-D030) and the printed fix leaves it clean (TestVerifyDoctorGather's doctor subtests cover doctor on a live install)")
	c := newCluster(t, clusterOptions{})
	mustSucceed(t, c.install(t))
	runLlamaCoder(t, c, 1)
	if rep, r := doctorRun(t, c, nil); r.exit != 0 || len(rep.Errors()) > 0 {
		t.Fatalf("doctor on a fresh install: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	}
	inv := inventory.Default()
	dash := schema.GroupVersionKind{Group: "opendatahub.io", Version: "v1alpha", Kind: "OdhDashboardConfig"}
	patchObject(t, c, dash, inv.RHOAI.ApplicationsNamespace, inv.RHOAI.DashboardConfigName, `{"spec":{"dashboardConfig":{"modelAsService":false}}}`)
	lws := schema.GroupVersionKind{Group: "operator.openshift.io", Version: "v1", Kind: "LeaderWorkerSetOperator"}
	deleteGone(t, c, lws, "", "cluster")

	rep, r := doctorRun(t, c, nil)
	var fix string
	for _, step := range []string{"rhoai/dashboard", "operators/lws-instance"} {
		f := findingOf(rep, doctor.CodeStepNotConverged, "step "+step)
		if r.exit != 1 || f == nil || !strings.HasPrefix(f.Evidence, "drifted: ") || !strings.HasPrefix(f.Fix, "maasctl install") {
			t.Fatalf("doctor: exit %d, want 1 with %s on step %s (drifted, fix maasctl install); codes %v\n%s", r.exit, doctor.CodeStepNotConverged, step, rep.Codes(), r.stdout)
		}
		fix = f.Fix
	}
	applyFix(t, c, fix)
	if rep, r := doctorRun(t, c, nil); r.exit != 0 || len(rep.Errors()) > 0 {
		t.Fatalf("doctor after the fix: exit %d, codes %v\n%s", r.exit, rep.Codes(), r.stdout)
	}
	if got := get(t, c, "opendatahub.io/v1alpha", "OdhDashboardConfig", inv.RHOAI.ApplicationsNamespace, inv.RHOAI.DashboardConfigName); !nestedBool(got, "spec", "dashboardConfig", "modelAsService") {
		t.Errorf("the fix did not turn the dashboard's MaaS view back on: %v", got.Object["spec"])
	}
}

func nestedBool(u *unstructured.Unstructured, fields ...string) bool {
	v, _, _ := unstructured.NestedBool(u.Object, fields...)
	return v
}
