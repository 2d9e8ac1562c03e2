package steps

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

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
// whole record. A ConfigMap named RecordConfigMap itself is the single
// record older maasctl versions wrote; it is still read, and deleted once
// its entries were written as shards.
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
	// saveMu serialises Save so that a later write always carries every
	// change made before it started.
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
	now    func() time.Time
}

// LoadRecord reads the record with one LIST of the ConfigMaps in
// StateNamespace labelled managed-by maasctl: its shards, and the single
// ConfigMap older versions wrote (which has that label too). No ConfigMap
// is an empty record.
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
	r := &Record{entries: map[string]*RecordEntry{}, dirty: map[string]bool{}, shards: map[string]string{}, now: time.Now}
	var legacy []RecordEntry
	for _, cm := range cms {
		isShard := cm.Labels[RecordLabel] == RecordLabelValue
		if !isShard && cm.Name != RecordConfigMap {
			continue
		}
		var list []RecordEntry
		if err := yaml.Unmarshal([]byte(cm.Data[recordKey]), &list); err != nil {
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
		for i := range list {
			e := list[i]
			r.entries[e.key()] = &e
		}
	}
	for i := range legacy {
		e := legacy[i]
		if _, ok := r.entries[e.key()]; !ok {
			r.entries[e.key()] = &e
		}
		r.dirty[e.Step] = true
	}
	return r, nil
}

// RecordShardName is the name of chunk n (from 0) of the shard of step id:
// "maasctl-inventory.<id with / replaced by .>", then ".<n>" for n > 0. An
// ID that does not map to a valid, unambiguous ConfigMap name that way
// (upper case, other characters, a numeric last segment, too long) gets a
// hash of the ID appended instead of the unmappable rest.
func RecordShardName(id string, n int) string {
	base := RecordConfigMap + "." + shardStem(id)
	if n > 0 {
		base += "." + strconv.Itoa(n)
	}
	return base
}

var shardSegment = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// shardStem maps a step ID to the DNS-1123 labels of its shard name.
func shardStem(id string) string {
	segs := strings.Split(id, "/")
	clean := len(id) <= 180
	for _, s := range segs {
		if !shardSegment.MatchString(s) {
			clean = false
		}
	}
	if _, err := strconv.Atoi(segs[len(segs)-1]); err == nil {
		clean = false // would read as a chunk number
	}
	if clean {
		return strings.Join(segs, ".")
	}
	sum := sha256.Sum256([]byte(id))
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		case r == '/' || r == '.':
			b.WriteRune('.')
		default:
			b.WriteRune('-')
		}
		if b.Len() >= 160 {
			break
		}
	}
	var out []string
	for _, s := range strings.Split(b.String(), ".") {
		if s = strings.Trim(s, "-"); s != "" {
			out = append(out, s)
		}
	}
	out = append(out, "h"+hex.EncodeToString(sum[:])[:10])
	return strings.Join(out, ".")
}

