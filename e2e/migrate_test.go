package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/migrate"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/waiters"
)

// The 3.2-style cluster of the migration tests: the local control plane
// with the 3.5 CRDs an upgraded cluster serves (Kuadrant, Authorino,
// KServe, MaaS, and the odh-3.5.0 ModelsAsService for platform-config),
// the simulated operators, a programmed MaaS Gateway, a Ready Kuadrant,
// and the testdata/tiers fixtures: the guide's tier ConfigMap and gateway
// policies, annotated LLMInferenceServices with their KServe routes, and
// the new gateway defaults of maas-controller.

var (
	gvkConfigMap    = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	gvkAuthPolicy   = schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1", Kind: "AuthPolicy"}
	gvkTRLP         = schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1alpha1", Kind: "TokenRateLimitPolicy"}
	gvkLLMISvc      = schema.GroupVersionKind{Group: "serving.kserve.io", Version: "v1alpha2", Kind: "LLMInferenceService"}
	gvkModelRef     = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSModelRef"}
	gvkMaaSAuth     = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSAuthPolicy"}
	gvkMaaSSub      = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSSubscription"}
	gvkMAS          = schema.GroupVersionKind{Group: "components.platform.opendatahub.io", Version: "v1alpha1", Kind: "ModelsAsService"}
	gvkAITenant     = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "AITenant"}
	gvkTenantConfig = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaasTenantConfig"}
)

// objKey names one object for the tests.
type objKey struct {
	gvk      schema.GroupVersionKind
	ns, name string
}

func (k objKey) String() string { return k.gvk.Kind + " " + k.ns + "/" + k.name }

// tierObjects are what the migration removes or changes.
var tierObjects = []objKey{
	{gvkConfigMap, "maas-api", "tier-to-group-mapping"},
	{gvkAuthPolicy, "openshift-ingress", "gateway-auth-policy"},
	{gvkTRLP, "openshift-ingress", "gateway-tier-rate-limits"},
	{gvkLLMISvc, "llm", "my-model"},
	{gvkLLMISvc, "llm", "premium-model"},
}

// untouched are objects the migration must leave alone.
var untouched = []objKey{
	{gvkLLMISvc, "llm", "plain-model"},
	{gvkAuthPolicy, "redhat-ods-applications", "gateway-default-auth"},
	{gvkTRLP, "redhat-ods-applications", "gateway-default-deny"},
}

// newTiersCluster starts the control plane, installs the CRDs, starts the
// simulators with simDelay, and applies the fixtures, waiting until the
// gateway is programmed, Kuadrant is ready and the old policies are
// enforced (so that nothing but maasctl changes them afterwards).
func newTiersCluster(t *testing.T, simDelay map[string]time.Duration) *cluster {
	t.Helper()
	return newTiersClusterOf(t, simDelay, []string{"20-tiers.yaml", "30-models.yaml"},
		routeAccepted("llm", "my-model-kserve-route"), routeAccepted("llm", "premium-model-kserve-route"))
}

