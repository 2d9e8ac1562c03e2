package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/migrate"
	"github.com/maasctl/maasctl/waiters"
)

// The migrate figure: `maasctl migrate tiers` of a 3.2 tier-based MaaS
// with n annotated models, on the cluster state e2e/migrate_test.go builds
// (the 3.5 CRDs an upgraded cluster serves, the simulated operators, a
// programmed MaaS Gateway, a Ready Kuadrant, the tier ConfigMap and the
// tier-based gateway policies of e2e/testdata/tiers, and maas-controller's
// new gateway defaults), with n generated LLMInferenceServices instead of
// the fixture's models. No install runs first: the migration reads only
// these objects.

// MigratePoint is one `maasctl migrate tiers` (the real run, not the dry
// run) of Models annotated models. Setup is not part of the figure.
type MigratePoint struct {
	Models int `json:"models"`
	Wall   ms  `json:"wallMs"`
	// Reads and Writes are maasctl's requests as the recording proxy saw
	// them (migrate prints no request summary); StateWrites (its Lease)
	// are included in Writes.
	Reads            int     `json:"reads"`
	Writes           int     `json:"writes"`
	StateWrites      int     `json:"stateWrites"`
	RequestsPerModel float64 `json:"requestsPerModel"`
	PeakRSSBytes     int64   `json:"peakRssBytes"`
	// CPUSeconds is maasctl's user plus system CPU time.
	CPUSeconds float64 `json:"cpuSeconds"`
	// Governed counts the models that afterwards have a Ready MaaSModelRef
	// and are listed by a MaaSSubscription (the figure fails below
	// Models).
	Governed int `json:"governedModels"`
	// Setup is the time to build the tier-based state, for reference.
	Setup ms `json:"setupMs"`
}

// tierModelNS is the namespace of the generated models.
const tierModelNS = "llm"

var (
	gvkModelRef = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSModelRef"}
	gvkMaaSSub  = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSSubscription"}
	gvkRoute    = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
)

// migratePoint sets up the tier-based state with n models on a fresh
// control plane (recording proxy on, for the request counts, no simulated
// delays) and times `maasctl migrate tiers` on it.
func migratePoint(ctx context.Context, o Options, n int, res *Results) error {
	o.Logf("migrate: tier-based MaaS with %d annotated models on a fresh control plane", n)
	c, err := startCluster(ctx, newDir(o, fmt.Sprintf("migrate-%d", n)), clusterOptions{record: true})
	if err != nil {
		return err
	}
	defer c.stop()
	clients, err := kube.New(c.te.RESTConfig())
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := tierSetup(ctx, c, clients, o.TierFixtures, n); err != nil {
		return fmt.Errorf("set up the tier-based state: %w", err)
	}
	setup := time.Since(t0)
	o.Logf("migrate: %d models set up in %s; running maasctl migrate tiers", n, setup.Round(time.Millisecond))
	skip := len(c.proxy.Requests())
	r, err := c.run(ctx, o.Maasctl, nil, "migrate", "tiers", "--backup-dir", filepath.Join(c.dir, "backup"),
		"--timeout", "60m", "--log-file", filepath.Join(c.dir, "maasctl.log"))
	if r != nil {
		_ = os.WriteFile(filepath.Join(c.dir, "migrate.out"), []byte(r.Stdout+"\n--- stderr\n"+r.Stderr), 0o644)
	}
	if err != nil {
		return err
	}
	rc := countRequests(c.proxy.Requests()[skip:], isMaasctl)
	p := MigratePoint{Models: n, Wall: toMS(r.Wall), Reads: rc.Reads, Writes: rc.Writes, StateWrites: rc.StateWrites,
		RequestsPerModel: float64(rc.Reads+rc.Writes) / float64(n), PeakRSSBytes: r.PeakRSS, CPUSeconds: r.CPU.Seconds(), Setup: toMS(setup)}
	p.Governed, err = governedModels(ctx, clients, n)
	res.Migrate = append(res.Migrate, p)
	if err != nil {
		return err
	}
	if found, objs, err := migrate.DetectTiers(ctx, clients); err != nil || found {
		return fmt.Errorf("tier objects left after the migration: %v (%v)", objs, err)
	}
	if p.Governed != n {
		return fmt.Errorf("%d of %d models governed by a MaaSSubscription with a Ready MaaSModelRef after the migration", p.Governed, n)
	}
	return nil
}

// migrateFit is the fit input of the migrate points.
func migrateFit(points []MigratePoint) []fitPoint {
	var out []fitPoint
	for _, p := range points {
		out = append(out, fitPoint{models: p.Models, wall: p.Wall, requests: int64(p.Reads + p.Writes)})
	}
	return out
}

