package steps

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// TestInventorySource: files become absolute, --set keeps only paths,
// Explicit only with -f or --defaults.
func TestInventorySource(t *testing.T) {
	src := NewInventorySource([]string{"site.yaml"}, []string{"vault.address=https://user:pw@vault", " gateway.hostname = x"}, false)
	abs, _ := filepath.Abs("site.yaml")
	want := InventorySource{Files: []string{abs}, Sets: []string{"vault.address", "gateway.hostname"},
		setValues: []string{"vault.address=https://user:pw@vault", " gateway.hostname = x"}}
	if d := cmp.Diff(want, src, cmp.AllowUnexported(InventorySource{})); d != "" {
		t.Errorf("NewInventorySource (-want +got):\n%s", d)
	}
	if !src.Explicit() || src.Describe() != abs+" with --set vault.address, gateway.hostname" {
		t.Errorf("Explicit %v, Describe %q", src.Explicit(), src.Describe())
	}
	for _, tt := range []struct {
		src      InventorySource
		explicit bool
		describe string
	}{
		{InventorySource{}, false, "the default inventory"},
		{InventorySource{Sets: []string{"a"}}, false, "the default inventory with --set a"},
		{InventorySource{Defaults: true}, true, "the default inventory"},
	} {
		if tt.src.Explicit() != tt.explicit || tt.src.Describe() != tt.describe {
			t.Errorf("%+v: Explicit %v, Describe %q; want %v, %q", tt.src, tt.src.Explicit(), tt.src.Describe(), tt.explicit, tt.describe)
		}
	}
}

// storedConfigMap is the ConfigMap installedObject writes, typed.
func storedConfigMap(t *testing.T, src InventorySource, inv *inventory.Inventory) corev1.ConfigMap {
	t.Helper()
	u, err := installedObject(src, inv)
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	if err := runtimeFromUnstructured(u, &cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

func runtimeFromUnstructured(u *unstructured.Unstructured, out *corev1.ConfigMap) error {
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	labels := u.GetLabels()
	*out = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), Namespace: u.GetNamespace(), Labels: labels}, Data: data}
	return nil
}

// TestInstalledRoundTrip: what is stored decodes to the redacted
// inventory and its source; the Vault address is not stored; the record
// reads the stored digest and does not take the ConfigMap for a shard.
func TestInstalledRoundTrip(t *testing.T) {
	inv := inventory.Default()
	inv.Vault.Address = "https://vault.example.com:8200"
	inv.AuthPolicies[0].Groups = []string{"developers"}
	src := InventorySource{Files: []string{"/site.yaml"}, Digest: inventoryDigest(inv), InstalledAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), ToolVersion: "v1"}
	cm := storedConfigMap(t, src, inv)
	for k, v := range cm.Data {
		if strings.Contains(v, "vault.example.com") {
			t.Errorf("key %s holds the Vault address:\n%s", k, v)
		}
	}
	got, err := decodeInstalled(&cm)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(src, got.Source, cmp.AllowUnexported(InventorySource{})); d != "" {
		t.Errorf("source (-want +got):\n%s", d)
	}
	if d := inventory.Diff(inv.Redacted(), got.Inventory); len(d) != 0 {
		t.Errorf("stored inventory differs from the redacted one: %v", d)
	}
	if !strings.HasPrefix(src.Digest, "sha256:") || len(src.Digest) != len("sha256:")+12 {
		t.Errorf("digest %q", src.Digest)
	}
	if got.Describe() != "the inventory installed from /site.yaml at 2026-12-01T10:00:00Z (digest "+src.Digest+")" {
		t.Errorf("Describe %q", got.Describe())
	}
	if cm.Labels[assets.ManagedByLabel] != assets.ManagedByValue || cm.Labels[RecordLabel] != "" {
		t.Errorf("labels %v: want maasctl's managed-by label and no record label", cm.Labels)
	}
	rec, err := decodeRecord([]corev1.ConfigMap{cm})
	if err != nil {
		t.Fatal(err)
	}
	if rec.installed.stored != src.Digest || len(rec.shards) != 0 || rec.legacy {
		t.Errorf("record: stored digest %q, shards %v, legacy %v; want %q, none, false", rec.installed.stored, rec.shards, rec.legacy, src.Digest)
	}
}