// newTiersClusterOf is newTiersCluster with other tier and model fixtures
// (files under testdata/tiers, applied between the Kuadrant and the new
// defaults fixtures) and the model routes to wait for.
func newTiersClusterOf(t *testing.T, simDelay map[string]time.Duration, fixtures []string, routes ...waiters.Target) *cluster {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	olmDelay, simDelay := sim.SplitOLMDelay(simDelay)
	env, err := testenv.Start(ctx, testenv.Options{OperatorPodReadyDelay: olmDelay, RealKuadrant: true})
	if errors.Is(err, testenv.ErrNotBuilt) && os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
		t.Skipf("local control plane not built (%v): run make testenv", err)
	}
	if err != nil {
		t.Fatalf("start local control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stop control plane: %v", err)
		}
	})
	crdDir, err := sim.DefaultCRDDir()
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, pattern := range []string{"kuadrant/*.yaml", "authorino/*.yaml", "kserve/*.yaml", "maas/*.yaml",
		"opendatahub/odh-3.5.0/components.platform.opendatahub.io_modelsasservices.yaml"} {
		m, err := filepath.Glob(filepath.Join(crdDir, pattern))
		if err != nil || len(m) == 0 {
			t.Fatalf("CRDs %s: %v (found %d)", pattern, err, len(m))
		}
		files = append(files, m...)
	}
	ictx, icancel := context.WithTimeout(ctx, 3*time.Minute)
	defer icancel()
	if err := testenv.InstallCRDs(ictx, env.RESTConfig(), files...); err != nil {
		t.Fatal(err)
	}
	clients, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logger, err := zap.Config{
		Level: zap.NewAtomicLevelAt(zap.InfoLevel), Encoding: "json",
		EncoderConfig: zap.NewProductionEncoderConfig(),
		OutputPaths:   []string{filepath.Join(dir, "sim.log")}, ErrorOutputPaths: []string{filepath.Join(dir, "sim.log")},
	}.Build()
	if err != nil {
		t.Fatal(err)
	}
	istioCRDs, err := testenv.IstioCRDFile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	so := sim.Options{Delay: simDelay, Logger: logger, Postgres: env.Postgres().AdminConnString(), IstioCRDs: istioCRDs}
	if ca := env.ServiceCA(); ca != nil {
		so.ServiceCABundle = ca.PEM() // the published service CA bundle holds the control plane's CA too
	}
	h, err := sim.Start(ctx, env.RESTConfig(), so)
	if err != nil {
		t.Fatalf("start simulators: %v", err)
	}
	t.Cleanup(func() { _ = h.Stop() })
	c := &cluster{env: env, clients: clients, dir: dir}

	wctx, wcancel := context.WithTimeout(ctx, 4*time.Minute)
	defer wcancel()
	c.applyTestdata(t, "00-platform.yaml")
	// The Kuadrant operator pod must start after Istio exists (case B01).
	waitAll(t, wctx, c, waiters.Target{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Namespace: "openshift-ingress", Name: "istiod-openshift-gateway"})
	c.applyTestdata(t, append(append([]string{"10-kuadrant.yaml"}, fixtures...), "40-new-defaults.yaml")...)
	waitAll(t, wctx, c, append([]waiters.Target{
		waiters.Target{GVK: schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"},
			Namespace: "openshift-ingress", Name: "maas-default-gateway", Cond: waiters.ConditionTrue("Programmed")},
		waiters.Target{GVK: schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1beta1", Kind: "Kuadrant"},
			Namespace: "kuadrant-system", Name: "kuadrant", Cond: waiters.ConditionTrue("Ready")},
		waiters.Target{GVK: gvkAuthPolicy, Namespace: "openshift-ingress", Name: "gateway-auth-policy", Cond: waiters.ConditionTrue("Enforced")},
		waiters.Target{GVK: gvkTRLP, Namespace: "openshift-ingress", Name: "gateway-tier-rate-limits", Cond: waiters.ConditionTrue("Enforced")},
		waiters.Target{GVK: gvkAuthPolicy, Namespace: "redhat-ods-applications", Name: "gateway-default-auth", Cond: conditionFalse("Accepted")},
		waiters.Target{GVK: gvkTRLP, Namespace: "redhat-ods-applications", Name: "gateway-default-deny", Cond: conditionFalse("Accepted")},
	}, routes...)...)
	return c
}

func conditionFalse(typ string) waiters.Condition {
	return func(u *unstructured.Unstructured) waiters.Result {
		cond, ok := waiters.GetCondition(u, typ)
		return waiters.Result{Done: ok && cond.Status == "False", Status: cond.String()}
	}
}

func routeAccepted(ns, name string) waiters.Target {
	return waiters.Target{GVK: schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"},
		Namespace: ns, Name: name, Cond: func(u *unstructured.Unstructured) waiters.Result {
			parents, _, _ := unstructured.NestedSlice(u.Object, "status", "parents")
			for _, p := range parents {
				pm, _ := p.(map[string]any)
				conds, _ := pm["conditions"].([]any)
				for _, c := range conds {
					cm, _ := c.(map[string]any)
					if cm["type"] == "Accepted" && cm["status"] == "True" {
						return waiters.Result{Done: true, Status: "accepted"}
					}
				}
			}
			return waiters.Result{Status: "not accepted yet"}
		}}
}

func waitAll(t *testing.T, ctx context.Context, c *cluster, targets ...waiters.Target) {
	t.Helper()
	if err := waiters.All(ctx, c.clients, targets...); err != nil {
		t.Fatalf("fixture not ready: %v", err)
	}
}

// testdata decodes the objects of e2e/testdata/tiers/<file>.
func testdata(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "tiers", file))
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(j, &m); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

func (c *cluster) applyTestdata(t *testing.T, files ...string) {
	t.Helper()
	for _, f := range files {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err := testenv.ApplyObjects(ctx, c.env.RESTConfig(), testdata(t, f)...)
		cancel()
		if err != nil {
			t.Fatalf("apply %s: %v", f, err)
		}
	}
}

// lookup reads an object; nil when it does not exist.
func lookup(t *testing.T, c *cluster, k objKey) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(k.gvk)
	u.SetNamespace(k.ns)
	u.SetName(k.name)
	live, err := c.clients.Get(context.Background(), u)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatalf("get %s: %v", k, err)
	}
	return live
}

// resourceVersions reads what a client can change of each object ("" when
// gone): the object without status, resourceVersion and managedFields, as
// JSON. Status writes by the simulated controllers (for example Kuadrant
// re-writing a TokenRateLimitPolicy's conditions after the test edits it)
// bump resourceVersion without anyone changing the object, so comparing
// resourceVersions made "nothing was changed" checks race with the
// controllers.
func resourceVersions(t *testing.T, c *cluster, keys []objKey) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, k := range keys {
		u := lookup(t, c, k)
		if u == nil {
			out[k.String()] = ""
			continue
		}
		u = u.DeepCopy()
		unstructured.RemoveNestedField(u.Object, "status")
		unstructured.RemoveNestedField(u.Object, "metadata", "resourceVersion")
		unstructured.RemoveNestedField(u.Object, "metadata", "managedFields")
		b, err := utiljson.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		out[k.String()] = string(b)
	}
	return out
}