// recordChunks encodes entries (of one step, in order) as YAML lists of
// at most limit bytes each (an entry larger than limit gets a chunk of its
// own). The chunks decode to the entries in order. No entries: no chunk.
func recordChunks(entries []RecordEntry, limit int) ([]string, error) {
	var out []string
	var cur strings.Builder
	for _, e := range entries {
		b, err := yaml.Marshal([]RecordEntry{e})
		if err != nil {
			return nil, fmt.Errorf("encode record entry %s: %w", e, err)
		}
		if cur.Len() > 0 && cur.Len()+len(b) > limit {
			out = append(out, cur.String())
			cur.Reset()
		}
		cur.Write(b)
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out, nil
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
	return r.record(ctx, e, looks)
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

// record reads looks, observeWorkers at a time (a first run reads every
// object once; serially that was a fifth of a second on the local control
// plane), sets the entries whose origin changed in looks' order, and saves
// the shards that changed.
func (r *Record) record(ctx context.Context, e *Env, looks []*recordLook) error {
	if len(looks) == 0 {
		return nil
	}
	inParallel(len(looks), observeWorkers, func(i int) {
		l := looks[i]
		l.exists, l.uid, l.owned, l.err = liveState(ctx, e.Clients, l.obj)
	})
	changed := false
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
		changed = true
	}
	if !changed {
		return nil
	}
	return r.Save(ctx)
}

// Observe re-reads the objects of step s after it ran (whether it
// succeeded or not) and records those it brought into existence. It writes
// only the shards whose entries changed.
func (r *Record) Observe(ctx context.Context, e *Env, s *Step) error {
	return r.observe(ctx, e, s, false)
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

// ObserveAbsent is Observe limited to the objects of step id recorded
// absent: for a step skipped because its checkpoint and Check say it is
// done, whose objects an operator may have created since, or whose Apply
// was cut short (killed) before its Observe ran. No absent entry: no
// request.
func (r *Record) ObserveAbsent(ctx context.Context, e *Env, s *Step) error {
	return r.observe(ctx, e, s, true)
}

// observeWorkers bounds the concurrent GETs of one Observe.
const observeWorkers = 8

func (r *Record) observe(ctx context.Context, e *Env, s *Step, onlyAbsent bool) error {
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
	return r.record(ctx, e, looks)
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

// Save writes the shards of the steps whose entries changed since the
// last Save, with server-side apply (field manager maasctl), and deletes
// the chunks a step no longer needs (all of them when it has no entries
// left). When that all succeeded and the record came from an older
// maasctl's single ConfigMap, it deletes that ConfigMap: every entry is in
// a shard by then. A step whose write failed stays dirty, so the next Save
// writes it again. Nothing changed: no request.
func (r *Record) Save(ctx context.Context) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	dirty := make([]string, 0, len(r.dirty))
	for step := range r.dirty {
		dirty = append(dirty, step)
	}
	r.dirty = map[string]bool{}
	legacy := r.legacy
	r.mu.Unlock()
	sort.Strings(dirty)
	if len(dirty) == 0 && !legacy {
		return nil
	}
	byStep := map[string][]RecordEntry{}
	for _, e := range r.Entries() {
		byStep[e.Step] = append(byStep[e.Step], e)
	}
	stepErrs := make([]error, len(dirty))
	inParallel(len(dirty), observeWorkers, func(i int) {
		stepErrs[i] = r.saveStep(ctx, dirty[i], byStep[dirty[i]])
	})
	var (
		errs   []error
		failed []string
	)
	for i, err := range stepErrs {
		if err != nil {
			errs = append(errs, err)
			failed = append(failed, dirty[i])
		}
	}
	if len(errs) > 0 {
		r.mu.Lock()
		for _, step := range failed {
			r.dirty[step] = true
		}
		r.mu.Unlock()
		return errors.Join(errs...)
	}
	if legacy {
		err := r.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(ctx, RecordConfigMap, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete the single-ConfigMap record %s/%s of an older maasctl (its entries are in shards now): %w", StateNamespace, RecordConfigMap, err)
		}
		r.mu.Lock()
		r.legacy = false
		r.mu.Unlock()
	}
	return nil
}

// saveStep writes the chunks of step's shard and deletes its stored chunks
// beyond them.
func (r *Record) saveStep(ctx context.Context, step string, entries []RecordEntry) error {
	chunks, err := recordChunks(entries, RecordShardBytes)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for n, data := range chunks {
		name := RecordShardName(step, n)
		want[name] = true
		cm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{
				"name": name, "namespace": StateNamespace,
				"labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue, RecordLabel: RecordLabelValue},
				"annotations": map[string]any{
					RecordStepAnnotation:     step,
					"maasctl.io/description": "objects maasctl's install wrote (step " + step + "): created ones are deleted by 'maasctl uninstall', adopted ones are left in place",
				},
			},
			"data": map[string]any{recordKey: data},
		}}
		if _, err := r.c.Apply(ctx, cm); err != nil {
			return fmt.Errorf("write record shard %s/%s: %w", StateNamespace, name, err)
		}
		r.mu.Lock()
		r.shards[name] = step
		r.mu.Unlock()
	}
	r.mu.Lock()
	var stale []string
	for name, s := range r.shards {
		if s == step && !want[name] {
			stale = append(stale, name)
		}
	}
	r.mu.Unlock()
	sort.Strings(stale)
	for _, name := range stale {
		err := r.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete record shard %s/%s: %w", StateNamespace, name, err)
		}
		r.mu.Lock()
		delete(r.shards, name)
		r.mu.Unlock()
	}
	return nil
}

// Shards is the number of record ConfigMaps stored (as far as this Record
// knows: the ones it loaded and wrote), the legacy one included.
func (r *Record) Shards() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.shards)
	if r.legacy {
		n++
	}
	return n
}

// deleteRecord deletes every shard of the record (one DELETE of the
// collection labelled RecordLabel) and the single ConfigMap of older
// maasctl versions.
func deleteRecord(ctx context.Context, c *kube.Clients) error {
	// List and delete by name rather than deletecollection: the install
	// already needs list and delete on ConfigMaps in its state namespace,
	// so uninstall asks for no other permission.
	cms := c.Kube.CoreV1().ConfigMaps(StateNamespace)
	l, err := cms.List(ctx, metav1.ListOptions{LabelSelector: RecordSelector})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("list the record (ConfigMaps %s in %s): %w", RecordSelector, StateNamespace, err)
	}
	names := []string{RecordConfigMap} // the single ConfigMap of older maasctl versions
	if l != nil {
		for _, cm := range l.Items {
			names = append(names, cm.Name)
		}
	}
	for _, name := range names {
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete ConfigMap %s/%s: %w", StateNamespace, name, err)
		}
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
