package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
)

// RecordConfigMap names maasctl's record of the objects its install wrote
// (in StateNamespace): for every object, whether maasctl's installation
// created it or found it already there. Uninstall deletes by this record,
// the way clusterctl deletes by its inventory, never by label alone: labels
// are also put on objects maasctl only adopted.
//
// The record is sharded: one ConfigMap per step, named
// "maasctl-inventory.<step ID with / replaced by .>" (see RecordShardName),
// and, when a step's entries exceed RecordShardBytes, further chunks with
// the suffix ".1", ".2", ...; each holds its entries as a YAML list under
// key objects.yaml and carries label RecordLabel, so one LIST loads the
// whole record. Before a step has a shard, its entries are in the pending
// shard (RecordPendingConfigMap) the run's snapshot writes. A ConfigMap
// named RecordConfigMap itself is the single record older maasctl versions
// wrote; it is still read, and deleted once its entries were written as
// shards. Beside the record, ConfigMap
// InstalledInventoryConfigMap ("maasctl-installed-inventory", no record
// label, not a shard) holds the inventory the cluster was installed from
// (installed.go).
const (
	RecordConfigMap = "maasctl-inventory"
	recordKey       = "objects.yaml"
	// RecordLabel (value RecordLabelValue) marks every shard of the
	// record; RecordStepAnnotation names the step a shard belongs to.
	RecordLabel          = "maasctl.io/record"
	RecordLabelValue     = "objects"
	RecordStepAnnotation = "maasctl.io/record-step"
	// RecordShardBytes is the most bytes of entries one shard holds, well
	// under the 1 MiB limit of an object in etcd (a larger single entry
	// still gets a shard of its own).
	RecordShardBytes = 400_000
)

// RecordSelector is the label selector of every shard of the record.
var RecordSelector = RecordLabel + "=" + RecordLabelValue

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

// Record is the created-versus-adopted record of one cluster, kept in the
// shards described at RecordConfigMap. It is safe for concurrent use.
type Record struct {
	c *kube.Clients
	// saveMu serialises Save (and the pending shard's writes:
	// savePending, CompactPending) so that a later write always carries
	// every change made before it started.
	saveMu  sync.Mutex
	mu      sync.Mutex
	entries map[string]*RecordEntry
	// dirty holds the steps whose shards differ from what is stored.
	dirty map[string]bool
	// shards maps each stored shard's name to its step.
	shards map[string]string
	// legacy: the single ConfigMap RecordConfigMap of an older maasctl
	// exists and is deleted after the next successful Save.
	legacy bool
	// pending names the stored chunks of the pending shard
	// (RecordPendingConfigMap) and pendingSteps the steps whose entries
	// they hold.
	pending      []string
	pendingSteps map[string]bool
	// checkpoints are the checkpoints the shards carry, by step ID
	// (CarryCheckpoint); cpData is the data of the checkpoints ConfigMap
	// the record's LIST held (nil: none).
	checkpoints map[string]Checkpoint
	cpData      map[string]string
	now         func() time.Time
	// installed writes the installed inventory (installed.go).
	installed installedWriter
	// uninstalled is the mark of a finished uninstall that kept objects
	// (uninstalled.go), nil when none was loaded.
	uninstalled *Uninstalled
}

// LoadRecord reads the record with one LIST of the ConfigMaps in
// StateNamespace labelled managed-by maasctl: its shards (with the
// checkpoints they carry), the pending shard, the single ConfigMap older
// versions wrote (which has that label too), and the checkpoints
// ConfigMap, whose data it keeps for loadRunState. No ConfigMap is an
// empty record.
func LoadRecord(ctx context.Context, c *kube.Clients) (*Record, error) {
	list, err := c.Kube.CoreV1().ConfigMaps(StateNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: assets.ManagedByLabel + "=" + assets.ManagedByValue,
	})
	if err != nil {
		return nil, fmt.Errorf("read record (ConfigMaps %s in %s): %w", RecordSelector, StateNamespace, err)
	}
	r, err := decodeRecord(list.Items)
	if err != nil {
		return nil, err
	}
	r.c = c
	return r, nil
}

