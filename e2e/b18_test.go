package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maasctl/maasctl/e2e/faultproxy"
	"github.com/maasctl/maasctl/e2e/sim"
	"github.com/maasctl/maasctl/internal/migrate"
	"github.com/maasctl/maasctl/waiters"
)

// TestB18MigrateTiersSkipInvalid is case B18 (shared/cases/SECOND-SET.md):
// `maasctl migrate tiers` on the case's three tiers (levels 0, 10, 20) with
// qwen in llm, llama in team-models, and three models whose tier annotation
// cannot be used: broken (the case's malformed JSON), shaped (valid JSON,
// not an array of names) and gold (a tier the ConfigMap does not define).
// The simulated MaaS controller makes the new objects Ready/Active 15 s
// after it first sees them, as the case asks. The case's test points:
//  1. two MaaSModelRefs (qwen, llama), not one per (tier, model);
//  2. three subscriptions with distinct priorities free < premium <
//     enterprise, with tokenRateLimits and no tokenRateLimitRef;
//  3. llama in team-models is included;
//  4. without --skip-invalid the run refuses naming each model, the
//     annotation and the flag, and writes nothing;
//  5. with the flag the plan (dry run too) and the summary report them, and
//     their annotations are untouched, also after the cleanup;
//  6. gateway-auth-policy (and the tier TRLP and ConfigMap) are deleted only
//     after every new object was Ready (watch resourceVersions: one etcd
//     orders them);
//  7. the backup exists and holds the old objects;
//  8. a second run makes no writes (a recording proxy in front of the API
//     server counts maasctl's requests).
func TestB18MigrateTiersSkipInvalid(t *testing.T) {
	parallel(t)
	c := newTiersClusterOf(t, map[string]time.Duration{sim.MaaS: 15 * time.Second},
		[]string{"b18/20-tiers.yaml", "b18/30-models.yaml"},
		routeAccepted("llm", "qwen-kserve-route"), routeAccepted("team-models", "llama-kserve-route"))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	proxy, err := faultproxy.Start(ctx, faultproxy.Options{Upstream: c.env.RESTConfig(), Record: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	c.kubeconfig = filepath.Join(c.dir, "proxy.kubeconfig")
	if err := proxy.WriteKubeconfig(c.kubeconfig); err != nil {
		t.Fatal(err)
	}
	// writes runs maasctl and returns the writes it sent (dry runs are not
	// writes).
	writes := func(r func() run) (run, []string) {
		t0 := time.Now()
		res := r()
		var out []string
		for _, q := range proxy.Requests() {
			if !q.Start.Before(t0) && q.IsWrite() {
				out = append(out, q.Method+" "+q.Path)
			}
		}
		return res, out
	}

	invalid := map[string]string{ // model -> its annotation, never changed
		"llm/broken": `[premium`, "team-models/shaped": `{"tiers":["premium"]}`, "llm/gold": `["premium","gold"]`,
	}
	models := []objKey{{gvkLLMISvc, "llm", "qwen"}, {gvkLLMISvc, "team-models", "llama"}}
	for k := range invalid {
		ns, name, _ := strings.Cut(k, "/")
		models = append(models, objKey{gvkLLMISvc, ns, name})
	}
	old := []objKey{
		{gvkConfigMap, "maas-api", "tier-to-group-mapping"},
		{gvkAuthPolicy, "openshift-ingress", "gateway-auth-policy"},
		{gvkTRLP, "openshift-ingress", "gateway-tier-rate-limits"},
	}
	all := append(append([]objKey{}, old...), models...)
	checkInvalidUntouched := func(what string) {
		t.Helper()
		for k, v := range invalid {
			ns, name, _ := strings.Cut(k, "/")
			u := lookup(t, c, objKey{gvkLLMISvc, ns, name})
			if u == nil {
				t.Errorf("%s: model %s is gone", what, k)
			} else if got, ok := u.GetAnnotations()[migrate.TierAnnotation]; !ok || got != v {
				t.Errorf("%s: model %s has annotation %q (present %v), want %q untouched", what, k, got, ok, v)
			}
		}
	}

	// 4: refused before any write, naming every model, the annotation and
	// the flag.
	before := resourceVersions(t, c, all)
	refused, w := writes(func() run {
		return c.maasctl(t, "migrate", "tiers", "--backup-dir", filepath.Join(c.dir, "refused"))
	})
	mustExit(t, refused, 1, "migrate without --skip-invalid")
	for _, s := range []string{
		"LLMInferenceService llm/broken: annotation alpha.maas.opendatahub.io/tiers=\"[premium\" is not a JSON array of tier names",
		"LLMInferenceService team-models/shaped: annotation alpha.maas.opendatahub.io/tiers=",
		"LLMInferenceService llm/gold: annotation alpha.maas.opendatahub.io/tiers lists tier \"gold\"",
		"re-run with --skip-invalid", "nothing was changed",
	} {
		if !strings.Contains(refused.stderr, s) {
			t.Errorf("the refusal lacks %q:\n%s", s, refused.stderr)
		}
	}
	if len(w) != 0 {
		t.Errorf("the refused run wrote: %v", w)
	}
	if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
		t.Errorf("the refused run changed objects (-before +after):\n%s", diff)
	}
	if got := maasObjects(t, c); len(got) != 0 {
		t.Errorf("the refused run created %v", got)
	}

	// 5: the dry run's plan lists the skipped models; nothing is written.
	dryDir := filepath.Join(c.dir, "dry")
	dry, w := writes(func() run {
		return c.maasctl(t, "migrate", "tiers", "--skip-invalid", "--dry-run", "--backup-dir", dryDir)
	})
	mustExit(t, dry, 0, "dry run with --skip-invalid")
	plan, _, _ := strings.Cut(dry.stdout, "Dry run:")
	for k := range invalid {
		if !strings.Contains(plan, "skip LLMInferenceService "+k+": ") {
			t.Errorf("the dry run's plan does not list %s as skipped:\n%s", k, dry.stdout)
		}
	}
	if !strings.Contains(dry.stdout, "Skipped 3 model(s) whose tier annotation cannot be used (--skip-invalid)") {
		t.Errorf("the dry run's summary does not report the skipped models:\n%s", dry.stdout)
	}
	if len(w) != 0 {
		t.Errorf("the dry run wrote: %v", w)
	}
	if y, err := os.ReadFile(filepath.Join(dryDir, migrate.PlanFile)); err != nil {
		t.Error(err)
	} else if n := strings.Count(string(y), "\nkind: "); n != 8 {
		t.Errorf("plan.yaml has %d objects, want 8 (2 model refs, 3 auth policies, 3 subscriptions):\n%s", n, y)
	}

	// 6: watch the old and the new objects through the migration.
	recs := map[string]*recorder{}
	for name, gvr := range map[string]schema.GroupVersionResource{
		"AuthPolicy":           {Group: "kuadrant.io", Version: "v1", Resource: "authpolicies"},
		"TokenRateLimitPolicy": {Group: "kuadrant.io", Version: "v1alpha1", Resource: "tokenratelimitpolicies"},
		"ConfigMap":            {Version: "v1", Resource: "configmaps"},
		"MaaSModelRef":         {Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maasmodelrefs"},
		"MaaSAuthPolicy":       {Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maasauthpolicies"},
		"MaaSSubscription":     {Group: "maas.opendatahub.io", Version: "v1alpha1", Resource: "maassubscriptions"},
	} {
		recs[name] = c.record(t, gvr, "", "")
	}

	backup := filepath.Join(c.dir, "backup")
	migrated, _ := writes(func() run {
		return c.maasctl(t, "migrate", "tiers", "--skip-invalid", "--backup-dir", backup, "--timeout", "3m")
	})
	mustExit(t, migrated, 0, "migrate with --skip-invalid")
	planPart, summaryPart, _ := strings.Cut(migrated.stdout, "Migration complete.")
	for k := range invalid {
		if !strings.Contains(planPart, "skip LLMInferenceService "+k+": ") {
			t.Errorf("the plan does not list %s as skipped:\n%s", k, migrated.stdout)
		}
		if !strings.Contains(summaryPart, "  - LLMInferenceService "+k+": ") {
			t.Errorf("the summary does not list %s as skipped:\n%s", k, summaryPart)
		}
	}

	// 1, 3: one MaaSModelRef per model, llama in team-models included.
	wantMaaS := []string{
		"MaaSAuthPolicy models-as-a-service/tier-enterprise-access",
		"MaaSAuthPolicy models-as-a-service/tier-free-access",
		"MaaSAuthPolicy models-as-a-service/tier-premium-access",
		"MaaSModelRef llm/qwen",
		"MaaSModelRef team-models/llama",
		"MaaSSubscription models-as-a-service/tier-enterprise-subscription",
		"MaaSSubscription models-as-a-service/tier-free-subscription",
		"MaaSSubscription models-as-a-service/tier-premium-subscription",
	}
	if diff := cmp.Diff(wantMaaS, maasObjects(t, c)); diff != "" {
		t.Errorf("MaaS objects (-want +got):\n%s", diff)
	}
	// 2: distinct priorities in tier order, limits copied, no
	// tokenRateLimitRef.
	var prios []int64
	for _, tc := range []struct {
		tier   string
		models []string
		limit  int64
	}{
		{"free", []string{"llm/qwen"}, 100},
		{"premium", []string{"llm/qwen", "team-models/llama"}, 50000},
		{"enterprise", []string{"team-models/llama"}, 200000},
	} {
		sub := lookup(t, c, objKey{gvkMaaSSub, "models-as-a-service", "tier-" + tc.tier + "-subscription"})
		if sub == nil {
			t.Errorf("subscription of tier %s missing", tc.tier)
			continue
		}
		p, _, _ := unstructured.NestedInt64(sub.Object, "spec", "priority")
		prios = append(prios, p)
		refs, _, _ := unstructured.NestedSlice(sub.Object, "spec", "modelRefs")
		var got []string
		for _, r := range refs {
			rm, _ := r.(map[string]any)
			got = append(got, rm["namespace"].(string)+"/"+rm["name"].(string))
			if _, ok := rm["tokenRateLimitRef"]; ok {
				t.Errorf("subscription %s carries tokenRateLimitRef", tc.tier)
			}
			if diff := cmp.Diff([]any{map[string]any{"limit": tc.limit, "window": "1m"}}, rm["tokenRateLimits"]); diff != "" {
				t.Errorf("subscription %s tokenRateLimits (-want +got):\n%s", tc.tier, diff)
			}
		}
		if diff := cmp.Diff(tc.models, got); diff != "" {
			t.Errorf("subscription %s models (-want +got):\n%s", tc.tier, diff)
		}
	}
	if len(prios) != 3 || !(prios[0] < prios[1] && prios[1] < prios[2]) {
		t.Errorf("priorities free, premium, enterprise = %v, want strictly increasing", prios)
	}

	// 5: the migrated models lost their annotation; the skipped ones kept
	// theirs, also after the cleanup stage.
	for _, k := range models[:2] {
		if u := lookup(t, c, k); u == nil {
			t.Errorf("%s is gone", k)
		} else if v, ok := u.GetAnnotations()[migrate.TierAnnotation]; ok {
			t.Errorf("%s still has %s=%s", k, migrate.TierAnnotation, v)
		}
	}
	checkInvalidUntouched("after the migration")
	for _, k := range old {
		if lookup(t, c, k) != nil {
			t.Errorf("%s still exists after the migration", k)
		}
	}

	// 6: every new object was Ready before any old object was deleted (or
	// marked for deletion).
	var lastReady int64
	for _, kind := range []string{"MaaSModelRef", "MaaSAuthPolicy", "MaaSSubscription"} {
		for _, name := range wantMaaS {
			if !strings.HasPrefix(name, kind+" ") {
				continue
			}
			ns, n, _ := strings.Cut(strings.TrimPrefix(name, kind+" "), "/")
			rv := recs[kind].first(func(e recorded) bool {
				return e.obj.GetNamespace() == ns && e.obj.GetName() == n && e.typ != watch.Deleted && waiters.Readiness(e.obj)(e.obj).Done
			})
			if rv < 0 {
				t.Errorf("the watch never saw %s ready", name)
			}
			lastReady = max(lastReady, rv)
		}
	}
	for _, k := range old {
		rv := recs[k.gvk.Kind].first(func(e recorded) bool {
			return e.obj.GetNamespace() == k.ns && e.obj.GetName() == k.name && (e.typ == watch.Deleted || e.obj.GetDeletionTimestamp() != nil)
		})
		switch {
		case rv < 0:
			t.Errorf("the watch saw no deletion of %s", k)
		case rv <= lastReady:
			t.Errorf("%s was deleted at resourceVersion %d, before the last new object was ready (%d)", k, rv, lastReady)
		}
	}

	// 7: the backup holds the old objects, the skipped models included.
	b, err := migrate.OpenBackup(backup)
	if err != nil {
		t.Fatal(err)
	}
	var backed []string
	for _, e := range b.Manifest.Entries {
		if _, err := os.Stat(filepath.Join(backup, e.File)); err != nil {
			t.Errorf("backup file of %s: %v", e.Ref, err)
		}
		backed = append(backed, e.Ref.String())
	}
	for _, k := range all {
		if !slices.Contains(backed, k.String()) {
			t.Errorf("the backup lacks %s (has %v)", k, backed)
		}
	}
	journal, err := b.Journal()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for _, e := range journal {
		counts[e.Action]++
	}
	if diff := cmp.Diff(map[string]int{migrate.ActionApplied: 8, migrate.ActionDeleted: 3, migrate.ActionAnnotationRemoved: 2}, counts); diff != "" {
		t.Errorf("journal actions (-want +got):\n%s", diff)
	}

	// 8: the same command again writes nothing and reports the skipped
	// models.
	before = resourceVersions(t, c, all)
	maas := maasObjects(t, c)
	again, w := writes(func() run {
		return c.maasctl(t, "migrate", "tiers", "--skip-invalid", "--backup-dir", filepath.Join(c.dir, "again"), "--timeout", "1m")
	})
	mustExit(t, again, 0, "second migration run")
	if len(w) != 0 {
		t.Errorf("the second run wrote: %v", w)
	}
	if !strings.Contains(again.stdout, "nothing was changed") || !strings.Contains(again.stdout, "Skipped 3 model(s)") {
		t.Errorf("the second run's report:\n%s", again.stdout)
	}
	if diff := cmp.Diff(before, resourceVersions(t, c, all)); diff != "" {
		t.Errorf("the second run changed objects (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(maas, maasObjects(t, c)); diff != "" {
		t.Errorf("the second run changed the MaaS objects (-before +after):\n%s", diff)
	}
	checkInvalidUntouched("after the second run")
}
