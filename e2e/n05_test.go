package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// wasmPluginCRD is a stand-in for Istio's WasmPlugin CRD (case N05 loads
// it as a fake CRD): the group, version and kind of
// extensions.istio.io/v1alpha1 WasmPlugin, any spec.
const wasmPluginCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: wasmplugins.extensions.istio.io}
spec:
  group: extensions.istio.io
  scope: Namespaced
  names: {kind: WasmPlugin, listKind: WasmPluginList, plural: wasmplugins, singular: wasmplugin}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// n05WasmPlugin is the case's trigger state: the WasmPlugin Kuadrant
// writes for the MaaS Gateway, rate-limit services with mode.
func n05WasmPlugin(mode string) string {
	return fmt.Sprintf(`apiVersion: extensions.istio.io/v1alpha1
kind: WasmPlugin
metadata: {name: kuadrant-maas-default-gateway, namespace: openshift-ingress}
spec:
  targetRefs: [{group: gateway.networking.k8s.io, kind: Gateway, name: maas-default-gateway}]
  pluginConfig:
    services:
      auth-service: {type: auth, endpoint: kuadrant-auth-service, failureMode: deny, timeout: 200ms}
      ratelimit-check-service: {type: ratelimit-check, endpoint: kuadrant-ratelimit-service, failureMode: %[1]s, timeout: 100ms}
      ratelimit-report-service: {type: ratelimit-report, endpoint: kuadrant-ratelimit-service, failureMode: %[1]s, timeout: 100ms}`, mode)
}