// decodeRecord builds a record from the ConfigMaps LoadRecord listed:
// shards (label RecordLabel) and the legacy single ConfigMap. An entry in
// a shard wins over the legacy one: shards are written before the legacy
// ConfigMap is deleted, so they are newer. Every step with a legacy entry
// is marked dirty, so that the next Save writes it as a shard.
func decodeRecord(cms []corev1.ConfigMap) (*Record, error) {
	r := &Record{entries: map[string]*RecordEntry{}, dirty: map[string]bool{}, shards: map[string]string{}, pendingSteps: map[string]bool{}, checkpoints: map[string]Checkpoint{}, now: time.Now}
	var legacy, pending []RecordEntry
	for _, cm := range cms {
		isShard := cm.Labels[RecordLabel] == RecordLabelValue
		if isShard && isPendingName(cm.Name) {
			list, err := decodeRecordList(cm.Data[recordKey])
			if err != nil {
				return nil, fmt.Errorf("read record %s/%s: key %s: %w", StateNamespace, cm.Name, recordKey, err)
			}
			r.pending = append(r.pending, cm.Name)
			pending = append(pending, list...)
			continue
		}
		if !isShard && cm.Name == CheckpointsConfigMap {
			r.cpData = cm.Data
			if r.cpData == nil {
				r.cpData = map[string]string{}
			}
			continue
		}
		if !isShard && cm.Name == UninstalledConfigMap {
			r.uninstalled = decodeUninstalled(&cm)
			continue
		}
		if !isShard && cm.Name == InstalledInventoryConfigMap {
			if inst, err := decodeInstalled(&cm); err == nil {
				r.installed.stored, r.installed.storedSrc = inst.Source.Digest, inst.Source
			}
			continue
		}
		if !isShard && cm.Name != RecordConfigMap {
			continue
		}
		list, err := decodeRecordList(cm.Data[recordKey])
		if err != nil {
			return nil, fmt.Errorf("read record %s/%s: key %s: %w", StateNamespace, cm.Name, recordKey, err)
		}
		if !isShard {
			r.legacy = true
			legacy = list
			continue
		}
		step := cm.Annotations[RecordStepAnnotation]
		if step == "" && len(list) > 0 {
			step = list[0].Step
		}
		r.shards[cm.Name] = step
		if v, ok := cm.Data[recordCheckpointKey]; ok {
			var p Checkpoint
			if err := json.Unmarshal([]byte(v), &p); err == nil && p.Step == step {
				r.checkpoints[step] = p
			}
		}
		for i := range list {
			e := list[i]
			r.entries[e.key()] = &e
		}
	}
	// The pending shard holds the entries of steps that had no shard of
	// their own when it was written; a step's own shard is newer once its
	// chunk 0, written last (saveStep), is stored. A step with later
	// chunks but no chunk 0 (a run killed while writing its first shard)
	// takes what they hold and the rest from the pending shard, and is
	// written whole by the next Save.
	sharded := r.shardedLocked()
	for _, step := range r.shards {
		if !sharded[step] {
			r.dirty[step] = true
		}
	}
	for i := range pending {
		e := pending[i]
		if sharded[e.Step] {
			continue
		}
		r.pendingSteps[e.Step] = true
		if _, ok := r.entries[e.key()]; !ok {
			r.entries[e.key()] = &e
		}
	}
	sort.Strings(r.pending)
	for i := range legacy {
		e := legacy[i]
		if _, ok := r.entries[e.key()]; !ok {
			r.entries[e.key()] = &e
		}
		r.dirty[e.Step] = true
	}
	return r, nil
}

// Entries returns a copy of every entry, sorted by step, then apply order,
// then object.
func (r *Record) Entries() []RecordEntry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entriesLocked()
}