// tierSetup builds the tier-based state of e2e/migrate_test.go on c with
// n generated models (tierModels) and waits until the old policies are
// enforced and every model's route is accepted, so that nothing but
// maasctl changes the state afterwards.
func tierSetup(ctx context.Context, c *cluster, clients *kube.Clients, fixtures string, n int) error {
	cfg := c.te.RESTConfig()
	if err := tierCRDs(ctx, c); err != nil {
		return err
	}
	read := func(names ...string) ([]*unstructured.Unstructured, error) {
		var out []*unstructured.Unstructured
		for _, f := range names {
			objs, err := testenv.ReadObjects(filepath.Join(fixtures, f))
			if err != nil {
				return nil, err
			}
			out = append(out, objs...)
		}
		return out, nil
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute+time.Duration(n)*time.Second)
	defer cancel()
	platform, err := read("00-platform.yaml")
	if err != nil {
		return err
	}
	if err := testenv.ApplyObjects(wctx, cfg, platform...); err != nil {
		return err
	}
	// The Kuadrant operator pod must start after Istio exists (case B01).
	istiod := waiters.Target{GVK: schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Namespace: "openshift-ingress", Name: "istiod-openshift-gateway"}
	if err := waiters.All(wctx, clients, istiod); err != nil {
		return err
	}
	rest, err := read("10-kuadrant.yaml", "20-tiers.yaml", "40-new-defaults.yaml")
	if err != nil {
		return err
	}
	if err := testenv.ApplyObjects(wctx, cfg, rest...); err != nil {
		return err
	}
	if err := applyParallel(wctx, c, tierModels(n), 4); err != nil {
		return err
	}
	return waiters.All(wctx, clients, tierTargets(n)...)
}

// tierCRDs installs the CRDs the migration tests install: Kuadrant,
// Authorino, KServe, MaaS and the odh-3.5.0 ModelsAsService.
func tierCRDs(ctx context.Context, c *cluster) error {
	crdDir, err := sim.DefaultCRDDir()
	if err != nil {
		return err
	}
	var files []string
	for _, pattern := range []string{"kuadrant/*.yaml", "authorino/*.yaml", "kserve/*.yaml", "maas/*.yaml",
		"opendatahub/odh-3.5.0/components.platform.opendatahub.io_modelsasservices.yaml"} {
		m, err := filepath.Glob(filepath.Join(crdDir, pattern))
		if err != nil || len(m) == 0 {
			return fmt.Errorf("CRDs %s: %v (found %d)", pattern, err, len(m))
		}
		files = append(files, m...)
	}
	ictx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	return testenv.InstallCRDs(ictx, c.te.RESTConfig(), files...)
}

// tierTargets are the waits that end the setup: the Gateway programmed,
// Kuadrant Ready, the tier policies enforced, the new defaults not
// accepted (the old ones hold the Gateway), every model route accepted.
func tierTargets(n int) []waiters.Target {
	gvkAuth := schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1", Kind: "AuthPolicy"}
	gvkTRLP := schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1alpha1", Kind: "TokenRateLimitPolicy"}
	t := []waiters.Target{
		{GVK: schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"},
			Namespace: "openshift-ingress", Name: "maas-default-gateway", Cond: waiters.ConditionTrue("Programmed")},
		{GVK: schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1beta1", Kind: "Kuadrant"},
			Namespace: "kuadrant-system", Name: "kuadrant", Cond: waiters.ConditionTrue("Ready")},
		{GVK: gvkAuth, Namespace: "openshift-ingress", Name: "gateway-auth-policy", Cond: waiters.ConditionTrue("Enforced")},
		{GVK: gvkTRLP, Namespace: "openshift-ingress", Name: "gateway-tier-rate-limits", Cond: waiters.ConditionTrue("Enforced")},
		{GVK: gvkAuth, Namespace: "redhat-ods-applications", Name: "gateway-default-auth", Cond: conditionFalse("Accepted")},
		{GVK: gvkTRLP, Namespace: "redhat-ods-applications", Name: "gateway-default-deny", Cond: conditionFalse("Accepted")},
	}
	for i := range n {
		t = append(t, waiters.Target{GVK: gvkRoute, Namespace: tierModelNS, Name: tierModelName(i) + "-kserve-route", Cond: routeAccepted})
	}
	return t
}

func conditionFalse(typ string) waiters.Condition {
	return func(u *unstructured.Unstructured) waiters.Result {
		cond, ok := waiters.GetCondition(u, typ)
		return waiters.Result{Done: ok && cond.Status == "False", Status: cond.String()}
	}
}

// routeAccepted: some parent of the HTTPRoute reports Accepted=True.
func routeAccepted(u *unstructured.Unstructured) waiters.Result {
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
}

