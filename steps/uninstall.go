package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/engine"
)

// NamespacesStepID is the pseudo step that deletes the Namespaces maasctl
// created, after every step's objects are gone (case B20: never delete a
// namespace while it still holds finalised objects).
const NamespacesStepID = "uninstall/namespaces"

// VaultDeleter deletes the database password from Vault (vault.Client).
type VaultDeleter interface {
	DeleteSecret(ctx context.Context, logicalPath string) error
}

// UninstallOptions are the inputs of Uninstall.
type UninstallOptions struct {
	Config    *rest.Config
	Inventory *inventory.Inventory
	// Vault deletes the password with DeleteData; it may be nil otherwise.
	Vault VaultDeleter
	Emit  func(Event)
	Log   *zap.Logger
	// DeleteData also removes the database: the CNPG Cluster, its PVCs, its
	// Secret, the password in Vault and the CNPG operator maasctl installed.
	// That deletes every MaaS API key. The caller asks for confirmation.
	DeleteData bool
	// PurgeCRDs deletes the CRDs of the operators maasctl removed, when no
	// custom resource of them is left anywhere.
	PurgeCRDs bool
	// ForceRemoveFinalizers clears the finalizers of objects still blocked
	// when a wait times out, and says so (case B20).
	ForceRemoveFinalizers bool
	// DryRun only computes and returns the plan.
	DryRun bool
	// WaitTimeout bounds the wait for each step's objects to be gone.
	// Default: the inventory's waitTimeoutSeconds.
	WaitTimeout   time.Duration
	LeaseDuration time.Duration
	Identity      string
	// Registry is the steps whose objects are removed; nil means
	// NewRegistry(Inventory).
	Registry *Registry
	// Source says where Inventory came from. When it is not Explicit (no
	// -f, no --defaults) and the cluster was installed from an inventory
	// that deploys other objects (and not only by the run's own --set
	// values), Uninstall (the dry run too) returns an
	// *InventoryChangedError before any write.
	Source InventorySource
}

// Uninstall actions.
const (
	ActionDelete = "delete"
	ActionKeep   = "keep"
)

// UninstallAction is one object uninstall deletes or keeps.
type UninstallAction struct {
	Verb   string `json:"verb"`
	Object string `json:"object"`
	Reason string `json:"reason,omitempty"`

	entry *RecordEntry // nil for objects outside the record (CSV, PVC, Vault)
	kind  string       // "object", "csv", "pvc", "vault"
	stub  *unstructured.Unstructured
	uid   string
}

// UninstallStep is one step of the uninstall, in execution order.
type UninstallStep struct {
	ID      string            `json:"id"`
	Title   string            `json:"title"`
	Actions []UninstallAction `json:"actions,omitempty"`
	// Kept is true when the step keeps objects (its checkpoint stays).
	Kept bool `json:"kept,omitempty"`
}

// UninstallReport is the plan of an uninstall and, after a run, what is
// left: objects kept on purpose and orphans (objects labelled
// app.kubernetes.io/managed-by=maasctl that no record accounts for).
type UninstallReport struct {
	Steps   []UninstallStep `json:"steps"`
	Kept    []string        `json:"kept,omitempty"`
	Orphans []string        `json:"orphans,omitempty"`
	// Stopped, set on a dry run without -f on a cluster installed from
	// another inventory, says that a plain uninstall stops there without
	// writing, and Command is the uninstall that removes what Steps list
	// (the installed inventory's: "maasctl uninstall -f site.yaml").
	Stopped string `json:"plainUninstallStops,omitempty"`
	Command string `json:"command,omitempty"`
}

// removal is the Removal of step id; zero for a step of the record the
// registry does not have.
func (u *uninstaller) removal(id string) Removal {
	if s := u.reg.Get(id); s != nil {
		return s.Removal
	}
	return Removal{}
}

