package steps

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
)

// InstalledInventoryConfigMap (in StateNamespace, beside the record, with
// maasctl's managed-by label) holds the inventory the cluster was installed
// from: key inventory.yaml is the effective inventory in its redacted form
// (inventory.Redacted: no vault.address; the inventory holds no other
// secret), key source.yaml is an InventorySource (the -f files, the --set
// paths without their values, when, a digest, the maasctl version). It is
// written by the first step of an install run that applies, when its
// digest differs from the stored one; a run whose steps are all unchanged
// writes nothing. A complete uninstall deletes it with the record.
const InstalledInventoryConfigMap = "maasctl-installed-inventory"

const (
	installedInventoryKey = "inventory.yaml"
	installedSourceKey    = "source.yaml"
)

// ErrInventoryChanged is wrapped by *InventoryChangedError.
var ErrInventoryChanged = errors.New("the cluster was installed from another inventory")

// InventorySource says where a run's inventory came from.
type InventorySource struct {
	// Files are the -f files, as absolute paths, in order.
	Files []string `json:"files,omitempty"`
	// Sets are the key paths of the --set overrides, without their values.
	Sets []string `json:"sets,omitempty"`
	// Defaults: --defaults was given (the default inventory on purpose).
	Defaults bool `json:"defaults,omitempty"`
	// InstalledAt is when a run first applied a step with it (UTC), in
	// the stored source only.
	InstalledAt time.Time `json:"installedAt,omitzero"`
	// Digest is "sha256:" and the first 12 hex digits of the Hash of the
	// redacted inventory, in the stored source only.
	Digest string `json:"digest,omitempty"`
	// ToolVersion is the maasctl version of that run.
	ToolVersion string `json:"toolVersion,omitempty"`
	// setValues are the --set overrides with their values, for the
	// guard of this run only (never stored).
	setValues []string
	// ownWaitTimeout, when not 0, is the inventory's own
	// waitTimeoutSeconds before the run's --timeout replaced it: the
	// installed inventory keeps it (--timeout bounds one run only).
	ownWaitTimeout int
}

// WithOwnWaitTimeout returns s recording seconds, the inventory's
// waitTimeoutSeconds before --timeout replaced it for this run, so that
// the installed inventory stores that value and not the flag's.
func (s InventorySource) WithOwnWaitTimeout(seconds int) InventorySource {
	s.ownWaitTimeout = seconds
	return s
}

// NewInventorySource is the source of an inventory loaded from files
// (made absolute) and --set values "path=value" (only the paths are kept).
func NewInventorySource(files, sets []string, defaults bool) InventorySource {
	src := InventorySource{Defaults: defaults}
	for _, f := range files {
		if abs, err := filepath.Abs(f); err == nil {
			f = abs
		}
		src.Files = append(src.Files, f)
	}
	for _, s := range sets {
		p, _, _ := strings.Cut(s, "=")
		src.Sets = append(src.Sets, strings.TrimSpace(p))
	}
	src.setValues = slices.Clone(sets)
	return src
}

// Explicit reports whether the run named its inventory (-f or
// --defaults): then it may replace the installed one.
func (s InventorySource) Explicit() bool { return len(s.Files) > 0 || s.Defaults }

// Describe names the source: "site.yaml", "the default inventory", each
// with "with --set a, b" when there were overrides.
func (s InventorySource) Describe() string {
	d := "the default inventory"
	if len(s.Files) > 0 {
		d = strings.Join(s.Files, ", ")
	}
	if len(s.Sets) > 0 {
		d += " with --set " + strings.Join(s.Sets, ", ")
	}
	return d
}

// InstalledInventory is the inventory a cluster was installed from.
type InstalledInventory struct {
	Source    InventorySource      `json:"source"`
	Inventory *inventory.Inventory `json:"inventory"`
}

// Describe says "the inventory installed from <files> at <time> (digest
// sha256:...)".
func (i *InstalledInventory) Describe() string {
	return fmt.Sprintf("the inventory installed from %s at %s (digest %s)",
		i.Source.Describe(), i.Source.InstalledAt.UTC().Format(time.RFC3339), i.Source.Digest)
}