// TestInventoryChangedError: the message names the installed file, time,
// digest, every change, the steps, and both ways on.
func TestInventoryChangedError(t *testing.T) {
	old := inventory.Default()
	old.AuthPolicies[0].Groups = []string{"developers"}
	e := &InventoryChangedError{
		Command:   "install",
		Installed: &InstalledInventory{Source: InventorySource{Files: []string{"/x/site.yaml"}, Digest: "sha256:0123456789ab", InstalledAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}, Inventory: old},
		Run:       InventorySource{},
		Changes:   inventory.Diff(old.Deployed(), inventory.Default().Deployed()),
		Steps:     []string{"access/auth-policy"},
	}
	want := `this cluster was installed from /x/site.yaml, at 2026-12-01T10:00:00Z (digest sha256:0123456789ab); this install would use the default inventory, which differs:
  authPolicies[0].groups: ["developers"] -> ["system:authenticated"]
steps whose objects would change: access/auth-policy
nothing was changed; run 'maasctl install -f /x/site.yaml' to keep the installed inventory, or 'maasctl install --defaults' to go back to the default inventory ('maasctl inventory show' prints the installed one)`
	if d := cmp.Diff(want, e.Error()); d != "" {
		t.Errorf("message (-want +got):\n%s", d)
	}
	if !strings.Contains(e.Error(), "digest") || e.Unwrap() != ErrInventoryChanged {
		t.Error("does not unwrap to ErrInventoryChanged")
	}
	// Installed with --set: re-applying the files alone would drop the
	// set values, so the advice goes through the stored inventory.
	e.Installed.Source.Sets = []string{"gateway.hostname"}
	got := e.Error()
	wantTail := `nothing was changed; to keep the installed inventory run 'maasctl inventory show > installed-inventory.yaml' and then 'maasctl install -f installed-inventory.yaml' (it was installed with --set gateway.hostname, whose values only the stored inventory holds), or run 'maasctl install --defaults' to go back to the default inventory`
	if !strings.HasSuffix(got, wantTail) || strings.Contains(got, "'maasctl install -f /x/site.yaml'") {
		t.Errorf("with --set, message:\n%s\nwant it to end:\n%s", got, wantTail)
	}
	// Said to an uninstall, each way out says what it removes.
	e.Command, e.Installed.Source.Sets = "uninstall", nil
	wantTail = `nothing was changed; run 'maasctl uninstall -f /x/site.yaml' to remove what the installed inventory deployed, or 'maasctl uninstall --defaults' to remove what the default inventory deploys ('maasctl inventory show' prints the installed one)`
	if got := e.Error(); !strings.HasSuffix(got, wantTail) {
		t.Errorf("uninstall message:\n%s\nwant it to end:\n%s", got, wantTail)
	}
}

// TestInstalledKeepsOwnWaitTimeout: --timeout bounds one run; the
// installed inventory (and its digest) keeps the inventory's own
// waitTimeoutSeconds.
func TestInstalledKeepsOwnWaitTimeout(t *testing.T) {
	own := inventory.Default()
	run := inventory.Default()
	run.WaitTimeoutSeconds = 180 // --timeout 3m
	r := &Record{}
	r.SetInstalled(NewInventorySource(nil, nil, true).WithOwnWaitTimeout(own.WaitTimeoutSeconds), run, "v1")
	if got := r.installed.inv.WaitTimeoutSeconds; got != own.WaitTimeoutSeconds {
		t.Errorf("stored waitTimeoutSeconds %d, want the inventory's own %d", got, own.WaitTimeoutSeconds)
	}
	if r.installed.src.Digest != inventoryDigest(own) {
		t.Errorf("digest %s, want the one of the inventory without --timeout %s", r.installed.src.Digest, inventoryDigest(own))
	}
	if run.WaitTimeoutSeconds != 180 {
		t.Errorf("the run's inventory changed to %d: its waits must keep --timeout", run.WaitTimeoutSeconds)
	}
	r2 := &Record{}
	r2.SetInstalled(NewInventorySource(nil, nil, true), run, "v1")
	if got := r2.installed.inv.WaitTimeoutSeconds; got != 180 {
		t.Errorf("without --timeout the inventory's value is stored: got %d, want 180", got)
	}
}

