package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maasctl/maasctl/inventory"
)

var gvrKuadrants = schema.GroupVersionResource{Group: "kuadrant.io", Version: "v1beta1", Resource: "kuadrants"}

// rhclEnv is the env the default inventory keeps in the RHCL Subscription.
var rhclEnv = inventory.Default().KuadrantOperatorEnv()

// podRunsWith reports whether every container of pod holds want.
func podRunsWith(pod *unstructured.Unstructured, want []inventory.EnvVar) bool {
	cs, _, _ := unstructured.NestedSlice(pod.Object, "spec", "containers")
	for _, c := range cs {
		env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
		if len(inventory.MissingEnv(inventory.EnvByName(env), want)) > 0 {
			return false
		}
	}
	return len(cs) > 0
}

// TestB19RHCLSubscriptionEnv: the RHCL Subscription's spec.config.env is a
// keyed set (case B19, with N05's fail-closed rate limits). An entry maasctl
// does not own survives, the Kuadrant CR is created only once an operator
// pod runs with the env, a re-run writes nothing; a JSON merge patch that
// wipes the list is named by verify and undone by a re-run. The real OLM
// copies the env into the operator's Deployment.
func TestB19RHCLSubscriptionEnv(t *testing.T) {
	parallel(t)
	const sel = "app=kuadrant,control-plane=controller-manager"
	t.Run("an earlier Subscription keeps its entries and Kuadrant waits for the env", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{})
		// RHCL subscribed by hand before maasctl: the gateway controller
		// name and a user's FOO, no timeout, no failure modes.
		c.create(t, `apiVersion: operators.coreos.com/v1alpha1
kind: Subscription
metadata: {name: rhcl-operator, namespace: openshift-operators}
spec:
  name: rhcl-operator
  channel: stable-1.4
  source: redhat-operators
  sourceNamespace: openshift-marketplace
  installPlanApproval: Automatic
  config:
    env:
    - {name: ISTIO_GATEWAY_CONTROLLER_NAMES, value: openshift.io/gateway-controller/v1}
    - {name: FOO, value: bar}`)
		first := waitPod(t, c, "openshift-operators", sel)
		if podRunsWith(first, rhclEnv) {
			t.Fatalf("pod %s already runs with maasctl's env: the case proves nothing", first.GetName())
		}
		pods := c.record(t, gvrPods, "openshift-operators", sel)
		kuadrants := c.record(t, gvrKuadrants, "kuadrant-system", "")
		r := c.install(t, "--only", kuadrantSteps, "--set", "waitTimeoutSeconds=180")
		mustSucceed(t, r)

		sub := get(t, c, "operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator")
		env, _, _ := unstructured.NestedSlice(sub.Object, "spec", "config", "env")
		have := inventory.EnvByName(env)
		if miss := inventory.MissingEnv(have, rhclEnv); len(miss) > 0 {
			t.Errorf("Subscription spec.config.env lacks %v: %v", miss, env)
		}
		if have["FOO"] != "bar" {
			t.Errorf("the user's FOO=bar is gone from spec.config.env: %v", env)
		}
		withEnv := pods.first(func(e recorded) bool { return e.typ != watch.Deleted && podRunsWith(e.obj, rhclEnv) })
		created := kuadrants.first(func(e recorded) bool { return e.typ == watch.Added })
		switch {
		case withEnv < 0:
			t.Errorf("no Kuadrant operator pod ever ran with %v", rhclEnv)
		case created < 0:
			t.Errorf("Kuadrant kuadrant-system/kuadrant was never created")
		case created < withEnv:
			t.Errorf("Kuadrant created at resourceVersion %d, before the first operator pod with the env (%d): the operator would run without it", created, withEnv)
		}
		mustContain(t, "operators/rhcl progress", progress(r, "operators/rhcl"), "AUTH_SERVICE_TIMEOUT", "RATELIMIT_CHECK_SERVICE_FAILURE_MODE", "1 other entries kept")

		again := c.install(t, "--only", kuadrantSteps)
		mustSucceed(t, again)
		if s := summary(t, again.events); s.Writes != 0 {
			t.Errorf("the re-run wrote %d times, want 0", s.Writes)
		}
	})

	t.Run("a merge patch that wipes the env is named by verify and undone by a re-run", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{})
		mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180"))
		sub := lobj{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"}
		// The field failure: a JSON merge patch of spec.config.env replaces
		// the list.
		c.patch(t, sub, types.MergePatchType, `{"spec":{"config":{"env":[{"name":"AUTH_SERVICE_TIMEOUT","value":"2s"}]}}}`)
		v := c.maasctl(t, "verify", "--live-only")
		if v.exit == 0 {
			t.Fatalf("verify passed on a Subscription without the gateway controller name:\n%s", v.stdout)
		}
		mustContain(t, "verify output", v.stdout, "MAAS-V013", "ISTIO_GATEWAY_CONTROLLER_NAMES=openshift.io/gateway-controller/v1", "RATELIMIT_CHECK_SERVICE_FAILURE_MODE=deny", "maasctl install")

		r := c.install(t, "--set", "waitTimeoutSeconds=180")
		mustSucceed(t, r)
		mustContain(t, "operators/rhcl progress", progress(r, "operators/rhcl"), "ISTIO_GATEWAY_CONTROLLER_NAMES")
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		if miss := inventory.MissingEnv(inventory.EnvByName(env), rhclEnv); len(miss) > 0 {
			t.Errorf("after the re-run spec.config.env still lacks %v", miss)
		}
		// --endpoint means nothing with --live-only, and verify says so
		// (issue 17) instead of ignoring it silently.
		v = c.maasctl(t, "verify", "--live-only", "--endpoint", "https://127.0.0.1:1")
		if v.exit != 0 || !strings.Contains(v.stdout, "MAAS-V013") {
			t.Errorf("verify after the re-run: exit %d\n%s", v.exit, v.stdout)
		}
		mustContain(t, "verify --live-only --endpoint stderr", v.stderr, "--live-only checks no data path: --endpoint is ignored")
	})
}

// waitPod waits (at most 2 minutes) for a Running pod of selector sel in
// ns and returns it.
func waitPod(t *testing.T, c *cluster, ns, sel string) *unstructured.Unstructured {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		l, err := c.clients.Dynamic.Resource(gvrPods).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err == nil {
			for i := range l.Items {
				if p, _, _ := unstructured.NestedString(l.Items[i].Object, "status", "phase"); p == "Running" {
					return &l.Items[i]
				}
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no Running pod %s in %s after 2 minutes (last error %v)", sel, ns, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