// inventoryDigest is the digest stored in InventorySource.Digest.
func inventoryDigest(inv *inventory.Inventory) string {
	return "sha256:" + inv.Redacted().Hash()[:12]
}

// LoadInstalledInventory reads InstalledInventoryConfigMap; none is (nil,
// nil).
func LoadInstalledInventory(ctx context.Context, c *kube.Clients) (*InstalledInventory, error) {
	cm, err := c.Kube.CoreV1().ConfigMaps(StateNamespace).Get(ctx, InstalledInventoryConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the installed inventory (ConfigMap %s/%s): %w", StateNamespace, InstalledInventoryConfigMap, err)
	}
	return decodeInstalled(cm)
}

func decodeInstalled(cm *corev1.ConfigMap) (*InstalledInventory, error) {
	var src InventorySource
	if err := yaml.Unmarshal([]byte(cm.Data[installedSourceKey]), &src); err != nil {
		return nil, fmt.Errorf("read the installed inventory %s/%s: key %s: %w", StateNamespace, cm.Name, installedSourceKey, err)
	}
	inv, err := inventory.ParseStored([]byte(cm.Data[installedInventoryKey]))
	if err != nil {
		return nil, fmt.Errorf("read the installed inventory %s/%s: key %s: %w; delete the ConfigMap to forget it", StateNamespace, cm.Name, installedInventoryKey, err)
	}
	return &InstalledInventory{Source: src, Inventory: inv}, nil
}

// installedObject is the ConfigMap that stores inv (redacted) and src.
func installedObject(src InventorySource, inv *inventory.Inventory) (*unstructured.Unstructured, error) {
	y, err := inv.Redacted().YAML()
	if err != nil {
		return nil, err
	}
	s, err := yaml.Marshal(src)
	if err != nil {
		return nil, fmt.Errorf("encode inventory source: %w", err)
	}
	return stateConfigMap(InstalledInventoryConfigMap,
		"the inventory this cluster was installed from ("+src.Describe()+"); 'maasctl inventory show' prints it; plain install, uninstall, plan and status use it",
		map[string]any{installedInventoryKey: string(y), installedSourceKey: string(s)}), nil
}

// stateConfigMap is a ConfigMap of maasctl's state in StateNamespace
// (the installed inventory, the uninstall's mark): labelled managed-by
// maasctl, so LoadRecord's one LIST reads it, with a description
// annotation for whoever finds it.
func stateConfigMap(name, description string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": StateNamespace,
			"labels":      map[string]any{assets.ManagedByLabel: assets.ManagedByValue},
			"annotations": map[string]any{"maasctl.io/description": description},
		},
		"data": data,
	}}
}

// installedWriter writes the installed inventory once, before the first
// step of a run applies (Runner.runStep through Record.SaveInstalled).
type installedWriter struct {
	once sync.Once
	err  error
	// stored is the digest in the cluster ("" when none), storedSrc the
	// stored source.
	stored    string
	storedSrc InventorySource
	// src and inv are this run's; nil inv: nothing to write.
	src InventorySource
	inv *inventory.Inventory
}

