package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/waiters"
)

// checkInventoryDropRemoves: an install from an inventory that adds a
// model with its own MaaSAuthPolicy and MaaSSubscription, then an install
// back at the default inventory, removes what the inventory no longer
// lists (a group's access must end when it leaves the inventory; the
// trial of 2026-12-07 found it all left in place, and plan, diff and
// doctor silent about it). plan names the removal first. An object
// someone re-created under the same name after maasctl created it is kept
// and said so. The default model and its access stay; plan is then empty.
// Called by TestInstallEndToEnd on its installed cluster.
func checkInventoryDropRemoves(t *testing.T, c *cluster) {
	t.Helper()
	inv := inventory.Default()
	a := inv.ExternalModels[0]
	b := a
	b.Name, b.TargetModel, b.DisplayName = "qwen35-9b-coder-b", "qwen35-9b-coder", "Qwen B"
	inv.ExternalModels = append(inv.ExternalModels, b)
	ref := inventory.ModelRef{Name: b.Name, Namespace: b.Namespace}
	inv.AuthPolicies = append(inv.AuthPolicies, inventory.AuthPolicy{Name: "team-b-access", Groups: []string{"team-b"}, ModelRefs: []inventory.ModelRef{ref}})
	inv.Subscriptions = append(inv.Subscriptions, inventory.Subscription{Name: "team-b", Priority: 10, Groups: []string{"team-b"},
		ModelRefs: []inventory.SubscriptionModel{{Name: b.Name, Namespace: b.Namespace, TokenRateLimits: []inventory.TokenRateLimit{{Limit: 100000, Window: "1h"}}}}})
	data, err := yaml.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	site := filepath.Join(c.dir, "site-with-team-b.yaml")
	if err := os.WriteFile(site, data, 0o600); err != nil {
		t.Fatal(err)
	}
	ns := inv.RHOAI.MaaSNamespace
	modelB := lobj{providerCR.apiVersion, "ExternalModel", b.Namespace, b.Name}
	refB := lobj{subscriptionCR.apiVersion, "MaaSModelRef", b.Namespace, b.Name}
	policyB := lobj{authPolicyCR.apiVersion, "MaaSAuthPolicy", ns, "team-b-access"}
	subB := lobj{subscriptionCR.apiVersion, "MaaSSubscription", ns, "team-b"}

	mustSucceed(t, c.install(t, "-f", site))
	assertThere(t, c, "after the install with team b", modelB, refB, policyB, subB)
	// What status says to run re-applies site.yaml (a plain install
	// would stop: the cluster was installed from another inventory).
	st := c.maasctl(t, "status", "-o", "json")
	wantExit(t, st, 0, "status after install -f")
	var srep steps.StatusReport
	if err := json.Unmarshal([]byte(st.stdout), &srep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, st.stdout)
	}
	if want := "maasctl install -f " + site; srep.InstallCommand != want {
		t.Errorf("status after install -f: installCommand %q, want %q", srep.InstallCommand, want)
	}
	// --set alone is laid over the default inventory: plan says that an
	// install with the same flags would stop, and how to change only what
	// --set sets.
	ps := c.maasctl(t, "plan", "--set", "waitTimeoutSeconds=900", "-o", "json")
	wantExit(t, ps, 0, "plan --set after install -f")
	var psrep steps.PlanReport
	if err := json.Unmarshal([]byte(ps.stdout), &psrep); err != nil {
		t.Fatalf("plan --set -o json: %v\n%s", err, ps.stdout)
	}
	mustContain(t, "plan --set inventory", psrep.Against, "the default inventory with --set waitTimeoutSeconds, not the inventory installed from "+site, "would stop and change nothing", "give -f with the installed inventory")
	// uninstall --dry-run without -f shows site.yaml's uninstall and says
	// that the plain one stops.
	dry := c.maasctl(t, "uninstall", "--dry-run")
	wantExit(t, dry, 0, "uninstall --dry-run after install -f")
	mustContain(t, "uninstall --dry-run", dry.stdout, "a plain 'maasctl uninstall' stops on this cluster without changing anything: it was installed from "+site,
		"'maasctl uninstall -f "+site+"' would run these steps", "MaaSSubscription "+ns+"/team-b")

	// plan back at the defaults names what the install would remove.
	pl := c.maasctl(t, "plan", "--defaults", "-o", "json")
	wantExit(t, pl, 0, "plan --defaults")
	var prep steps.PlanReport
	if err := json.Unmarshal([]byte(pl.stdout), &prep); err != nil {
		t.Fatal(err)
	}
	details := map[string]string{}
	for _, s := range prep.Run() {
		details[s.ID] = s.Detail
	}
	for id, obj := range map[string]string{"models/model": "ExternalModel " + b.Namespace + "/" + b.Name, "access/auth-policy": "MaaSAuthPolicy " + ns + "/team-b-access", "access/subscription": "MaaSSubscription " + ns + "/team-b"} {
		if d := details[id]; !strings.Contains(d, "no longer lists") || !strings.Contains(d, obj) {
			t.Errorf("plan --defaults: %s detail %q, want it to name %s as no longer listed", id, d, obj)
		}
	}

	df := c.maasctl(t, "diff", "--defaults")
	wantExit(t, df, 2, "diff --defaults")
	mustContain(t, "diff --defaults", df.stdout, "- ExternalModel "+b.Namespace+"/"+b.Name+" (models/model): would be removed: no longer in the inventory",
		"- MaaSSubscription "+ns+"/team-b (access/subscription): would be removed")

	// Someone deletes team-b and creates their own under the same name:
	// not maasctl's to remove.
	ri, _, err := c.clients.Resource(subB.stub().GroupVersionKind(), ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(context.Background(), "team-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := waiters.Gone(gctx, c.clients, subB.stub().GroupVersionKind(), ns, "team-b"); err != nil {
		t.Fatal(err)
	}
	c.create(t, `apiVersion: maas.opendatahub.io/v1alpha1
kind: MaaSSubscription
metadata: {name: team-b, namespace: `+ns+`}
spec:
  owner: {groups: [{name: team-b}]}
  priority: 11
  modelRefs: [{name: qwen35-9b-coder, namespace: `+a.Namespace+`, tokenRateLimits: [{limit: 5000, window: 1h}]}]`)

	back := c.install(t, "--defaults")
	mustSucceed(t, back)
	for _, o := range []lobj{modelB, refB, policyB} {
		if c.live(t, o) != nil {
			t.Errorf("%s still exists after the install back at the default inventory", o)
		}
	}
	mustContain(t, "models/model progress", progress(back, "models/model"), "removing ExternalModel "+b.Namespace+"/"+b.Name+": the inventory no longer lists it")
	mustContain(t, "access/subscription progress", progress(back, "access/subscription"), "keeping MaaSSubscription "+ns+"/team-b although the inventory no longer lists it: it was re-created by someone else")
	assertThere(t, c, "after the install back at the default inventory", subB, subscriptionCR, authPolicyCR,
		lobj{providerCR.apiVersion, "ExternalModel", a.Namespace, a.Name}, lobj{subscriptionCR.apiVersion, "MaaSModelRef", a.Namespace, a.Name})
	rec, err := steps.LoadRecord(context.Background(), c.clients)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range rec.Entries() {
		if en.Name == b.Name || en.Name == "team-b" || en.Name == "team-b-access" {
			t.Errorf("record still lists %s (%s) after it was removed or kept as someone else's", en, en.Origin)
		}
	}
	if p := c.maasctl(t, "plan"); p.exit != 0 || !strings.Contains(p.stdout, "Nothing to do") {
		t.Errorf("plan after the removal: exit %d\n%s%s", p.exit, p.stdout, p.stderr)
	}
}