type uninstaller struct {
	o      UninstallOptions
	c      *kube.Clients
	reg    *Registry
	rec    *Record
	cps    *Checkpoints
	emit   func(Event)
	crds   map[string]bool // CRDs of removed operators, for PurgeCRDs
	kept   []string
	crdsMu sync.Mutex
}

// Uninstall removes what maasctl's install created, in the order derived
// from the registry in reverse (Registry.RemovalOrder), on the same
// schedule as install run backward, following the "Remove"
// section of reference/DEPLOYMENT.md and case B20:
//
//   - only objects the record marks as created are deleted; adopted ones
//     (there before maasctl) stay and lose only maasctl's managed-by label;
//   - each object is deleted and watched until it is gone; a finalizer that
//     never clears stops the uninstall with a *waiters.TimeoutError naming
//     the object and its finalizers (ForceRemoveFinalizers clears them);
//   - custom resources go before their operators; an OLM operator goes as
//     Subscription first, then the CSVs named in its installedCSV and
//     currentCSV, then its Deployments are waited for;
//   - GatewayClass openshift-default stays while other Gateways use it;
//   - the database (Cluster, PVCs, Secret, Vault password) and its operator
//     stay unless DeleteData;
//   - Namespaces maasctl created go last; CRDs only with PurgeCRDs;
//   - it ends with an orphan scan by the app.kubernetes.io/managed-by label.
//
// With DryRun it returns the plan and changes nothing.
func Uninstall(ctx context.Context, o UninstallOptions) (*UninstallReport, error) {
	if err := o.Inventory.Validate(); err != nil {
		return nil, InvalidInventory(err)
	}
	o.setDefaults()
	if o.DeleteData && o.Vault == nil && !o.DryRun {
		return nil, errors.New("--delete-data also deletes the password in Vault: configure Vault (VAULT_ADDR, VAULT_TOKEN) or keep the data")
	}
	clients, err := kube.NewWithOptions(o.Config, kube.Options{Log: o.Log})
	if err != nil {
		return nil, err
	}
	reg, err := registryFor(o.Registry, o.Inventory)
	if err != nil {
		return nil, err
	}
	if err := checkInstalled(ctx, clients, "uninstall", o.Source, o.Inventory, nil); err != nil {
		return nil, err
	}
	u := &uninstaller{o: o, c: clients, reg: reg, crds: map[string]bool{}}
	reads0, writes0 := clients.Requests.Reads(), clients.Requests.Writes()
	var lock *Lock
	if !o.DryRun {
		lock, err = AcquireLock(ctx, clients.Kube, o.Identity, o.LeaseDuration)
		if err != nil {
			return nil, err
		}
		if lock.TookOver != "" {
			o.Emit(Event{Type: EventProgress, Time: time.Now(), Message: lock.TookOver})
		}
		defer func() {
			if lock != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = lock.Release(rctx)
			}
		}()
	}
	if u.cps, u.rec, err = loadRunState(ctx, clients); err != nil {
		return nil, err
	}
	plan, err := u.plan(ctx)
	if err != nil {
		return nil, err
	}
	rep := &UninstallReport{Steps: plan}
	if o.DryRun {
		return rep, nil
	}
	start := time.Now()
	u.emit = engine.Emitter(o.Emit, len(plan))
	u.emit(Event{Type: EventRunStarted, Message: fmt.Sprintf("uninstall in %d steps", len(plan))})
	sum, runErr := u.run(ctx, plan)
	if runErr == nil {
		rep.Orphans, err = u.finish(ctx, &lock)
		if err != nil {
			runErr = err
		}
	}
	rep.Kept = u.kept
	sum.Duration = time.Since(start)
	sum.Reads = clients.Requests.Reads() - reads0
	sum.Writes = clients.Requests.Writes() - writes0
	u.emit(Event{Type: EventRunDone, Duration: sum.Duration, Summary: sum})
	return rep, runErr
}