// governedModels counts the generated models that have a Ready
// MaaSModelRef and are listed by some MaaSSubscription.
func governedModels(ctx context.Context, clients *kube.Clients, n int) (int, error) {
	list := func(gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
		ri, _, err := clients.Resource(gvk, "")
		if err != nil {
			return nil, err
		}
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		return l.Items, nil
	}
	refs, err := list(gvkModelRef)
	if err != nil {
		return 0, err
	}
	subs, err := list(gvkMaaSSub)
	if err != nil {
		return 0, err
	}
	ready := map[string]bool{}
	for _, r := range refs {
		if p, _, _ := unstructured.NestedString(r.Object, "status", "phase"); p == "Ready" {
			ready[r.GetNamespace()+"/"+r.GetName()] = true
		}
	}
	listed := map[string]bool{}
	for _, s := range subs {
		mrs, _, _ := unstructured.NestedSlice(s.Object, "spec", "modelRefs")
		for _, m := range mrs {
			mm, _ := m.(map[string]any)
			listed[fmt.Sprint(mm["namespace"], "/", mm["name"])] = true
		}
	}
	governed := 0
	for i := range n {
		k := tierModelNS + "/" + tierModelName(i)
		if ready[k] && listed[k] {
			governed++
		}
	}
	return governed, nil
}

// applyParallel applies objs with testenv.ApplyObjects in workers
// interleaved shares (each share keeps its objects' order).
func applyParallel(ctx context.Context, c *cluster, objs []*unstructured.Unstructured, workers int) error {
	shares := make([][]*unstructured.Unstructured, workers)
	// Keep a model's objects together: tierModels writes three per model.
	for i := 0; i < len(objs); i += 3 {
		w := (i / 3) % workers
		shares[w] = append(shares[w], objs[i:min(i+3, len(objs))]...)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, s := range shares {
		if len(s) > 0 {
			g.Go(func() error { return testenv.ApplyObjects(gctx, c.te.RESTConfig(), s...) })
		}
	}
	return g.Wait()
}

// tierModelName is the name of generated model i.
func tierModelName(i int) string { return fmt.Sprintf("model-%04d", i) }

// tierModels are n models as KServe serves them (30-models.yaml of the
// migration tests): per model a Ready LLMInferenceService with a tier
// annotation (even models both tiers, odd ones premium only), its
// workload Service and the HTTPRoute KServe creates (router labels, parent
// the MaaS Gateway). Three objects per model, in that order.
func tierModels(n int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for i := range n {
		name := tierModelName(i)
		tiers := `["free","premium"]`
		if i%2 == 1 {
			tiers = `["premium"]`
		}
		gw := map[string]any{"name": "maas-default-gateway", "namespace": "openshift-ingress"}
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "serving.kserve.io/v1alpha1", "kind": "LLMInferenceService", // as 30-models.yaml
			"metadata": map[string]any{"name": name, "namespace": tierModelNS,
				"annotations": map[string]any{migrate.TierAnnotation: tiers}},
			"spec": map[string]any{
				"model":  map[string]any{"name": name, "uri": "hf://Qwen/Qwen2.5-0.5B-Instruct"},
				"router": map[string]any{"gateway": map[string]any{"refs": []any{gw}}, "route": map[string]any{}},
			},
			"status": map[string]any{"url": "https://maas.apps.openshift.example.com/llm/" + name,
				"conditions": []any{map[string]any{"type": "Ready", "status": "True"}}},
		}}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Service",
			"metadata": map[string]any{"name": name + "-kserve-workload-svc", "namespace": tierModelNS},
			"spec": map[string]any{"selector": map[string]any{"app.kubernetes.io/name": name},
				"ports": []any{map[string]any{"name": "http", "port": int64(8000)}}},
		}}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvkRoute.GroupVersion().String(), "kind": gvkRoute.Kind,
			"metadata": map[string]any{"name": name + "-kserve-route", "namespace": tierModelNS, "labels": map[string]any{
				"app.kubernetes.io/name": name, "app.kubernetes.io/component": "llminferenceservice-router",
				"app.kubernetes.io/part-of": "llminferenceservice"}},
			"spec": map[string]any{
				"parentRefs": []any{map[string]any{"group": gvkRoute.Group, "kind": "Gateway", "name": "maas-default-gateway", "namespace": "openshift-ingress"}},
				"rules": []any{map[string]any{
					"matches":     []any{map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/llm/" + name}}},
					"backendRefs": []any{map[string]any{"name": name + "-kserve-workload-svc", "port": int64(8000)}},
				}},
			},
		}})
	}
	return out
}

// defaultTierFixtures is e2e/testdata/tiers of the module the working
// directory is in (the first folder at or above it with a go.mod).
func defaultTierFixtures() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "e2e", "testdata", "tiers"), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no go.mod at or above %s: give the tier fixtures folder (Options.TierFixtures)", wd)
		}
	}
}
