package steps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
)

// Save writes the shards of the steps whose entries changed since the
// last Save, with server-side apply (field manager maasctl), and deletes
// the chunks a step no longer needs (all of them when it has no entries
// left; the pending shard is then written again without that step's
// entries, see RecordPendingConfigMap), each shard with the checkpoint it
// carries (CarryCheckpoint). When that all succeeded and the record came
// from an older maasctl's single ConfigMap, it deletes that ConfigMap:
// every entry is in a shard by then. A step whose write failed stays dirty, so the next Save
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
	// A step of the pending shard that has no entries left (Forget) got
	// no shard of its own: the pending shard is written again without its
	// entries, or it would hold them still.
	r.mu.Lock()
	rewrite := false
	for _, step := range dirty {
		if r.pendingSteps[step] && len(byStep[step]) == 0 {
			rewrite = true
		}
	}
	r.mu.Unlock()
	if rewrite {
		if err := r.writePending(ctx, true); err != nil {
			return err
		}
	}
	if legacy {
		err := r.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(kube.KeepView(ctx), RecordConfigMap, metav1.DeleteOptions{})
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
	r.mu.Lock()
	cp, carried := r.checkpoints[step]
	r.mu.Unlock()
	var cpJSON string
	if carried && len(chunks) > 0 {
		b, err := json.Marshal(cp)
		if err != nil {
			return fmt.Errorf("encode checkpoint of %s: %w", step, err)
		}
		cpJSON = string(b)
	}
	want := map[string]bool{}
	for n, data := range chunks {
		name := RecordShardName(step, n)
		want[name] = true
		d := map[string]any{recordKey: data}
		if n == 0 && cpJSON != "" {
			d[recordCheckpointKey] = cpJSON
		}
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
			"data": d,
		}}
		if _, err := r.c.Apply(kube.KeepView(ctx), cm); err != nil {
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
		err := r.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(kube.KeepView(ctx), name, metav1.DeleteOptions{})
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
	n := len(r.shards) + len(r.pending)
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

// RecordPendingConfigMap names the pending shard of the record (in
// StateNamespace, label RecordLabel, further chunks ".1", ".2", ...): the
// entries Snapshot took before a run's first write, of every step that has
// no shard of its own yet. One write (a chunk per RecordShardBytes) makes
// them durable before any step writes, instead of one write per step (issue
// 16: a first install wrote 24 shards here). Each step's own shard,
// written once the step ran, takes over its entries: LoadRecord reads a
// pending entry only for a step without a shard, and CompactPending deletes
// the pending shard once every step it holds has one.
const RecordPendingConfigMap = "maasctl-inventory-pending"

// isPendingName reports whether a record ConfigMap is a chunk of the
// pending shard. Step shards start "maasctl-inventory." (a dot), so no
// step ID maps to these names.
func isPendingName(name string) bool {
	return name == RecordPendingConfigMap || strings.HasPrefix(name, RecordPendingConfigMap+".")
}

func pendingChunkName(n int) string {
	if n == 0 {
		return RecordPendingConfigMap
	}
	return fmt.Sprintf("%s.%d", RecordPendingConfigMap, n)
}

// savePending writes the entries of every step without a shard of its own
// as the pending shard, deletes its chunks beyond them (all of them when
// no such entry is left), and then Saves the steps with a shard whose
// entries changed.
func (r *Record) savePending(ctx context.Context) error {
	r.saveMu.Lock()
	err := r.writePending(ctx, false)
	r.saveMu.Unlock()
	if err != nil {
		return err
	}
	return r.Save(ctx)
}

// writePending is savePending's write of the pending shard, when a step
// without a shard has changed entries (always when force); the caller
// holds saveMu.
func (r *Record) writePending(ctx context.Context, force bool) error {
	r.mu.Lock()
	sharded := map[string]bool{}
	for _, step := range r.shards {
		sharded[step] = true
	}
	r.mu.Unlock()
	if !force {
		r.mu.Lock()
		changed := false
		for step := range r.dirty {
			changed = changed || !sharded[step]
		}
		r.mu.Unlock()
		if !changed {
			return nil // nothing new for the pending shard: no request
		}
	}
	var entries []RecordEntry
	steps := map[string]bool{}
	for _, e := range r.Entries() {
		if !sharded[e.Step] {
			entries = append(entries, e)
			steps[e.Step] = true
		}
	}
	chunks, err := recordChunks(entries, RecordShardBytes)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		chunks = nil
	}
	for n, data := range chunks {
		name := pendingChunkName(n)
		cm := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{
				"name": name, "namespace": StateNamespace,
				"labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue, RecordLabel: RecordLabelValue},
				"annotations": map[string]any{
					"maasctl.io/description": "objects maasctl's install will write, as they were before its first write, for steps that have no record shard of their own yet (a step's own shard replaces its entries here)",
				},
			},
			"data": map[string]any{recordKey: data},
		}}
		if _, err := r.c.Apply(kube.KeepView(ctx), cm); err != nil {
			return fmt.Errorf("write record shard %s/%s: %w", StateNamespace, name, err)
		}
	}
	r.mu.Lock()
	stored := r.pending
	r.mu.Unlock()
	for _, name := range stored {
		keep := false
		for n := range chunks {
			keep = keep || name == pendingChunkName(n)
		}
		if keep {
			continue
		}
		err := r.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(kube.KeepView(ctx), name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete record shard %s/%s: %w", StateNamespace, name, err)
		}
	}
	r.mu.Lock()
	r.pending = r.pending[:0]
	for n := range chunks {
		r.pending = append(r.pending, pendingChunkName(n))
	}
	r.pendingSteps = steps
	for step := range steps {
		delete(r.dirty, step) // durable in the pending shard
	}
	r.mu.Unlock()
	return nil
}

// CompactPending writes the pending shard (RecordPendingConfigMap) again
// without the entries of steps that have a shard of their own by now
// (LoadRecord never reads those), or deletes it when no other entry is
// left: one request at the end of a first install. A step whose entries
// the run did not change (every object adopted, say) keeps them there.
// Nothing stale: no request.
func (r *Record) CompactPending(ctx context.Context) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	if len(r.pending) == 0 {
		r.mu.Unlock()
		return nil
	}
	sharded := map[string]bool{}
	for _, step := range r.shards {
		sharded[step] = true
	}
	stale := false
	for step := range r.pendingSteps {
		stale = stale || sharded[step]
	}
	r.mu.Unlock()
	if !stale {
		return nil
	}
	return r.writePending(ctx, true)
}