// plan computes every step's actions from the record and the live cluster.
func (u *uninstaller) plan(ctx context.Context) ([]UninstallStep, error) {
	byStep := map[string][]RecordEntry{}
	var extra []string
	for _, e := range u.rec.Entries() {
		if u.reg.Get(e.Step) == nil {
			extra = append(extra, e.Step)
		}
		byStep[e.Step] = append(byStep[e.Step], e)
	}
	sort.Strings(extra)
	var out []UninstallStep
	keptNS := map[string]bool{}
	var namespaces []RecordEntry
	for _, id := range u.reg.RemovalOrder(extra) {
		st := UninstallStep{ID: id, Title: "remove: " + id}
		if s := u.reg.Get(id); s != nil {
			st.Title = "remove: " + s.Title
		}
		entries := byStep[id] // in apply order (Record.Entries)
		// Reverse apply order within a step: a MaaSModelRef before the
		// ExternalModel it refers to, a Subscription before its
		// OperatorGroup.
		for i := len(entries) - 1; i >= 0; i-- {
			e := entries[i]
			if e.Kind == "Namespace" && e.APIVersion == "v1" {
				if e.Origin == OriginCreated || e.Origin == OriginAdopted {
					namespaces = append(namespaces, e)
				}
				continue
			}
			acts, err := u.actionsFor(ctx, id, e)
			if err != nil {
				return nil, err
			}
			for _, a := range acts {
				if a.Verb == ActionKeep && a.entry != nil && a.entry.Origin == OriginCreated {
					st.Kept = true
					keptNS[e.Namespace] = true
				}
			}
			st.Actions = append(st.Actions, acts...)
		}
		rm := u.removal(id)
		if rm.VaultSecret != nil && u.o.DeleteData {
			st.Actions = append(st.Actions, UninstallAction{Verb: ActionDelete, kind: "vault",
				Object: "Vault secret " + rm.VaultSecret(u.o.Inventory), Reason: "the database password"})
		} else if rm.VaultSecret != nil && len(st.Actions) > 0 {
			// Listed with what else is kept: the password stays with the
			// database it opens (the trial of 2026-12-07 missed it).
			st.Actions = append(st.Actions, UninstallAction{Verb: ActionKeep, kind: "vault",
				Object: "Vault secret " + rm.VaultSecret(u.o.Inventory), Reason: "the database password; --delete-data deletes it"})
		}
		if rm.Data != "" && !u.o.DeleteData && len(st.Actions) > 0 {
			st.Kept = true
		}
		out = append(out, st)
	}
	sort.Slice(namespaces, func(i, j int) bool { return namespaces[i].Name < namespaces[j].Name })
	ns := UninstallStep{ID: NamespacesStepID, Title: "remove: Namespaces maasctl created"}
	for _, e := range namespaces {
		a := UninstallAction{Verb: ActionDelete, Object: e.String(), entry: &e, kind: "object", stub: e.Object(), uid: e.UID}
		switch {
		case e.Origin == OriginAdopted:
			a.Verb, a.Reason = ActionKeep, "adopted: it existed before maasctl"
		case keptNS[e.Name] || (!u.o.DeleteData && u.dataNamespace(e.Name, byStep)):
			a.Verb, a.Reason = ActionKeep, "holds objects that are kept"
			ns.Kept = true
		}
		ns.Actions = append(ns.Actions, a)
	}
	out = append(out, ns)
	return out, nil
}

// dataNamespace reports whether ns holds a created object of a step that
// holds data, or is the DataNamespace of such a step with recorded objects.
func (u *uninstaller) dataNamespace(ns string, byStep map[string][]RecordEntry) bool {
	for _, s := range u.reg.Steps {
		if s.Removal.Data == "" {
			continue
		}
		for _, e := range byStep[s.ID] {
			if e.Kind != "Namespace" && e.Namespace == ns && e.Origin == OriginCreated {
				return true
			}
		}
		if f := s.Removal.DataNamespace; f != nil && f(u.o.Inventory) == ns && len(byStep[s.ID]) > 0 {
			return true
		}
	}
	return false
}

