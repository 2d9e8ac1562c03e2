package steps

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
)

// RecordConfigMap is the ConfigMap (in StateNamespace) that records, for
// every object an install step writes, whether maasctl's installation
// created it or found it already there. Uninstall deletes by this record,
// the way clusterctl deletes by its inventory, never by label alone: labels
// are also put on objects maasctl only adopted.
const (
	RecordConfigMap = "maasctl-inventory"
	recordKey       = "objects.yaml"
)

// Origin says how an object came to be part of the installation.
type Origin string

// Origins. Only OriginCreated objects are ever deleted by uninstall.
const (
	// OriginAbsent: the object did not exist when maasctl first looked for
	// it, and it does not exist yet.
	OriginAbsent Origin = "absent"
	// OriginCreated: the object did not exist when maasctl first looked and
	// exists after its step ran, so this installation brought it (maasctl
	// itself, or an operator maasctl installed, e.g. the RHOAI operator's
	// default DSCInitialization).
	OriginCreated Origin = "created"
	// OriginAdopted: the object existed before maasctl first looked for it;
	// maasctl may have applied fields to it but never deletes it.
	OriginAdopted Origin = "adopted"
	// OriginOwned: the object has a controller ownerReference; its owner's
	// operator or the garbage collector removes it, not maasctl.
	OriginOwned Origin = "owned"
)

// RecordEntry is one object of the record. It names the object; it never
// holds its content.
type RecordEntry struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Step is the ID of the step that writes the object; Order is its
	// position among that step's objects (apply order).
	Step   string `json:"step"`
	Order  int    `json:"order"`
	Origin Origin `json:"origin"`
	// UID is the object's metadata.uid when it was last seen.
	UID string `json:"uid,omitempty"`
	// Since is when the origin was recorded (UTC).
	Since time.Time `json:"since"`
}

// Object returns an unstructured stub that names the entry's object.
func (e RecordEntry) Object() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(e.APIVersion)
	u.SetKind(e.Kind)
	u.SetNamespace(e.Namespace)
	u.SetName(e.Name)
	return u
}

// String names the entry as Kind namespace/name.
func (e RecordEntry) String() string { return kube.Describe(e.Object()) }

// GVK returns the entry's group, version and kind.
func (e RecordEntry) GVK() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(e.APIVersion, e.Kind)
}

// recordKeyOf identifies an object independently of its API version.
func recordKeyOf(apiVersion, kind, ns, name string) string {
	gv, _ := schema.ParseGroupVersion(apiVersion)
	return gv.Group + "/" + kind + "/" + ns + "/" + name
}

func (e RecordEntry) key() string { return recordKeyOf(e.APIVersion, e.Kind, e.Namespace, e.Name) }

// Record is the created-versus-adopted record of one cluster, kept in
// ConfigMap maasctl/maasctl-inventory. It is safe for concurrent use.
type Record struct {
	c *kube.Clients
	// saveMu serialises Save so that a later write always carries every
	// change made before it started.
	saveMu  sync.Mutex
	mu      sync.Mutex
	entries map[string]*RecordEntry
	now     func() time.Time
}

// LoadRecord reads the record; a missing ConfigMap is an empty record.
func LoadRecord(ctx context.Context, c *kube.Clients) (*Record, error) {
	r := &Record{c: c, entries: map[string]*RecordEntry{}, now: time.Now}
	cm, err := c.Kube.CoreV1().ConfigMaps(StateNamespace).Get(ctx, RecordConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return r, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read record %s/%s: %w", StateNamespace, RecordConfigMap, err)
	}
	var list []RecordEntry
	if err := yaml.Unmarshal([]byte(cm.Data[recordKey]), &list); err != nil {
		return nil, fmt.Errorf("read record %s/%s: key %s: %w", StateNamespace, RecordConfigMap, recordKey, err)
	}
	for i := range list {
		e := list[i]
		r.entries[e.key()] = &e
	}
	return r, nil
}

// Entries returns a copy of every entry, sorted by step, then apply order,
// then object.
func (r *Record) Entries() []RecordEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecordEntry, 0, len(r.entries))
	for _, e := range r.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Step != out[j].Step {
			return out[i].Step < out[j].Step
		}
		if out[i].Order != out[j].Order {
			return out[i].Order < out[j].Order
		}
		return out[i].key() < out[j].key()
	})
	return out
}

// Lookup returns the entry of obj.
func (r *Record) Lookup(obj *unstructured.Unstructured) (RecordEntry, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.entries[recordKeyOf(obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName())]
	if !ok {
		return RecordEntry{}, false
	}
	return *e, true
}

// StepObjects returns stubs or rendered copies of every object step id
// writes: its rendered objects and the Secrets the step builds from Vault
// data at apply time (named here without their data).
func StepObjects(e *Env, id string) []*unstructured.Unstructured {
	out := append([]*unstructured.Unstructured(nil), e.objects(id)...)
	secret := func(ns, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("v1")
		u.SetKind("Secret")
		u.SetNamespace(ns)
		u.SetName(name)
		return u
	}
	switch id {
	case "database/secret":
		out = append(out, secret(e.Inv.Database.Namespace, e.Inv.Database.SecretName))
	case "dbsecret/maas-db-config":
		// One copy per namespace the RHOAI release reads it from; the step
		// creates those namespaces when missing.
		for _, ns := range LayoutOf(e.Facts).DBConfigNamespaces(e.Inv) {
			if ns != e.Inv.DBConfig.Namespace {
				out = append(out, namespaceObject(ns))
			}
			out = append(out, secret(ns, e.Inv.DBConfig.Name))
		}
	case "rhoai/dsci":
		// The RHOAI operator creates the namespaces the DSCInitialization
		// names; when they were not there before, the install brought them.
		for _, ns := range []string{e.Inv.RHOAI.ApplicationsNamespace, e.Inv.RHOAI.MonitoringNamespace} {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion("v1")
			u.SetKind("Namespace")
			u.SetName(ns)
			out = append(out, u)
		}
	}
	return out
}