// TestChangedSteps: only the steps whose inputs differ (rendered objects
// and HashExtra).
func TestChangedSteps(t *testing.T) {
	env := func(inv *inventory.Inventory) *Env {
		reg, err := NewRegistry(inv)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := reg.render(inv, assets.Facts{Host: "maas.apps.example.com"})
		if err != nil {
			t.Fatal(err)
		}
		return &Env{Inv: inv, Registry: reg, Objects: objs}
	}
	grant := inventory.Default()
	grant.AuthPolicies[0].Groups = []string{"developers"}
	if got := changedSteps(env(inventory.Default()), env(inventory.Default())); len(got) != 0 {
		t.Errorf("equal inventories: %v", got)
	}
	if got := changedSteps(env(grant), env(inventory.Default())); !cmp.Equal(got, []string{"access/auth-policy"}) {
		t.Errorf("changed groups: steps %v, want [access/auth-policy]", got)
	}
	// A change no rendered object shows still names its step (the second
	// new-user trial's refusal listed the change but not operators/rhcl).
	minv := inventory.Default()
	minv.Operators[0].MinVersion = "1.5.0"
	if got := changedSteps(env(inventory.Default()), env(minv)); !cmp.Equal(got, []string{"operators/" + minv.Operators[0].ID}) {
		t.Errorf("changed minVersion: steps %v, want [operators/%s]", got, minv.Operators[0].ID)
	}
}

// TestInstalledChanges: a plain run passes when its inventory deploys the
// same as the installed one, or differs from it only by its own --set
// values; otherwise the changes are listed.
func TestInstalledChanges(t *testing.T) {
	const low = "subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].limit=1000"
	load := func(sets ...string) *inventory.Inventory {
		inv, err := inventory.Load(nil, sets)
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	site := inventory.Default()
	site.AuthPolicies[0].Groups = []string{"developers"}
	siteWait := inventory.Default()
	siteWait.WaitTimeoutSeconds = 60
	siteWait.Vault.Auth.Method = "approle"
	tests := []struct {
		name      string
		installed *inventory.Inventory
		sets      []string
		wantPaths []string
	}{
		{name: "same", installed: inventory.Default()},
		{name: "only settings that change no object", installed: siteWait},
		{name: "the run's own --set on the installed defaults", installed: inventory.Default(), sets: []string{low}},
		{name: "installed with --set, plain run", installed: load(low), wantPaths: []string{"subscriptions[0].modelRefs[0].tokenRateLimits[0].limit"}},
		{name: "installed from a file, run with an unrelated --set", installed: site, sets: []string{"gateway.hostname=maas.example.com"},
			wantPaths: []string{"authPolicies[0].groups", "gateway.hostname"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := NewInventorySource(nil, tt.sets, false)
			var paths []string
			for _, c := range installedChanges(tt.installed, src, load(tt.sets...)) {
				paths = append(paths, c.Path)
			}
			if d := cmp.Diff(tt.wantPaths, paths); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
		})
	}
}

// TestInvalidInventoryMessage: the prefix is said once, and the error
// matches ErrInvalidInventory and its cause.
func TestInvalidInventoryMessage(t *testing.T) {
	inv := inventory.Default()
	inv.WaitTimeoutSeconds = 0
	verr := inv.Validate()
	if verr == nil {
		t.Fatal("an inventory with waitTimeoutSeconds 0 validated: the test proves nothing")
	}
	err := InvalidInventory(verr)
	if strings.Count(err.Error(), "invalid inventory") != 1 || !errors.Is(err, ErrInvalidInventory) || !errors.Is(err, verr) {
		t.Errorf("%q: want the prefix once, matching ErrInvalidInventory and the validation error", err)
	}
	load := errors.New("site.yaml: yaml: line 3: mapping values are not allowed in this context")
	if got := InvalidInventory(load).Error(); got != "invalid inventory: "+load.Error() {
		t.Errorf("load error: %q", got)
	}
}

// TestInstalledStale: the installed inventory is written when its content
// changed, or when an explicit run names it otherwise (the same content
// from another file, or --defaults); never for a plain run of the same
// content, nor for the same file again.
func TestInstalledStale(t *testing.T) {
	site := InventorySource{Files: []string{"/site.yaml"}}
	for _, tt := range []struct {
		name          string
		run, storedAs InventorySource
		digest        string
		want          bool
	}{
		{"same file, same content", site, site, "d1", false},
		{"plain run, same content", InventorySource{}, site, "d1", false},
		{"plain run with --set, same content", InventorySource{Sets: []string{"gateway.hostname"}}, site, "d1", false},
		{"other file, same content", InventorySource{Files: []string{"/installed-inventory.yaml"}}, site, "d1", true},
		{"--defaults, same content", InventorySource{Defaults: true}, site, "d1", true},
		{"same file, other content", site, site, "d2", true},
	} {
		run := tt.run
		run.Digest = tt.digest
		if got := installedStale(run, "d1", tt.storedAs); got != tt.want {
			t.Errorf("%s: installedStale = %v, want %v", tt.name, got, tt.want)
		}
	}
}