// actionsFor decides what happens to one recorded object of step id.
func (u *uninstaller) actionsFor(ctx context.Context, id string, e RecordEntry) ([]UninstallAction, error) {
	a := UninstallAction{Verb: ActionDelete, Object: e.String(), entry: &e, kind: "object", stub: e.Object(), uid: e.UID}
	switch e.Origin {
	case OriginAbsent:
		return nil, nil
	case OriginAdopted:
		a.Verb, a.Reason = ActionKeep, "adopted: it existed before maasctl"
		return []UninstallAction{a}, nil
	case OriginOwned:
		a.Verb, a.Reason = ActionKeep, "owned by another object: removed with its owner"
		return []UninstallAction{a}, nil
	}
	rm := u.removal(id)
	if rm.Data != "" && !u.o.DeleteData {
		a.Verb, a.Reason = ActionKeep, rm.Data+"; --delete-data removes it (every API key is lost)"
		return []UninstallAction{a}, nil
	}
	live, err := u.c.Get(ctx, e.Object())
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		a.Reason = "already gone"
		return []UninstallAction{a}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", e, err)
	}
	if e.UID != "" && string(live.GetUID()) != e.UID {
		a.Verb, a.Reason = ActionKeep, "re-created by someone else after maasctl created it"
		return []UninstallAction{a}, nil
	}
	switch {
	case e.Kind == "GatewayClass":
		users, err := u.gatewaysOfClass(ctx, e.Name)
		if err != nil {
			return nil, err
		}
		if len(users) > 0 {
			a.Verb, a.Reason = ActionKeep, "still used by "+strings.Join(users, ", ")
		}
		return []UninstallAction{a}, nil
	case rm.Keep != nil && rm.Keep(e, live) != "":
		a.Verb, a.Reason = ActionKeep, rm.Keep(e, live)
		return []UninstallAction{a}, nil
	case e.Kind == "Subscription" && e.GVK().Group == "operators.coreos.com":
		out := []UninstallAction{a}
		seen := map[string]bool{}
		for _, f := range []string{"installedCSV", "currentCSV"} {
			name, _, _ := unstructured.NestedString(live.Object, "status", f)
			if name == "" || seen[name] {
				continue
			}
			seen[name] = true
			stub := &unstructured.Unstructured{}
			stub.SetGroupVersionKind(csvGVK)
			stub.SetNamespace(e.Namespace)
			stub.SetName(name)
			out = append(out, UninstallAction{Verb: ActionDelete, kind: "csv", stub: stub,
				Object: kube.Describe(stub), Reason: "the CSV of Subscription " + e.Name + " (a CSV left behind blocks a reinstall)"})
		}
		return out, nil
	case e.Kind == "Cluster" && e.GVK().Group == "postgresql.cnpg.io":
		out := []UninstallAction{a}
		pvcs, err := u.c.Kube.CoreV1().PersistentVolumeClaims(e.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "cnpg.io/cluster=" + e.Name})
		if err != nil {
			return nil, fmt.Errorf("list PVCs of Cluster %s/%s: %w", e.Namespace, e.Name, err)
		}
		for _, p := range pvcs.Items {
			stub := &unstructured.Unstructured{}
			stub.SetAPIVersion("v1")
			stub.SetKind("PersistentVolumeClaim")
			stub.SetNamespace(p.Namespace)
			stub.SetName(p.Name)
			out = append(out, UninstallAction{Verb: ActionDelete, kind: "pvc", stub: stub, uid: string(p.UID),
				Object: kube.Describe(stub), Reason: "data volume of Cluster " + e.Name})
		}
		return out, nil
	}
	return []UninstallAction{a}, nil
}

var gatewayGVK = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"}