// liveState reads obj: exists, its UID and whether a controller owns it.
// A kind that is not served means the object does not exist.
func liveState(ctx context.Context, c *kube.Clients, obj *unstructured.Unstructured) (exists bool, uid string, owned bool, err error) {
	live, err := c.Get(ctx, obj)
	if apierrors.IsNotFound(err) || kube.IsNotServed(err) {
		return false, "", false, nil
	}
	if err != nil {
		return false, "", false, err
	}
	for _, ref := range live.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			owned = true
		}
	}
	return true, string(live.GetUID()), owned, nil
}

// classify decides an entry's origin from what maasctl knew before and what
// it sees now. prev is nil when the object has no entry yet (maasctl looks
// at it for the first time, before its step runs); otherwise the step has
// just run.
func classify(prev *RecordEntry, exists bool, uid string, owned bool) (Origin, string) {
	if prev == nil { // first look, before any step of this installation wrote it
		switch {
		case !exists:
			return OriginAbsent, ""
		case owned:
			return OriginOwned, uid
		default:
			return OriginAdopted, uid
		}
	}
	if !exists {
		return prev.Origin, prev.UID
	}
	switch prev.Origin {
	case OriginAbsent:
		if owned {
			return OriginOwned, uid
		}
		return OriginCreated, uid
	case OriginAdopted, OriginCreated:
		// The object maasctl knew is gone and the step made a new one.
		if uid != prev.UID && !owned {
			return OriginCreated, uid
		}
	}
	return prev.Origin, prev.UID
}

// Snapshot records every object of the registry's steps that has no entry
// yet: adopted when it exists now, absent when not. It runs before a run's
// first step, so an object an operator creates later during the install
// (the default DSCInitialization) counts as part of the installation.
func (r *Record) Snapshot(ctx context.Context, e *Env, reg *Registry) error {
	changed := false
	for _, s := range reg.Steps {
		for i, o := range StepObjects(e, s.ID) {
			if _, ok := r.Lookup(o); ok {
				continue
			}
			exists, uid, owned, err := liveState(ctx, e.Clients, o)
			if err != nil {
				// Unreadable (forbidden, say): leave it unrecorded. The
				// step's own checks report the problem; an object without
				// an entry is never deleted by uninstall.
				r.skipped(e, o, err)
				continue
			}
			origin, uid := classify(nil, exists, uid, owned)
			r.set(o, s.ID, i, origin, uid)
			changed = true
		}
	}
	if !changed {
		return nil
	}
	return r.Save(ctx)
}

// Observe re-reads the objects of step id after it ran (whether it
// succeeded or not) and records those it brought into existence.
func (r *Record) Observe(ctx context.Context, e *Env, id string) error {
	changed := false
	for i, o := range StepObjects(e, id) {
		prev, ok := r.Lookup(o)
		if !ok {
			// Snapshot could not read it before the step ran, so whether
			// the step created it is unknown: it stays unrecorded.
			continue
		}
		exists, uid, owned, err := liveState(ctx, e.Clients, o)
		if err != nil {
			r.skipped(e, o, err)
			continue
		}
		p := &prev
		origin, uid := classify(p, exists, uid, owned)
		if ok && origin == prev.Origin && uid == prev.UID {
			continue
		}
		r.set(o, id, i, origin, uid)
		changed = true
	}
	if !changed {
		return nil
	}
	return r.Save(ctx)
}

func (r *Record) skipped(e *Env, o *unstructured.Unstructured, err error) {
	if e.Log != nil {
		e.Log.Debug("record: cannot read object", zap.String("object", kube.Describe(o)), zap.Error(err))
	}
}

func (r *Record) set(o *unstructured.Unstructured, step string, order int, origin Origin, uid string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := recordKeyOf(o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
	if prev, ok := r.entries[k]; ok {
		// The first step that writes an object owns its entry.
		step, order = prev.Step, prev.Order
	}
	r.entries[k] = &RecordEntry{
		APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(),
		Step: step, Order: order, Origin: origin, UID: uid, Since: r.now().UTC().Truncate(time.Second),
	}
}

// Forget drops the entries of objects that are gone.
func (r *Record) Forget(entries ...RecordEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		delete(r.entries, e.key())
	}
}

// Len is the number of entries.
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// Save writes the record with server-side apply (field manager maasctl).
func (r *Record) Save(ctx context.Context) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	b, err := yaml.Marshal(r.Entries())
	if err != nil {
		return fmt.Errorf("encode record: %w", err)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": RecordConfigMap, "namespace": StateNamespace,
			"labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue},
			"annotations": map[string]any{
				"maasctl.io/description": "objects maasctl's install wrote: created ones are deleted by 'maasctl uninstall', adopted ones are left in place",
			},
		},
		"data": map[string]any{recordKey: string(b)},
	}}
	if _, err := r.c.Apply(ctx, cm); err != nil {
		return fmt.Errorf("write record %s/%s: %w", StateNamespace, RecordConfigMap, err)
	}
	return nil
}

// describeEntries lists entries as "Kind ns/name, ..." for messages.
func describeEntries(list []RecordEntry) string {
	var s []string
	for _, e := range list {
		s = append(s, e.String())
	}
	return strings.Join(s, ", ")
}