// entriesLocked is Entries; the caller holds r.mu.
func (r *Record) entriesLocked() []RecordEntry {
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

// stateOf is what a read of an object found: whether it exists, its UID
// and whether a controller owns it. A kind that is not served means the
// object does not exist.
func stateOf(live *unstructured.Unstructured, err error) (exists bool, uid string, owned bool, _ error) {
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
// yet: adopted when it exists now, absent when not. It is saved before a
// run's first step that writes (the Runner lets only the read-only
// preflight run meanwhile), so an object an operator creates later during
// the install (the default DSCInitialization) counts as part of the
// installation.
func (r *Record) Snapshot(ctx context.Context, e *Env, reg *Registry) error {
	var looks []*recordLook
	seen := map[string]bool{}
	for _, s := range reg.Steps {
		for i, o := range s.objects(e) {
			k := recordKeyOf(o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
			if _, ok := r.Lookup(o); ok || seen[k] {
				continue // the first step that lists an object owns its entry
			}
			seen[k] = true
			looks = append(looks, &recordLook{step: s.ID, order: i, obj: o})
		}
	}
	if err := r.note(ctx, e, looks); err != nil {
		return err
	}
	return r.savePending(ctx)
}

// recordLook is one object Snapshot or observe reads: the step and
// position that list it, the entry it had (nil: none yet), and what the
// read found.
type recordLook struct {
	step   string
	order  int
	obj    *unstructured.Unstructured
	prev   *RecordEntry
	exists bool
	uid    string
	owned  bool
	err    error
}

// record is note, then Save of the shards that changed.
func (r *Record) record(ctx context.Context, e *Env, looks []*recordLook) error {
	if err := r.note(ctx, e, looks); err != nil {
		return err
	}
	return r.Save(ctx)
}

// note reads looks (those it must, see below), once per kind and
// namespace where there are many (eachLive; a first run reads every object
// once) and sets the entries whose origin changed, in looks' order.
func (r *Record) note(ctx context.Context, e *Env, looks []*recordLook) error {
	if len(looks) == 0 {
		return nil
	}
	// After a step ran, an object it applied or read is known from the
	// API server's answer to that apply or read (kube.Clients.LastSeen):
	// whether it exists, its UID and owner. Only the others are read:
	// objects an operator creates (the default DSCInitialization), those
	// written otherwise, and every object of a Snapshot (nothing applied
	// yet).
	var objs []*unstructured.Unstructured
	var read []*recordLook
	for _, l := range looks {
		if l.prev != nil {
			if st, ok := e.Clients.LastSeen(l.obj); ok {
				l.exists, l.uid, l.owned = true, st.UID, st.Owned
				continue
			}
		}
		objs = append(objs, l.obj)
		read = append(read, l)
	}
	eachLive(ctx, e, objs, func(i int, live *unstructured.Unstructured, err error) {
		l := read[i]
		l.exists, l.uid, l.owned, l.err = stateOf(live, err)
	})
	for _, l := range looks {
		if l.err != nil {
			// Unreadable (forbidden, say): leave it as it was. The
			// step's own checks report the problem; an object without
			// an entry is never deleted by uninstall.
			r.skipped(e, l.obj, l.err)
			continue
		}
		origin, uid := classify(l.prev, l.exists, l.uid, l.owned)
		if l.prev != nil && origin == l.prev.Origin && uid == l.prev.UID {
			continue
		}
		r.set(l.obj, l.step, l.order, origin, uid)
	}
	return nil
}

// Note looks at the objects of step s after it ran (whether it succeeded
// or not; those it applied or read from that answer, kube.Clients.LastSeen,
// the others by a read)
// and records, in memory, those it brought into existence; the next Save
// (the step's checkpoint, which its shard carries) writes them. An
// object's state is taken as the apply left it: an owner a controller set
// during the step's wait is seen by the next run that reads it (a
// re-apply, uninstall's plan).
func (r *Record) Note(ctx context.Context, e *Env, s *Step) error {
	return r.note(ctx, e, r.observeLooks(e, s, false))
}

// HasAbsent reports whether an object of step id is recorded absent
// (OriginAbsent). It reads nothing from the cluster.
func (r *Record) HasAbsent(e *Env, s *Step) bool {
	for _, o := range s.objects(e) {
		if prev, ok := r.Lookup(o); ok && prev.Origin == OriginAbsent {
			return true
		}
	}
	return false
}

// ObserveAbsent is Note, then Save, limited to the objects of step id
// recorded absent: for a step skipped because its checkpoint and Check say
// it is done, whose objects an operator may have created since, or whose
// Apply was cut short (killed) before the runner noted it. No absent
// entry: no request.
func (r *Record) ObserveAbsent(ctx context.Context, e *Env, s *Step) error {
	return r.observe(ctx, e, s, true)
}

// observeWorkers bounds the concurrent reads of one note (eachLive) and
// the concurrent shard writes of one Save.
const observeWorkers = 8

func (r *Record) observe(ctx context.Context, e *Env, s *Step, onlyAbsent bool) error {
	return r.record(ctx, e, r.observeLooks(e, s, onlyAbsent))
}

// observeLooks are the objects of s that observe reads: those with an
// entry (only the absent ones when onlyAbsent).
func (r *Record) observeLooks(e *Env, s *Step, onlyAbsent bool) []*recordLook {
	var looks []*recordLook
	for i, o := range s.objects(e) {
		prev, ok := r.Lookup(o)
		if !ok {
			// Snapshot could not read it before the step ran, so whether
			// the step created it is unknown: it stays unrecorded.
			continue
		}
		if onlyAbsent && prev.Origin != OriginAbsent {
			continue
		}
		looks = append(looks, &recordLook{step: s.ID, order: i, obj: o, prev: &prev})
	}
	return looks
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
	r.dirty[step] = true
}

// Dropped returns the entries of step s that an earlier run recorded as
// created by this installation (OriginCreated, with a UID) and that s's
// objects no longer include: the inventory no longer lists them (a model,
// a MaaSAuthPolicy, a MaaSSubscription taken out of it). They come in
// reverse apply order (Order, then name, descending), the order they are
// removed in. An object the step still lists under another API group
// (same kind, namespace and name) is not dropped. A Namespace is never dropped: it holds what others put
// there (the model server), and only uninstall's namespace step removes
// the Namespaces maasctl created. It reads nothing from the cluster.
func (r *Record) Dropped(e *Env, s *Step) []RecordEntry {
	want, named := map[string]bool{}, map[string]bool{}
	for _, o := range s.objects(e) {
		want[recordKeyOf(o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())] = true
		named[o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName()] = true
	}
	var out []RecordEntry
	for _, en := range r.Entries() {
		if named[en.Kind+"/"+en.Namespace+"/"+en.Name] {
			// Listed under another API group (the ExternalModel of an
			// RHOAI release that moved it): an upgrade's business, not
			// an inventory that dropped it.
			continue
		}
		if en.Step == s.ID && en.Origin == OriginCreated && en.UID != "" && !want[en.key()] && !isNamespace(en.GVK()) {
			out = append(out, en)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Order != out[j].Order {
			return out[i].Order > out[j].Order
		}
		return out[i].key() > out[j].key()
	})
	return out
}

// Forget drops the entries of objects that are gone.
func (r *Record) Forget(entries ...RecordEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range entries {
		if prev, ok := r.entries[e.key()]; ok {
			delete(r.entries, e.key())
			r.dirty[prev.Step] = true
		}
	}
}

// Len is the number of entries.
func (r *Record) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.entries)
}

// recordCheckpointKey is the data key under which a step's shard (its
// first chunk) carries the step's checkpoint (engine.Carrier).
const recordCheckpointKey = "checkpoint.json"

// CarryCheckpoint stores p in the shard of p's step, in one write with the
// step's entries (engine.Carrier): the bookkeeping after a step is then one
// write, and its checkpoint never says done without the record of what
// the Apply created. A step without entries (preflight, verify) is not
// carried: false, and the checkpoints ConfigMap holds it.
func (r *Record) CarryCheckpoint(ctx context.Context, p Checkpoint) (bool, error) {
	r.mu.Lock()
	has := false
	for _, e := range r.entries {
		if e.Step == p.Step {
			has = true
			break
		}
	}
	if !has {
		// An older checkpoint its shard carried goes with the shard
		// (no entries: the runner's Save deletes it); the ConfigMap's
		// is the step's checkpoint now.
		if _, ok := r.checkpoints[p.Step]; ok {
			delete(r.checkpoints, p.Step)
			r.dirty[p.Step] = true
		}
		r.mu.Unlock()
		return false, nil
	}
	r.checkpoints[p.Step] = p
	r.dirty[p.Step] = true
	r.mu.Unlock()
	return true, r.Save(ctx)
}

// Checkpoints returns the checkpoints the record's shards carry
// (CarryCheckpoint), for Checkpoints.Merge.
func (r *Record) Checkpoints() []Checkpoint {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Checkpoint, 0, len(r.checkpoints))
	for _, p := range r.checkpoints {
		out = append(out, p)
	}
	return out
}

// DropCheckpoint removes the checkpoint step's shard carries; the next
// Save writes the shard without it.
func (r *Record) DropCheckpoint(step string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.checkpoints[step]; ok {
		delete(r.checkpoints, step)
		r.dirty[step] = true
	}
}