// gatewaysOfClass lists the Gateways of class that maasctl did not create.
func (u *uninstaller) gatewaysOfClass(ctx context.Context, class string) ([]string, error) {
	ri, _, err := u.c.Resource(gatewayGVK, "")
	if kube.IsNotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	list, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list Gateways: %w", err)
	}
	var out []string
	for _, g := range list.Items {
		c, _, _ := unstructured.NestedString(g.Object, "spec", "gatewayClassName")
		if c != class || g.GetDeletionTimestamp() != nil {
			continue
		}
		if e, ok := u.rec.Lookup(&g); ok && e.Origin == OriginCreated {
			continue // ours: removed by an earlier step
		}
		out = append(out, "Gateway "+g.GetNamespace()+"/"+g.GetName())
	}
	return out, nil
}

// run removes the plan's steps on the install schedule run backward: a
// step's dependencies are the steps that depend on it in the registry
// (the Namespaces step waits for every other), one step at a time in
// removal order, and the first failure blocks every step not started. It
// returns the summary and the failed step's *StepError.
func (u *uninstaller) run(ctx context.Context, plan []UninstallStep) (*Summary, error) {
	sc := &engine.Schedule{Deps: map[string][]string{}, Serial: true, StopOnFailure: true}
	byID := map[string]UninstallStep{}
	index := map[string]int{}
	dependents := u.reg.Dependents()
	for i, st := range plan {
		sc.IDs = append(sc.IDs, st.ID)
		byID[st.ID], index[st.ID] = st, i+1
		sc.Deps[st.ID] = dependents[st.ID]
	}
	sc.Deps[NamespacesStepID] = slices.DeleteFunc(slices.Clone(sc.IDs), func(id string) bool { return id == NamespacesStepID })
	sc.Run = func(id string, _ func()) (EventType, error) { return u.removeStep(ctx, byID[id], index[id]) }
	sc.Halted = halted(ctx)
	sc.Blocked = func(id, cause string) {
		st := byID[id]
		msg := "not removed because " + cause + " failed"
		if cause == sc.Halted() {
			msg = "not removed: " + cause
		}
		u.emit(Event{Type: EventBlocked, Step: id, Title: st.Title, Index: index[id], Message: msg})
	}
	results := sc.Execute()
	sum, _ := engine.Summarize(sc.IDs, results)
	for _, id := range sc.IDs {
		if r := results[id]; r.Err != nil {
			return sum, &StepError{Step: id, Err: r.Err}
		}
	}
	return sum, nil
}

// removeStep removes one step of the plan and emits its events: keeps
// only (unchanged), or deletes and waits (done or failed).
func (u *uninstaller) removeStep(ctx context.Context, st UninstallStep, idx int) (EventType, error) {
	deletes := 0
	for _, a := range st.Actions {
		if a.Verb == ActionDelete {
			deletes++
		}
	}
	if deletes == 0 {
		for _, a := range st.Actions {
			u.keep(a)
			u.emit(Event{Type: EventProgress, Step: st.ID, Index: idx, Message: "keeping " + a.Object + ": " + a.Reason})
		}
		u.emit(Event{Type: EventUnchanged, Step: st.ID, Title: st.Title, Index: idx, Message: "nothing to remove"})
		u.afterStep(ctx, st)
		return EventUnchanged, nil
	}
	t0 := time.Now()
	u.emit(Event{Type: EventStarted, Step: st.ID, Title: st.Title, Index: idx})
	if err := u.runStep(ctx, st, idx); err != nil {
		u.emit(failedEvent(st.ID, st.Title, idx, err, time.Since(t0)))
		return EventFailed, err
	}
	u.afterStep(ctx, st)
	u.emit(Event{Type: EventDone, Step: st.ID, Title: st.Title, Index: idx, Duration: time.Since(t0)})
	return EventDone, nil
}

func (u *uninstaller) keep(a UninstallAction) {
	if a.kind == "vault" || a.entry != nil && a.entry.Origin == OriginCreated {
		u.kept = append(u.kept, a.Object+" ("+a.Reason+")")
	}
}