// SetInstalled makes the record write inv as the installed inventory
// (InstalledInventoryConfigMap) before the first step of the run applies,
// unless the stored one has the same digest. When --timeout replaced the
// inventory's waitTimeoutSeconds for this run
// (InventorySource.WithOwnWaitTimeout), the inventory's own value is
// stored instead: --timeout changes no object.
func (r *Record) SetInstalled(src InventorySource, inv *inventory.Inventory, toolVersion string) {
	if src.ownWaitTimeout > 0 && src.ownWaitTimeout != inv.WaitTimeoutSeconds {
		inv = inv.Redacted() // a copy; vault.address is never stored
		inv.WaitTimeoutSeconds = src.ownWaitTimeout
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	src.Digest = inventoryDigest(inv)
	src.ToolVersion = toolVersion
	r.installed.src, r.installed.inv = src, inv
}

// SaveInstalled writes the inventory SetInstalled gave, the first time it
// is called, when its digest differs from the stored one, or when this
// run named its inventory (-f, --defaults) otherwise than the stored
// source does (the same content from another file: the fixes that name
// the source must name the new one); later calls return the first call's
// error. It first deletes the last uninstall's mark (UninstalledConfigMap)
// when the record was loaded with one: a step is being applied again.
func (r *Record) SaveInstalled(ctx context.Context) error {
	w := &r.installed
	w.once.Do(func() {
		if w.err = r.clearUninstalled(ctx); w.err != nil {
			return
		}
		r.mu.Lock()
		src, inv, stored, storedSrc := w.src, w.inv, w.stored, w.storedSrc
		r.mu.Unlock()
		if inv == nil || !installedStale(src, stored, storedSrc) {
			return
		}
		src.InstalledAt = r.now().UTC().Truncate(time.Second)
		obj, err := installedObject(src, inv)
		if err != nil {
			w.err = err
			return
		}
		if _, err := r.c.Apply(kube.KeepView(ctx), obj); err != nil {
			w.err = fmt.Errorf("write the installed inventory %s/%s: %w", StateNamespace, InstalledInventoryConfigMap, err)
			return
		}
		r.mu.Lock()
		w.stored = src.Digest
		r.mu.Unlock()
	})
	return w.err
}

// installedStale reports whether the installed inventory must be written
// for a run with source src: the stored digest differs, or the run named
// its inventory (-f, --defaults) otherwise than storedSrc does.
func installedStale(src InventorySource, stored string, storedSrc InventorySource) bool {
	return src.Digest != stored || src.Explicit() && !sameOrigin(src, storedSrc)
}

// sameOrigin reports whether a and b name the inventory alike: the same
// files, --set paths and --defaults.
func sameOrigin(a, b InventorySource) bool {
	return slices.Equal(a.Files, b.Files) && slices.Equal(a.Sets, b.Sets) && a.Defaults == b.Defaults
}

// deleteInstalledInventory deletes InstalledInventoryConfigMap.
func deleteInstalledInventory(ctx context.Context, c *kube.Clients) error {
	return deleteStateConfigMap(ctx, c, InstalledInventoryConfigMap, "")
}

// deleteStateConfigMap deletes ConfigMap name in StateNamespace; one that
// is already gone is no error. what, when set, says what it is in the
// error ("the last uninstall's mark").
func deleteStateConfigMap(ctx context.Context, c *kube.Clients, name, what string) error {
	err := c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(kube.KeepView(ctx), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		if what != "" {
			what = " (" + what + ")"
		}
		return fmt.Errorf("delete ConfigMap %s/%s%s: %w", StateNamespace, name, what, err)
	}
	return nil
}

// InventoryChangedError is a plain install or uninstall (no -f, no
// --defaults) on a cluster installed from an inventory that deploys other
// objects than the run's. Nothing was changed.
type InventoryChangedError struct {
	// Command is install or uninstall.
	Command   string
	Installed *InstalledInventory
	// Run is where this run's inventory came from.
	Run InventorySource
	// Changes go from the installed inventory to the run's (Deployed
	// parts only).
	Changes []inventory.Change
	// Steps are the steps whose objects would change (install only).
	Steps []string
}

func (e *InventoryChangedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "this cluster was installed from %s, at %s (digest %s); this %s would use %s, which differs:",
		e.Installed.Source.Describe(), e.Installed.Source.InstalledAt.UTC().Format(time.RFC3339), e.Installed.Source.Digest, e.Command, e.Run.Describe())
	for _, c := range e.Changes {
		b.WriteString("\n  " + c.String())
	}
	if len(e.Steps) > 0 {
		fmt.Fprintf(&b, "\nsteps whose objects would change: %s", strings.Join(e.Steps, ", "))
	}
	inst := e.Installed.Source
	// What each way out does, said for the command it is given to.
	keep, defaults := "to keep the installed inventory", "to go back to the default inventory"
	if e.Command == "uninstall" {
		keep, defaults = "to remove what the installed inventory deployed", "to remove what the default inventory deploys"
	}
	if len(inst.Files) > 0 && len(inst.Sets) == 0 {
		fmt.Fprintf(&b, "\nnothing was changed; run 'maasctl %s -f %s' %s, or 'maasctl %s --defaults' %s ('maasctl inventory show' prints the installed one)",
			e.Command, strings.Join(inst.Files, " -f "), keep, e.Command, defaults)
		return b.String()
	}
	// Only the stored inventory holds the --set values it was installed
	// with (the source keeps their paths only), and the default inventory
	// of another maasctl version may differ: re-applying the files, or the
	// defaults, would change what they set.
	why := "the installed inventory is stored whole"
	if len(inst.Sets) > 0 {
		why = "it was installed with --set " + strings.Join(inst.Sets, ", ") + ", whose values only the stored inventory holds"
	}
	fmt.Fprintf(&b, "\nnothing was changed; %s run 'maasctl inventory show > installed-inventory.yaml' and then 'maasctl %s -f installed-inventory.yaml' (%s), or run 'maasctl %s --defaults' %s",
		keep, e.Command, why, e.Command, defaults)
	return b.String()
}