// maasObjects lists every MaaSModelRef, MaaSAuthPolicy and MaaSSubscription.
func maasObjects(t *testing.T, c *cluster) []string {
	t.Helper()
	var out []string
	for _, gvk := range []schema.GroupVersionKind{gvkModelRef, gvkMaaSAuth, gvkMaaSSub} {
		ri, _, err := c.clients.Resource(gvk, "")
		if err != nil {
			t.Fatal(err)
		}
		l, err := ri.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range l.Items {
			out = append(out, fmt.Sprintf("%s %s/%s", gvk.Kind, u.GetNamespace(), u.GetName()))
		}
	}
	sort.Strings(out)
	return out
}

func mustExit(t *testing.T, r run, want int, what string) {
	t.Helper()
	t.Logf("%s (exit %d, %s):\nstdout:\n%s\nstderr:\n%s", what, r.exit, r.wall.Round(time.Millisecond), r.stdout, r.stderr)
	if r.exit != want {
		t.Fatalf("%s: exit %d, want %d\n%s\nstdout:\n%s", what, r.exit, want, failedSummary(r), r.stdout)
	}
}

// TestMigrateTiers is the acceptance test of `maasctl migrate tiers` and
// `maasctl migrate platform-config` on a 3.2-style cluster: a dry run
// changes nothing; the migration creates one auth policy and one
// subscription per tier with the guide's limits and a model ref per
// annotated model, and leaves no old object; a rollback restores every
// backed-up object as it was.
func TestMigrateTiers(t *testing.T) {
	parallel(t)
	c := newTiersCluster(t, nil)
	ctx := context.Background()
	all := append(append([]objKey{}, tierObjects...), untouched...)

	found, objs, err := migrate.DetectTiers(ctx, c.clients)
	if err != nil || !found {
		t.Fatalf("DetectTiers before the migration: found=%v err=%v", found, err)
	}
	wantDetected := []string{
		"AuthPolicy openshift-ingress/gateway-auth-policy",
		"ConfigMap maas-api/tier-to-group-mapping",
		"LLMInferenceService llm/my-model (annotation alpha.maas.opendatahub.io/tiers)",
		"LLMInferenceService llm/premium-model (annotation alpha.maas.opendatahub.io/tiers)",
		"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits",
	}
	if diff := cmp.Diff(wantDetected, objs); diff != "" {
		t.Errorf("DetectTiers objects (-want +got):\n%s", diff)
	}

	t.Run("dry run writes nothing", func(t *testing.T) {
		before := resourceVersions(t, c, all)
		dir := filepath.Join(c.dir, "dry")
		r := c.maasctl(t, "migrate", "tiers", "--dry-run", "--backup-dir", dir)
		mustExit(t, r, 0, "dry run")
		if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
			t.Errorf("dry run changed resourceVersions (-before +after):\n%s", diff)
		}
		if got := maasObjects(t, c); len(got) != 0 {
			t.Errorf("dry run created %v", got)
		}
		for _, s := range []string{
			"gateway-auth-policy", "gateway-default-auth", "old (tier-based)", "new (maas-controller)", "conflict:",
			"token limits:   100/1m tokens per user", "token limits:   50000/1m tokens per user",
			"MaaSSubscription models-as-a-service/tier-premium-subscription owners [premium-users], priority 1, limits 50000/1m per user",
			"Dry run",
		} {
			if !strings.Contains(r.stdout, s) {
				t.Errorf("dry-run output lacks %q:\n%s", s, r.stdout)
			}
		}
		plan, err := os.ReadFile(filepath.Join(dir, migrate.PlanFile))
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(plan), "\nkind: "); n != 6 {
			t.Errorf("plan.yaml has %d objects, want 6 (2 model refs, 2 auth policies, 2 subscriptions):\n%s", n, plan)
		}
		for _, f := range []string{migrate.ManifestFile, migrate.StateFile} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Errorf("dry run backup: %v", err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, migrate.JournalFile)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dry run wrote a journal (%v): it must record no change", err)
		}
	})

	backup := filepath.Join(c.dir, "backup")
	t.Run("migrate", func(t *testing.T) {
		before := resourceVersions(t, c, untouched)
		var lookups atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == migrate.TierLookupPath && r.Method == http.MethodPost {
				lookups.Add(1)
			}
			http.NotFound(w, r)
		}))
		t.Cleanup(srv.Close)
		r := c.maasctl(t, "migrate", "tiers", "--backup-dir", backup, "--timeout", "3m", "--endpoint", srv.URL)
		mustExit(t, r, 0, "migrate")
		if n := lookups.Load(); n != 1 {
			t.Errorf("tier lookup endpoint called %d times, want 1", n)
		}
		for _, k := range tierObjects[:3] {
			if u := lookup(t, c, k); u != nil {
				t.Errorf("%s still exists after the migration", k)
			}
		}
		for _, k := range tierObjects[3:] {
			u := lookup(t, c, k)
			if u == nil {
				t.Fatalf("%s is gone; the migration must only remove its annotation", k)
			}
			if v, ok := u.GetAnnotations()[migrate.TierAnnotation]; ok {
				t.Errorf("%s still has %s=%s", k, migrate.TierAnnotation, v)
			}
		}
		if diff := cmp.Diff(before, resourceVersions(t, c, untouched)); diff != "" {
			t.Errorf("the migration changed objects it must leave alone (-before +after):\n%s", diff)
		}
		if found, objs, err := migrate.DetectTiers(ctx, c.clients); err != nil || found {
			t.Errorf("DetectTiers after the migration: found=%v %v err=%v", found, objs, err)
		}

		wantMaaS := []string{
			"MaaSAuthPolicy models-as-a-service/tier-free-access",
			"MaaSAuthPolicy models-as-a-service/tier-premium-access",
			"MaaSModelRef llm/my-model",
			"MaaSModelRef llm/premium-model",
			"MaaSSubscription models-as-a-service/tier-free-subscription",
			"MaaSSubscription models-as-a-service/tier-premium-subscription",
		}
		if diff := cmp.Diff(wantMaaS, maasObjects(t, c)); diff != "" {
			t.Errorf("MaaS objects (-want +got):\n%s", diff)
		}
		for _, m := range []string{"my-model", "premium-model"} {
			ref := lookup(t, c, objKey{gvkModelRef, "llm", m})
			spec, _, _ := unstructured.NestedMap(ref.Object, "spec", "modelRef")
			if diff := cmp.Diff(map[string]any{"kind": "LLMInferenceService", "name": m}, spec); diff != "" {
				t.Errorf("MaaSModelRef %s spec.modelRef (-want +got):\n%s", m, diff)
			}
			if p, _, _ := unstructured.NestedString(ref.Object, "status", "phase"); p != "Ready" {
				t.Errorf("MaaSModelRef %s phase %q, want Ready", m, p)
			}
		}
		for _, tc := range []struct {
			tier, group string
			models      []any
			limit       int64
			priority    int64
		}{
			{"free", "system:authenticated", []any{ref("my-model")}, 100, 0},
			{"premium", "premium-users", []any{ref("my-model"), ref("premium-model")}, 50000, 1},
		} {
			ap := lookup(t, c, objKey{gvkMaaSAuth, "models-as-a-service", "tier-" + tc.tier + "-access"})
			if diff := cmp.Diff(map[string]any{
				"modelRefs": tc.models,
				"subjects":  map[string]any{"groups": []any{map[string]any{"name": tc.group}}, "users": []any{}},
			}, ap.Object["spec"]); diff != "" {
				t.Errorf("MaaSAuthPolicy %s spec (-want +got):\n%s", tc.tier, diff)
			}
			sub := lookup(t, c, objKey{gvkMaaSSub, "models-as-a-service", "tier-" + tc.tier + "-subscription"})
			var subRefs []any
			for _, m := range tc.models {
				mm := m.(map[string]any)
				subRefs = append(subRefs, map[string]any{"name": mm["name"], "namespace": "llm",
					"tokenRateLimits": []any{map[string]any{"limit": tc.limit, "window": "1m"}}})
			}
			if diff := cmp.Diff(map[string]any{
				"owner":     map[string]any{"groups": []any{map[string]any{"name": tc.group}}, "users": []any{}},
				"priority":  tc.priority,
				"modelRefs": subRefs,
			}, sub.Object["spec"]); diff != "" {
				t.Errorf("MaaSSubscription %s spec (-want +got):\n%s", tc.tier, diff)
			}
			for _, u := range []*unstructured.Unstructured{ap, sub} {
				if p, _, _ := unstructured.NestedString(u.Object, "status", "phase"); p != "Active" {
					t.Errorf("%s %s phase %q, want Active", u.GetKind(), u.GetName(), p)
				}
			}
		}
		// The generated Kuadrant policies are enforced: the MaaS controller's
		// one Gateway-level AuthPolicy (maas-controller v0.2.1 makes no
		// per-model AuthPolicy, issue 18) and a TokenRateLimitPolicy per model.
		for _, k := range []objKey{
			{gvkAuthPolicy, "openshift-ingress", "maas-gateway-auth"},
			{gvkTRLP, "llm", "maas-trlp-my-model"}, {gvkTRLP, "llm", "maas-trlp-premium-model"},
		} {
			u := lookup(t, c, k)
			if u == nil {
				t.Errorf("%s not generated", k)
				continue
			}
			if cond, _ := waiters.GetCondition(u, "Enforced"); cond.Status != "True" {
				t.Errorf("%s %s", k, cond)
			}
		}
		b, err := migrate.OpenBackup(backup)
		if err != nil {
			t.Fatal(err)
		}
		journal, err := b.Journal()
		if err != nil {
			t.Fatal(err)
		}
		counts := map[string]int{}
		for _, e := range journal {
			counts[e.Action]++
		}
		if diff := cmp.Diff(map[string]int{migrate.ActionApplied: 6, migrate.ActionDeleted: 3, migrate.ActionAnnotationRemoved: 2}, counts); diff != "" {
			t.Errorf("journal actions (-want +got):\n%s", diff)
		}
	})

	t.Run("platform-config", func(t *testing.T) {
		c.applyTestdata(t, "50-platform-config.yaml")
		keys := []objKey{{gvkAITenant, "ai-tenants", "models-as-a-service"}, {gvkTenantConfig, "models-as-a-service", "default-tenant"}}
		before := resourceVersions(t, c, keys)
		dry := c.maasctl(t, "migrate", "platform-config", "--dry-run")
		mustExit(t, dry, 0, "platform-config --dry-run")
		if diff := cmp.Diff(before, resourceVersions(t, c, keys)); diff != "" {
			t.Errorf("platform-config --dry-run changed resourceVersions (-before +after):\n%s", diff)
		}
		if !strings.Contains(dry.stdout, "5 field(s) would move") {
			t.Errorf("dry-run report:\n%s", dry.stdout)
		}
		// The old CR is gone after the operator upgrade; its backup is the source.
		mas := lookup(t, c, objKey{gvkMAS, "", "default-modelsasservice"})
		file := filepath.Join(c.dir, "modelsasservice.yaml")
		data, err := yaml.Marshal(mas.Object)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		ri, _, err := c.clients.Resource(gvkMAS, "")
		if err != nil {
			t.Fatal(err)
		}
		if err := ri.Delete(ctx, "default-modelsasservice", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		r := c.maasctl(t, "migrate", "platform-config", "--from-file", file)
		mustExit(t, r, 0, "platform-config")
		for _, s := range []string{
			"spec.gatewayRef.name                         custom-gateway",
			"spec.externalOIDC.ttl                        300",
			"default, left alone",
			"Moved 5 field(s).",
		} {
			if !strings.Contains(strings.Join(strings.Fields(r.stdout), " "), strings.Join(strings.Fields(s), " ")) {
				t.Errorf("report lacks %q:\n%s", s, r.stdout)
			}
		}
		ait := lookup(t, c, keys[0])
		if diff := cmp.Diff(map[string]any{
			"gateway": map[string]any{"name": "custom-gateway"},
			"oidc":    map[string]any{"issuerUrl": "https://keycloak.example.com/realms/maas", "clientId": "maas-client", "ttl": int64(300)},
		}, ait.Object["spec"]); diff != "" {
			t.Errorf("AITenant spec (-want +got):\n%s", diff)
		}
		mtc := lookup(t, c, keys[1])
		for path, want := range map[string]any{
			"spec.apiKeys.maxExpirationDays":     int64(90),
			"spec.telemetry.metrics.captureUser": true,
		} {
			got, _, _ := unstructured.NestedFieldNoCopy(mtc.Object, strings.Split(path, ".")...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("MaasTenantConfig %s = %v, want %v", path, got, want)
			}
		}
		// Defaults stay with their owner (the API server's defaulting), not
		// with maasctl: it must not manage them.
		for _, mf := range mtc.GetManagedFields() {
			if mf.Manager == kube.FieldManager && strings.Contains(string(mf.FieldsV1.Raw), "captureGroup") {
				t.Errorf("maasctl manages captureGroup, a default: %s", mf.FieldsV1.Raw)
			}
		}
		again := c.maasctl(t, "migrate", "platform-config", "--from-file", file)
		mustExit(t, again, 0, "platform-config re-run")
		if !strings.Contains(again.stdout, "Nothing to move") {
			t.Errorf("re-run should find everything in place:\n%s", again.stdout)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		r := c.maasctl(t, "migrate", "tiers", "--rollback", backup, "--timeout", "2m")
		mustExit(t, r, 0, "rollback")
		b, err := migrate.OpenBackup(backup)
		if err != nil {
			t.Fatal(err)
		}
		restored := 0
		for _, e := range b.Manifest.Entries {
			want, err := b.Object(e)
			if err != nil {
				t.Fatal(err)
			}
			gv, _ := schema.ParseGroupVersion(e.Ref.APIVersion)
			live := lookup(t, c, objKey{gv.WithKind(e.Ref.Kind), e.Ref.Namespace, e.Ref.Name})
			if live == nil {
				t.Errorf("%s (%s) missing after rollback", e.Ref, e.Role)
				continue
			}
			for _, p := range [][]string{{"spec"}, {"data"}, {"metadata", "labels"}, {"metadata", "annotations"}} {
				w, _, _ := unstructured.NestedFieldNoCopy(want.Object, p...)
				g, _, _ := unstructured.NestedFieldNoCopy(live.Object, p...)
				if diff := cmp.Diff(w, g); diff != "" {
					t.Errorf("%s %s differs from the backup (-backup +live):\n%s", e.Ref, strings.Join(p, "."), diff)
				}
			}
			restored++
		}
		if restored < len(tierObjects) {
			t.Errorf("compared %d backed-up objects, want at least %d", restored, len(tierObjects))
		}
		if got := maasObjects(t, c); len(got) != 0 {
			t.Errorf("rollback left %v", got)
		}
		found, objs, err := migrate.DetectTiers(ctx, c.clients)
		if err != nil || !found || len(objs) != len(wantDetected) {
			t.Errorf("DetectTiers after rollback: found=%v %v err=%v", found, objs, err)
		}
	})
}

func ref(name string) map[string]any { return map[string]any{"name": name, "namespace": "llm"} }

// TestMigrateTiersRefuses covers the two ways a migration must stop
// without touching the old configuration: a predicate the subscription
// model cannot express stops the plan naming the object (exit 1), and new
// objects that never become ready (the MaaS controller is held back) end
// the wait naming them (exit 4); in both cases nothing old is deleted.
func TestMigrateTiersRefuses(t *testing.T) {
	parallel(t)
	c := newTiersCluster(t, map[string]time.Duration{sim.MaaS: time.Hour})
	all := append(append([]objKey{}, tierObjects...), untouched...)

	t.Run("unmappable predicate", func(t *testing.T) {
		trlp := lookup(t, c, objKey{gvkTRLP, "openshift-ingress", "gateway-tier-rate-limits"})
		orig := trlp.DeepCopy()
		pred := `auth.identity.tier == "premium" && request.path.startsWith("/llm")`
		if err := unstructured.SetNestedSlice(trlp.Object, []any{map[string]any{"predicate": pred}},
			"spec", "limits", "premium-user-tokens", "when"); err != nil {
			t.Fatal(err)
		}
		ri, _, err := c.clients.Resource(gvkTRLP, "openshift-ingress")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ri.Update(context.Background(), trlp, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := resourceVersions(t, c, all)
		r := c.maasctl(t, "migrate", "tiers", "--backup-dir", filepath.Join(c.dir, "blocked"))
		mustExit(t, r, 1, "migrate with an unmappable predicate")
		for _, s := range []string{"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits", "premium-user-tokens", "not a plain comparison", "nothing was changed"} {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
			}
		}
		if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
			t.Errorf("a blocked migration changed objects (-before +after):\n%s", diff)
		}
		if got := maasObjects(t, c); len(got) != 0 {
			t.Errorf("a blocked migration created %v", got)
		}
		live := lookup(t, c, objKey{gvkTRLP, "openshift-ingress", "gateway-tier-rate-limits"})
		live.Object["spec"] = orig.Object["spec"]
		if _, err := ri.Update(context.Background(), live, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("new objects never ready", func(t *testing.T) {
		before := resourceVersions(t, c, all)
		r := c.maasctl(t, "migrate", "tiers", "--backup-dir", filepath.Join(c.dir, "notready"), "--timeout", "15s")
		mustExit(t, r, 4, "migrate while the MaaS controller is held back")
		for _, s := range []string{
			"nothing old was deleted",
			"MaaSAuthPolicy models-as-a-service/tier-free-access",
			"MaaSSubscription models-as-a-service/tier-premium-subscription",
			"MaaSModelRef llm/my-model",
			"--rollback",
		} {
			if !strings.Contains(r.stderr, s) {
				t.Errorf("stderr lacks %q:\n%s", s, r.stderr)
			}
		}
		after := resourceVersions(t, c, all)
		for _, k := range all {
			if after[k.String()] == "" {
				t.Errorf("%s was deleted although the new objects never became ready", k)
			}
		}
		if diff := cmp.Diff(before, after); diff != "" {
			t.Errorf("old objects changed although the new ones never became ready (-before +after):\n%s", diff)
		}
		if got := maasObjects(t, c); len(got) != 6 {
			t.Errorf("MaaS objects %v, want the 6 created ones (left for a re-run or a rollback)", got)
		}
		// The rollback of a failed migration removes what it created.
		rb := c.maasctl(t, "migrate", "tiers", "--rollback", filepath.Join(c.dir, "notready"), "--timeout", "1m")
		mustExit(t, rb, 0, "rollback of the failed migration")
		if got := maasObjects(t, c); len(got) != 0 {
			t.Errorf("rollback left %v", got)
		}
		if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
			t.Errorf("rollback of a migration that deleted nothing changed old objects (-before +after):\n%s", diff)
		}
	})
}

// TestMigrateTiersResumes (issue 17, "Migration does not resume as it
// says"): a migration that stopped waiting for the new objects is re-run
// with the same --backup-dir and goes on from there (its backup of the
// state before the migration kept, its journal appended to); a rollback of
// that directory then undoes both runs. A migration resumed from a second
// backup directory instead leaves the first one's objects to the first
// one's rollback and names it. Red before: the re-run was refused ("exists
// and is not empty") and the second directory's rollback removed nothing
// without saying why.
func TestMigrateTiersResumes(t *testing.T) {
	parallel(t)
	// The MaaS controller reconciles the new objects 40 s after they are
	// created: a run with a 10 s timeout stops waiting.
	c := newTiersCluster(t, map[string]time.Duration{sim.MaaS: 40 * time.Second})
	all := append(append([]objKey{}, tierObjects...), untouched...)

	first := filepath.Join(c.dir, "first")
	r := c.maasctl(t, "migrate", "tiers", "--backup-dir", first, "--timeout", "10s")
	mustExit(t, r, 4, "migrate while the MaaS controller is slow")
	if !strings.Contains(r.stderr, "re-run maasctl migrate tiers --backup-dir "+first) {
		t.Errorf("the stop should say how to resume:\n%s", r.stderr)
	}
	manifest, err := os.ReadFile(filepath.Join(first, migrate.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("a dry run into it is refused", func(t *testing.T) {
		r := c.maasctl(t, "migrate", "tiers", "--dry-run", "--backup-dir", first)
		mustExit(t, r, 1, "dry run into a started migration's directory")
		if !strings.Contains(r.stderr, "re-run without --dry-run") {
			t.Errorf("stderr:\n%s", r.stderr)
		}
	})

	r = c.maasctl(t, "migrate", "tiers", "--backup-dir", first, "--timeout", "3m")
	mustExit(t, r, 0, "the resumed migration")
	if !strings.Contains(r.stdout, "resuming the migration started") {
		t.Errorf("the re-run should say it resumes:\n%s", r.stdout)
	}
	if got, _ := os.ReadFile(filepath.Join(first, migrate.ManifestFile)); string(got) != string(manifest) {
		t.Error("the resumed run rewrote the backup manifest; the backup of the state before the migration must stay")
	}
	for _, k := range tierObjects[:3] {
		if lookup(t, c, k) != nil {
			t.Errorf("%s still exists after the resumed migration", k)
		}
	}
	again := c.maasctl(t, "migrate", "tiers", "--backup-dir", first)
	mustExit(t, again, 0, "a third run after the migration finished")
	if !strings.Contains(again.stdout, "has finished its apply phase") {
		t.Errorf("a run after the end should say the migration is done:\n%s", again.stdout)
	}

	rb := c.maasctl(t, "migrate", "tiers", "--rollback", first, "--timeout", "2m")
	mustExit(t, rb, 0, "rollback of the resumed migration")
	if got := maasObjects(t, c); len(got) != 0 {
		t.Errorf("the rollback left %v", got)
	}
	for _, k := range all {
		if lookup(t, c, k) == nil {
			t.Errorf("%s is missing after the rollback", k)
		}
	}
	if r := c.maasctl(t, "migrate", "tiers", "--backup-dir", first); r.exit == 0 || !strings.Contains(r.stderr, "was rolled back") {
		t.Errorf("a rolled-back migration's directory must not be resumed: exit %d\n%s", r.exit, r.stderr)
	}

	t.Run("second directory", func(t *testing.T) {
		a := filepath.Join(c.dir, "second-a")
		mustExit(t, c.maasctl(t, "migrate", "tiers", "--backup-dir", a, "--timeout", "10s"), 4, "first run, stopped")
		// Both gateway policies now exist and the restored old one is the
		// newer: the real Kuadrant enforces it. verify must name it and
		// the fix, not blame Kuadrant's readiness.
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		waitAll(t, wctx, c, waiters.Target{GVK: gvkAuthPolicy, Namespace: "openshift-ingress", Name: "maas-gateway-auth",
			Cond: func(u *unstructured.Unstructured) waiters.Result {
				e, ok := waiters.GetCondition(u, "Enforced")
				return waiters.Result{Done: ok && e.Reason == "Overridden", Status: e.String()}
			}})
		v := c.maasctl(t, "verify", "--live-only", "-o", "json")
		var rep verify.Report
		if err := json.Unmarshal([]byte(v.stdout), &rep); err != nil {
			t.Fatalf("verify -o json: %v\n%s\n%s", err, v.stdout, v.stderr)
		}
		found := false
		for _, ch := range rep.Checks {
			if ch.Code != verify.CodeAuthEnforced {
				continue
			}
			found = true
			if ch.Result != verify.Fail || !strings.Contains(ch.Cause, "AuthPolicy openshift-ingress/gateway-auth-policy on the same target overrides it") ||
				!strings.Contains(ch.Fix, "maasctl migrate tiers") {
				t.Errorf("%s: %s %q, cause %q, fix %q; want it to name gateway-auth-policy as the overrider and the migration as the fix", ch.Code, ch.Result, ch.Detail, ch.Cause, ch.Fix)
			}
		}
		if !found {
			t.Errorf("verify reported no %s:\n%s", verify.CodeAuthEnforced, v.stdout)
		}
		b := filepath.Join(c.dir, "second-b")
		r := c.maasctl(t, "migrate", "tiers", "--backup-dir", b, "--timeout", "3m")
		mustExit(t, r, 0, "the migration from another directory")
		// The rollback above restored gateway-auth-policy, so it is newer
		// than maas-gateway-auth (owned by the Gateway, it stayed): the
		// real Kuadrant reports maas-gateway-auth Overridden by it until
		// it is deleted, and the migration must go on (it once waited for
		// Enforced=True until its timeout).
		if !strings.Contains(r.stdout, "overridden only by old policies this migration deletes (openshift-ingress/gateway-auth-policy)") ||
			!strings.Contains(r.stdout, "policies the old ones overrode to be Enforced") {
			t.Errorf("the migration should say the new gateway policy waits for the old one's delete:\n%s", r.stdout)
		}
		rb := c.maasctl(t, "migrate", "tiers", "--rollback", b, "--timeout", "2m")
		mustExit(t, rb, 0, "rollback of the second directory")
		if !strings.Contains(rb.stdout, "roll back migration second-a too") {
			t.Errorf("the second directory's rollback should name the first migration:\n%s", rb.stdout)
		}
		if got := maasObjects(t, c); len(got) != 6 {
			t.Errorf("after the second rollback MaaS objects %v, want the first run's 6", got)
		}
		mustExit(t, c.maasctl(t, "migrate", "tiers", "--rollback", a, "--timeout", "2m"), 0, "rollback of the first directory")
		if got := maasObjects(t, c); len(got) != 0 {
			t.Errorf("after both rollbacks MaaS objects %v remain", got)
		}
	})
}

// TestMigrateTiersModelsNotReady (issue 17, "The dry run does not notice a
// model without an HTTPRoute or Ready status, so the real run waits its
// whole timeout"): with my-model's KServe HTTPRoute deleted and
// premium-model's LLMInferenceService Ready=False, the dry run names both
// models and their cause and exits 1, and the real run stops at once
// (well under its 5 min timeout) with the same report, having created and
// changed nothing. Once KServe's route and status are back, a re-run with
// the same --backup-dir migrates. Red before: the dry run passed (exit 0)
// and the real run waited for the MaaSModelRefs until its timeout.
func TestMigrateTiersModelsNotReady(t *testing.T) {
	parallel(t)
	c := newTiersCluster(t, nil)
	ctx := context.Background()
	all := append(append([]objKey{}, tierObjects...), untouched...)

	route := objKey{schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}, "llm", "my-model-kserve-route"}
	ri, _, err := c.clients.Resource(route.gvk, route.ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(ctx, route.name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	svc := lookup(t, c, objKey{gvkLLMISvc, "llm", "premium-model"})
	if err := unstructured.SetNestedSlice(svc.Object, []any{map[string]any{
		"type": "Ready", "status": "False", "reason": "MinimumReplicasUnavailable", "message": "Deployment does not have minimum availability.",
	}}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	sri, _, err := c.clients.Resource(gvkLLMISvc, "llm")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sri.UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := resourceVersions(t, c, all)
	want := []string{
		"LLMInferenceService llm/my-model: has no HTTPRoute in namespace llm",
		"LLMInferenceService llm/premium-model: is not Ready (Ready=False (MinimumReplicasUnavailable)",
		"nothing was changed",
	}

	dry := c.maasctl(t, "migrate", "tiers", "--dry-run", "--backup-dir", filepath.Join(c.dir, "dry"))
	mustExit(t, dry, 1, "dry run with a model without a route and one not Ready")
	for _, s := range want {
		if !strings.Contains(dry.stderr, s) {
			t.Errorf("the dry run's error lacks %q:\n%s", s, dry.stderr)
		}
	}
	if !strings.Contains(dry.stdout, "NOT READY: LLMInferenceService llm/my-model") {
		t.Errorf("the dry run's report lacks the model section:\n%s", dry.stdout)
	}

	dir := filepath.Join(c.dir, "real")
	r := c.maasctl(t, "migrate", "tiers", "--backup-dir", dir, "--timeout", "5m")
	mustExit(t, r, 1, "migration with a model without a route and one not Ready")
	if r.wall > time.Minute {
		t.Errorf("the migration took %s to stop; it must not wait for models that cannot become Ready", r.wall)
	}
	for _, s := range append(want, "--backup-dir "+dir+" again") {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("the migration's error lacks %q:\n%s", s, r.stderr)
		}
	}
	if got := maasObjects(t, c); len(got) != 0 {
		t.Errorf("the stopped migration created %v", got)
	}
	if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
		t.Errorf("the stopped migration changed objects (-before +after):\n%s", diff)
	}

	// KServe restores the route and the status; the same directory goes on.
	c.applyTestdata(t, "30-models.yaml")
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	waitAll(t, wctx, c, routeAccepted("llm", "my-model-kserve-route"),
		waiters.Target{GVK: gvkLLMISvc, Namespace: "llm", Name: "premium-model", Cond: waiters.ConditionTrue("Ready")})
	ok := c.maasctl(t, "migrate", "tiers", "--backup-dir", dir, "--timeout", "3m")
	mustExit(t, ok, 0, "the migration once the models are ready")
	if !strings.Contains(ok.stdout, "ok: LLMInferenceService llm/my-model Ready, HTTPRoute llm/my-model-kserve-route") {
		t.Errorf("the report lacks the passing model check:\n%s", ok.stdout)
	}
	for _, k := range tierObjects[:3] {
		if lookup(t, c, k) != nil {
			t.Errorf("%s still exists after the migration", k)
		}
	}
}
