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
// every entry is in a shard by then. A step whose write failed stays
// dirty, so the next Save writes it again. Nothing changed: no request.
func (r *Record) Save(ctx context.Context) error {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	// The entries and the checkpoints are taken at one moment: a shard
	// never carries a checkpoint newer than its entries.
	r.mu.Lock()
	dirty := make([]string, 0, len(r.dirty))
	for step := range r.dirty {
		dirty = append(dirty, step)
	}
	r.dirty = map[string]bool{}
	legacy := r.legacy
	byStep := map[string][]RecordEntry{}
	cps := map[string]Checkpoint{}
	if len(dirty) > 0 {
		for _, e := range r.entriesLocked() {
			byStep[e.Step] = append(byStep[e.Step], e)
		}
		for _, step := range dirty {
			if cp, ok := r.checkpoints[step]; ok {
				cps[step] = cp
			}
		}
	}
	r.mu.Unlock()
	sort.Strings(dirty)
	if len(dirty) == 0 && !legacy {
		return nil
	}
	stepErrs := make([]error, len(dirty))
	inParallel(len(dirty), observeWorkers, func(i int) {
		var cp *Checkpoint
		if p, ok := cps[dirty[i]]; ok {
			cp = &p
		}
		stepErrs[i] = r.saveStep(ctx, dirty[i], byStep[dirty[i]], cp)
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
			r.mu.Lock()
			for _, step := range dirty {
				if len(byStep[step]) == 0 {
					r.dirty[step] = true // rewrite the pending shard next time
				}
			}
			r.mu.Unlock()
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

// saveStep writes the chunks of step's shard, chunk 0 (which carries cp,
// when not nil) last, and deletes its stored chunks beyond them. Chunk 0
// last: LoadRecord takes a step's entries from its shard only once chunk 0
// exists, so a run killed between the chunks of a step's first shard
// leaves its entries in the pending shard, and a carried checkpoint is
// stored only with every chunk of its entries.
func (r *Record) saveStep(ctx context.Context, step string, entries []RecordEntry, cp *Checkpoint) error {
	chunks, err := recordChunks(entries, RecordShardBytes)
	if err != nil {
		return err
	}
	var cpJSON string
	if cp != nil && len(chunks) > 0 {
		b, err := json.Marshal(cp)
		if err != nil {
			return fmt.Errorf("encode checkpoint of %s: %w", step, err)
		}
		cpJSON = string(b)
	}
	want := map[string]bool{}
	for n := len(chunks) - 1; n >= 0; n-- {
		data := chunks[n]
		name := RecordShardName(step, n)
		want[name] = true
		d := map[string]any{recordKey: data}
		if n == 0 && cpJSON != "" {
			d[recordCheckpointKey] = cpJSON
		}
		err := r.applyShard(ctx, name, map[string]any{
			RecordStepAnnotation:     step,
			"maasctl.io/description": "objects maasctl's install wrote (step " + step + "): created ones are deleted by 'maasctl uninstall', adopted ones are left in place",
		}, d)
		if err != nil {
			return err
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

// applyShard writes the record ConfigMap name (labels managed-by maasctl
// and RecordLabel) with server-side apply; a bookkeeping write, it leaves
// the run's read view open (kube.KeepView).
func (r *Record) applyShard(ctx context.Context, name string, annotations, data map[string]any) error {
	cm := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{
			"name": name, "namespace": StateNamespace,
			"labels":      map[string]any{assets.ManagedByLabel: assets.ManagedByValue, RecordLabel: RecordLabelValue},
			"annotations": annotations,
		},
		"data": data,
	}}
	if _, err := r.c.Apply(kube.KeepView(ctx), cm); err != nil {
		return fmt.Errorf("write record shard %s/%s: %w", StateNamespace, name, err)
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
// pending entry only for a step without a shard (chunk 0 stored), and
// CompactPending, at the end of a run, writes the pending shard again
// without the entries a step's shard took over, or deletes it when none
// is left.
const RecordPendingConfigMap = "maasctl-inventory-pending"

// isPendingName reports whether a record ConfigMap is a chunk of the
// pending shard. Step shards start "maasctl-inventory." (a dot), so no
// step ID maps to these names.
func isPendingName(name string) bool {
	return name == RecordPendingConfigMap || strings.HasPrefix(name, RecordPendingConfigMap+".")
}

// shardedLocked is the set of steps whose shard's chunk 0 is stored: the
// steps LoadRecord reads from their own shard, not from the pending one.
// The caller holds r.mu.
func (r *Record) shardedLocked() map[string]bool {
	out := map[string]bool{}
	for name, step := range r.shards {
		if name == RecordShardName(step, 0) {
			out[step] = true
		}
	}
	return out
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
	// The dirty marks of the steps without a shard, taken with their
	// entries: the write below makes those entries durable. A step with a
	// checkpoint to carry keeps its mark: its own shard must be written.
	r.mu.Lock()
	sharded := r.shardedLocked()
	captured := map[string]bool{}
	for step := range r.dirty {
		if _, carry := r.checkpoints[step]; !sharded[step] && !carry {
			captured[step] = true
		}
	}
	all := r.entriesLocked()
	r.mu.Unlock()
	if !force && len(captured) == 0 {
		return nil // nothing new for the pending shard: no request
	}
	var entries []RecordEntry
	steps := map[string]bool{}
	for _, e := range all {
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
		err := r.applyShard(ctx, name, map[string]any{
			"maasctl.io/description": "objects maasctl's install will write, as they were before its first write, for steps that have no record shard of their own yet (a step's own shard replaces its entries here)",
		}, map[string]any{recordKey: data})
		if err != nil {
			return err
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
	for step := range captured {
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
	sharded := r.shardedLocked()
	stale := false
	for step := range r.pendingSteps {
		stale = stale || (sharded[step] && !r.dirty[step])
	}
	r.mu.Unlock()
	if !stale {
		return nil
	}
	return r.writePending(ctx, true)
}