// Unwrap returns ErrInventoryChanged.
func (e *InventoryChangedError) Unwrap() error { return ErrInventoryChanged }

// checkInstalled is the guard of install and uninstall: when the run did
// not name its inventory (src.Explicit is false) and the cluster's
// installed inventory deploys other objects than inv, it returns an
// *InventoryChangedError. A run whose --set values, applied to the
// installed inventory, give inv (Deployed parts) passes: it changes only
// what it sets. It only reads. diffSteps, when set, names the steps whose
// objects would change.
func checkInstalled(ctx context.Context, c *kube.Clients, command string, src InventorySource, inv *inventory.Inventory,
	diffSteps func(old *inventory.Inventory) []string) error {
	if src.Explicit() {
		return nil
	}
	inst, err := LoadInstalledInventory(ctx, c)
	if err != nil || inst == nil {
		return err
	}
	changes := installedChanges(inst.Inventory, src, inv)
	if len(changes) == 0 {
		return nil
	}
	e := &InventoryChangedError{Command: command, Installed: inst, Run: src, Changes: changes}
	if diffSteps != nil {
		e.Steps = diffSteps(inst.Inventory)
	}
	return e
}

// WouldStop reports whether a plain install or uninstall with source src
// and inventory inv (no -f, no --defaults) would stop on a cluster
// installed from inst (ErrInventoryChanged), for plan, diff and status to
// say so before the user runs it.
func WouldStop(inst *InstalledInventory, src InventorySource, inv *inventory.Inventory) bool {
	return inst != nil && !src.Explicit() && len(installedChanges(inst.Inventory, src, inv)) > 0
}

// installedChanges is the changes from the installed inventory to inv
// (Deployed parts), none when the run's --set values applied to the
// installed inventory give inv.
func installedChanges(installed *inventory.Inventory, src InventorySource, inv *inventory.Inventory) []inventory.Change {
	changes := inventory.Diff(installed.Deployed(), inv.Deployed())
	if len(changes) == 0 || len(src.setValues) == 0 {
		return changes
	}
	if with, err := inventory.Apply(installed, src.setValues); err == nil && len(inventory.Diff(with.Deployed(), inv.Deployed())) == 0 {
		return nil
	}
	return changes
}

// changedSteps lists the steps whose inputs differ between the
// environments of two inventories (InputHash: the rendered objects and
// what else the step reads of the inventory, a minimum CSV version say),
// or that only one has, sorted: what a run would re-apply.
func changedSteps(a, b *Env) []string {
	ids := map[string]bool{}
	for _, s := range a.Registry.Steps {
		ids[s.ID] = true
	}
	for _, s := range b.Registry.Steps {
		ids[s.ID] = true
	}
	ra, rb := &Runner{Env: a}, &Runner{Env: b}
	var out []string
	for id := range ids {
		sa, sb := a.Registry.Get(id), b.Registry.Get(id)
		if sa == nil || sb == nil || ra.InputHash(sa) != rb.InputHash(sb) {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}
