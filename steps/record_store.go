package steps

import (
	"context"
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