// afterStep forgets the entries of a finished step and drops its
// checkpoint unless it keeps objects, so status shows it pending again.
func (u *uninstaller) afterStep(ctx context.Context, st UninstallStep) {
	var gone []RecordEntry
	for _, a := range st.Actions {
		if a.entry != nil && a.Verb == ActionDelete {
			gone = append(gone, *a.entry)
		}
	}
	u.rec.Forget(gone...)
	if st.Kept {
		return
	}
	// A checkpoint the step's record shard carries goes with the shard's
	// next write (or with the shard, once the step has no entries left).
	u.rec.DropCheckpoint(st.ID)
	if err := u.rec.Save(ctx); err != nil {
		u.o.Log.Warn("drop checkpoint", zap.String("step", st.ID), zap.Error(err))
	}
	if _, ok := u.rec.cpData[engine.CheckpointKey(st.ID)]; ok {
		patch := fmt.Sprintf(`{"data":{%q:null}}`, engine.CheckpointKey(st.ID))
		_, err := u.c.Kube.CoreV1().ConfigMaps(StateNamespace).Patch(ctx, CheckpointsConfigMap, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: kube.FieldManager})
		if err != nil && !apierrors.IsNotFound(err) {
			u.o.Log.Warn("drop checkpoint", zap.String("step", st.ID), zap.Error(err))
		}
	}
}

func (u *uninstaller) runStep(ctx context.Context, st UninstallStep, idx int) error {
	progress := func(format string, args ...any) {
		u.emit(Event{Type: EventProgress, Step: st.ID, Index: idx, Message: fmt.Sprintf(format, args...)})
	}
	if st.ID == NamespacesStepID {
		return u.removeNamespaces(ctx, st, progress)
	}
	for _, a := range st.Actions {
		if a.Verb == ActionKeep {
			u.keep(a)
			progress("keeping %s: %s", a.Object, a.Reason)
			continue
		}
		switch a.kind {
		case "vault":
			path := u.removal(st.ID).VaultSecret(u.o.Inventory)
			if err := u.o.Vault.DeleteSecret(ctx, path); err != nil {
				return fmt.Errorf("delete the database password in Vault: %w", err)
			}
			progress("deleted Vault secret %s", path)
			continue
		case "csv":
			if u.o.PurgeCRDs {
				u.noteCRDs(ctx, a.stub)
			}
		}
		if err := u.deleteAndWait(ctx, st.ID, a, progress); err != nil {
			if a.entry != nil {
				if err2 := u.rec.Save(ctx); err2 != nil {
					u.o.Log.Warn("save record", zap.Error(err2))
				}
			}
			return err
		}
		if a.kind == "csv" {
			if err := u.waitOperatorGone(ctx, st.ID, a.stub, progress); err != nil {
				return err
			}
		}
		if a.entry != nil {
			u.rec.Forget(*a.entry)
			if err := u.rec.Save(ctx); err != nil {
				return err
			}
		}
	}
	if crds := u.removal(st.ID).CRDs; crds != nil && u.o.PurgeCRDs {
		u.crdsMu.Lock()
		for _, c := range crds() {
			u.crds[c] = true
		}
		u.crdsMu.Unlock()
	}
	return nil
}

func (u *uninstaller) noteCRDs(ctx context.Context, csvStub *unstructured.Unstructured) {
	live, err := u.c.Get(ctx, csvStub)
	if err != nil {
		return
	}
	u.crdsMu.Lock()
	defer u.crdsMu.Unlock()
	for _, n := range ownedCRDs(live) {
		u.crds[n] = true
	}
}

// setDefaults fills the options left zero: no log, no events, the
// inventory's wait timeout, a 60s Lease, this process's identity.
func (o *UninstallOptions) setDefaults() {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Emit == nil {
		o.Emit = func(Event) {}
	}
	if o.WaitTimeout == 0 {
		o.WaitTimeout = time.Duration(o.Inventory.WaitTimeoutSeconds) * time.Second
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = 60 * time.Second
	}
	if o.Identity == "" {
		o.Identity = Identity()
	}
}