// TestN05RateLimitFailsClosed: Kuadrant's rate limiting fails open
// unless deny is configured and reaches the data plane (case N05).
//
// What maasctl already did before this test (and TestB19RHCLSubscriptionEnv
// covers): kuadrant.rateLimitFailureMode (default deny) becomes the three
// RATELIMIT_*_FAILURE_MODE variables of the RHCL Subscription's env, the
// Kuadrant CR waits for an operator pod running with them, verify
// MAAS-V013 names a missing one. New here: verify MAAS-V017 reads the
// effective value, the WasmPlugin Kuadrant writes for the Gateway
// (RATELIMIT_FAIL_OPEN), and the variants: a Subscription value patched
// to allow (present but wrong, not missing), the inventory choosing allow,
// and a bad value refused before any write.
func TestN05RateLimitFailsClosed(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	ctx := context.Background()
	crd := filepath.Join(t.TempDir(), "wasmplugin-crd.yaml")
	if err := os.WriteFile(crd, []byte(wasmPluginCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDs(ctx, c.env.RESTConfig(), crd); err != nil {
		t.Fatal(err)
	}
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180"))
	verifyLive := func(t *testing.T, args ...string) (map[string]verify.Check, run) {
		t.Helper()
		r := c.maasctl(t, append([]string{"verify", "--live-only", "-o", "json"}, args...)...)
		var rep verify.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("verify -o json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		out := map[string]verify.Check{}
		for _, ch := range rep.Checks {
			out[ch.Code] = ch
		}
		return out, r
	}
	plugin := lobj{"extensions.istio.io/v1alpha1", "WasmPlugin", "openshift-ingress", "kuadrant-maas-default-gateway"}

	t.Run("the WasmPlugin fails open: RATELIMIT_FAIL_OPEN until Kuadrant rewrites it", func(t *testing.T) {
		c.create(t, n05WasmPlugin("allow"))
		v, r := verifyLive(t)
		ch := v[verify.CodeFailureModes]
		if r.exit == 0 || ch.Result != verify.Fail {
			t.Fatalf("verify exit %d, %s %s (%s): want failed on a fail-open WasmPlugin", r.exit, ch.Code, ch.Result, ch.Detail)
		}
		mustContain(t, "MAAS-V017", ch.Cause+" "+ch.Detail, verify.RateLimitFailOpen, "gateway maas-default-gateway", "ratelimit-check-service (ratelimit-check) failureMode allow", "ratelimit-report-service (ratelimit-report) failureMode allow", "wants deny")
		if strings.Contains(ch.Detail, "auth-service") {
			t.Errorf("MAAS-V017 names the auth service, which fails closed: %s", ch.Detail)
		}
		d := c.maasctl(t, "doctor", "--live-only", "-o", "json")
		var drep doctor.Report
		if err := json.Unmarshal([]byte(d.stdout), &drep); err != nil {
			t.Fatalf("doctor -o json: %v\n%s", err, d.stderr)
		}
		f := findingOf(&drep, doctor.CodeOperatorEnv, "WasmPlugin openshift-ingress/kuadrant-maas-default-gateway")
		if f == nil || d.exit == 0 || !strings.Contains(f.Evidence, verify.CodeFailureModes) || !strings.Contains(f.Cause, verify.RateLimitFailOpen) {
			t.Fatalf("doctor exit %d, no %s finding on the WasmPlugin with %s: %+v", d.exit, doctor.CodeOperatorEnv, verify.RateLimitFailOpen, drep.Findings)
		}
		// The test's Kuadrant: it writes deny once the operator
		// Deployment's template holds the three variables (maasctl put
		// them in the Subscription; OLM copied them).
		want := inventory.Default().KuadrantOperatorEnv()
		deadline := time.Now().Add(time.Minute)
		for {
			dep := get(t, c, "apps/v1", "Deployment", "openshift-operators", "kuadrant-operator-controller-manager")
			cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
			env, _, _ := unstructured.NestedSlice(cs[0].(map[string]any), "env")
			miss := inventory.MissingEnv(inventory.EnvByName(env), want)
			if len(miss) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the operator Deployment's template lacks %v", miss)
			}
			time.Sleep(200 * time.Millisecond)
		}
		c.patch(t, plugin, types.MergePatchType, `{"spec":{"pluginConfig":{"services":{"ratelimit-check-service":{"failureMode":"deny"},"ratelimit-report-service":{"failureMode":"deny"}}}}}`)
		v, r = verifyLive(t)
		if ch := v[verify.CodeFailureModes]; r.exit != 0 || ch.Result != verify.Pass {
			t.Errorf("verify after Kuadrant wrote deny: exit %d, %s %s (%s)\n%s", r.exit, ch.Code, ch.Result, ch.Detail, r.stderr)
		}
	})

	t.Run("a Subscription value patched to allow is named and restored", func(t *testing.T) {
		sub := lobj{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"}
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		i := -1
		for j, e := range env {
			if e.(map[string]any)["name"] == inventory.EnvRateLimitCheckFailure {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("spec.config.env has no %s: %v", inventory.EnvRateLimitCheckFailure, env)
		}
		// Someone opens the rate limits on the Subscription by hand: the
		// variable is there, with the fail-open value.
		c.patch(t, sub, types.JSONPatchType, fmt.Sprintf(`[{"op":"replace","path":"/spec/config/env/%d/value","value":"allow"}]`, i))
		v, r := verifyLive(t)
		ch := v[verify.CodeOperatorEnv]
		if r.exit == 0 || ch.Result != verify.Fail {
			t.Fatalf("verify exit %d, %s %s (%s): want failed on RATELIMIT_CHECK_SERVICE_FAILURE_MODE=allow", r.exit, ch.Code, ch.Result, ch.Detail)
		}
		mustContain(t, "MAAS-V013", ch.Detail+" "+ch.Cause, inventory.EnvRateLimitCheckFailure+"=deny", "fail open")
		again := c.install(t, "--set", "waitTimeoutSeconds=180")
		mustSucceed(t, again)
		mustContain(t, "operators/rhcl progress", progress(again, "operators/rhcl"), inventory.EnvRateLimitCheckFailure)
		env, _, _ = unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		if got := inventory.EnvByName(env)[inventory.EnvRateLimitCheckFailure]; got != "deny" {
			t.Errorf("after the re-run %s=%q, want deny", inventory.EnvRateLimitCheckFailure, got)
		}
		if v, r := verifyLive(t); r.exit != 0 {
			t.Errorf("verify after the re-run: exit %d, %s %s", r.exit, v[verify.CodeOperatorEnv].Result, v[verify.CodeOperatorEnv].Detail)
		}
	})

	t.Run("the inventory's mode: a bad value is refused before any write, allow is honoured", func(t *testing.T) {
		bad := c.install(t, "--set", "kuadrant.rateLimitFailureMode=open")
		if bad.exit != 2 {
			t.Errorf("install with kuadrant.rateLimitFailureMode=open: exit %d, want 2", bad.exit)
		}
		mustContain(t, "install stderr", bad.stderr, "kuadrant.rateLimitFailureMode", "deny", "allow")
		if s := summaryOrNil(bad.events); s != nil && s.Writes != 0 {
			t.Errorf("the refused install wrote %d times", s.Writes)
		}
		// allow on purpose: the env holds allow and a fail-open
		// WasmPlugin is what the inventory asked for. The test's Kuadrant
		// writes the WasmPlugin's rate-limit modes from the operator
		// Deployment's template, as the operator does once it runs with
		// that env; install's last step (verify) must see allow there.
		kctx, stop := context.WithCancel(ctx)
		defer stop()
		go fakeKuadrantFailureModes(kctx, c, plugin)
		mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180", "--set", "kuadrant.rateLimitFailureMode=allow"))
		sub := lobj{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"}
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		have := inventory.EnvByName(env)
		for _, n := range []string{inventory.EnvRateLimitFailure, inventory.EnvRateLimitCheckFailure, inventory.EnvRateLimitReportFailure} {
			if have[n] != "allow" {
				t.Errorf("%s=%q, want allow", n, have[n])
			}
		}
		if v, _ := verifyLive(t, "--set", "kuadrant.rateLimitFailureMode=allow"); v[verify.CodeFailureModes].Result != verify.Pass {
			t.Errorf("MAAS-V017 with the inventory's allow: %s %s", v[verify.CodeFailureModes].Result, v[verify.CodeFailureModes].Detail)
		}
	})
}

// fakeKuadrantFailureModes stands for the Kuadrant operator's WasmPlugin
// reconcile (kuadrant-operator internal/wasm): until ctx ends, it writes
// the rate-limit services' failureMode of plugin from
// RATELIMIT_CHECK_SERVICE_FAILURE_MODE of the operator Deployment's
// template, once that differs from what the plugin holds.
func fakeKuadrantFailureModes(ctx context.Context, c *cluster, plugin lobj) {
	deps := c.clients.Kube.AppsV1().Deployments("openshift-operators")
	ri, _, err := c.clients.Resource(plugin.stub().GroupVersionKind(), plugin.ns)
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		d, err := deps.Get(ctx, "kuadrant-operator-controller-manager", metav1.GetOptions{})
		if err != nil || len(d.Spec.Template.Spec.Containers) == 0 {
			continue
		}
		mode := ""
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == inventory.EnvRateLimitCheckFailure {
				mode = e.Value
			}
		}
		p, err := ri.Get(ctx, plugin.name, metav1.GetOptions{})
		if err != nil || mode == "" {
			continue
		}
		if cur, _, _ := unstructured.NestedString(p.Object, "spec", "pluginConfig", "services", "ratelimit-check-service", "failureMode"); cur == mode {
			continue
		}
		patch := fmt.Sprintf(`{"spec":{"pluginConfig":{"services":{"ratelimit-check-service":{"failureMode":%q},"ratelimit-report-service":{"failureMode":%q}}}}}`, mode, mode)
		_, _ = ri.Patch(ctx, plugin.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
}

// summaryOrNil is the run's summary event, nil when it has none.
func summaryOrNil(evs []steps.Event) *steps.Summary {
	for _, ev := range evs {
		if ev.Summary != nil {
			return ev.Summary
		}
	}
	return nil
}