// checkHandAddedUserReverted (a new user's trial, session 42): a user
// added by hand to the default MaaSSubscription (whose inventory entry
// names groups only) was invisible to status, plan and diff, and install
// kept it, while doctor said install reverts it. maasctl applies
// users: [], so it owns the list: plan names the field, install reverts
// it, and the run after that has nothing to do.
func checkHandAddedUserReverted(t *testing.T, c *cluster) {
	t.Helper()
	ctx := context.Background()
	gvk := schema.FromAPIVersionAndKind(subscriptionCR.apiVersion, subscriptionCR.kind)
	ri, _, err := c.clients.Resource(gvk, subscriptionCR.ns)
	if err != nil {
		t.Fatal(err)
	}
	users := func() []any {
		t.Helper()
		u, err := ri.Get(ctx, subscriptionCR.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		l, _, _ := unstructured.NestedSlice(u.Object, "spec", "owner", "users")
		return l
	}
	if l := users(); len(l) != 0 {
		t.Fatalf("%s has users %v before the hand edit; want none", subscriptionCR, l)
	}
	if _, err := ri.Patch(ctx, subscriptionCR.name, types.MergePatchType, []byte(`{"spec":{"owner":{"users":["mallory"]}}}`), metav1.PatchOptions{FieldManager: "kubectl-patch"}); err != nil {
		t.Fatal(err)
	}
	pl := c.maasctl(t, "plan", "--defaults", "-o", "json")
	wantExit(t, pl, 0, "plan --defaults after a user was added by hand")
	var rep steps.PlanReport
	if err := json.Unmarshal([]byte(pl.stdout), &rep); err != nil {
		t.Fatal(err)
	}
	named := false
	for _, s := range rep.Run() {
		named = named || (s.ID == "access/subscription" && strings.Contains(s.Detail, " spec.owner.users "))
	}
	if !named {
		t.Errorf("plan does not run access/subscription naming spec.owner.users after a user was added by hand:\n%s", pl.stdout)
	}
	mustSucceed(t, c.install(t, "--defaults"))
	if l := users(); len(l) != 0 {
		t.Errorf("%s still has users %v after install; the hand-added user must be reverted", subscriptionCR, l)
	}
	again := c.maasctl(t, "plan", "--defaults")
	wantExit(t, again, 0, "plan --defaults after the revert")
	if !strings.Contains(again.stdout, "Nothing to do") {
		t.Errorf("plan after the revert is not 'Nothing to do':\n%s", again.stdout)
	}
}
