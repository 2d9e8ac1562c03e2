package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
)

// RollbackOptions configures Rollback.
type RollbackOptions struct {
	// Dir is the backup directory of the migration to undo.
	Dir string
	// Timeout bounds the wait for the removed objects to be gone.
	Timeout time.Duration
	// Out receives the progress lines.
	Out io.Writer
}

// RollbackResult lists what a rollback did, as "Kind namespace/name".
type RollbackResult struct {
	Restored, Unchanged, Removed, Skipped []string
	// OtherMigrations names the migrations (backup IDs) that created
	// objects this backup's run only found and re-applied: they must be
	// rolled back from their own backup directories.
	OtherMigrations []string
}

// Rollback undoes a migration from its backup directory (upgrade guide,
// "Rollback"): it re-creates the deleted tier ConfigMaps and gateway
// policies as backed up (spec, data, labels and annotations), puts the tier
// annotations back on the models, and deletes the MaaSSubscriptions,
// MaaSAuthPolicies and MaaSModelRefs the migration created (journaled as
// created and still carrying the migration label; maas-controller removes
// the Kuadrant policies it generated for them). Every change is appended to
// the journal. The operator itself is not reverted: the 3.4 maas-api has no
// tier lookup endpoint.
func Rollback(ctx context.Context, c *kube.Clients, o RollbackOptions) (*RollbackResult, error) {
	b, err := OpenBackup(o.Dir)
	if err != nil {
		return nil, err
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Minute
	}
	res := &RollbackResult{}
	for _, e := range b.Manifest.Entries {
		var err error
		switch e.Role {
		case RoleTierConfig, RoleOldPolicy:
			err = restoreObject(ctx, c, b, e, res, o.Out)
		case RoleModel:
			err = restoreAnnotation(ctx, c, b, e, res, o.Out)
		default:
			continue
		}
		if err != nil {
			return res, err
		}
	}
	journal, err := b.Journal()
	if err != nil {
		return res, err
	}
	created, found := journalObjects(journal)
	if err := otherMigrations(ctx, c, b, found, res, o.Out); err != nil {
		return res, err
	}
	removed, err := removeCreated(ctx, c, b, created, res, o.Out)
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	for _, r := range removed {
		if err := waitGone(wctx, c, r); err != nil {
			return res, fmt.Errorf("wait for %s to be deleted: %w", r, err)
		}
	}
	return res, nil
}

// otherMigrations reports the objects this backup's run re-applied but did
// not create that another migration did (label MigrationLabel, annotation
// BackupAnnotation of another ID): this rollback leaves them, and the
// other migration must be rolled back from its own directory.
func otherMigrations(ctx context.Context, c *kube.Clients, b *Backup, found []ObjectRef, res *RollbackResult, out io.Writer) error {
	others := map[string]bool{}
	for _, r := range found {
		live, ok, err := get(ctx, c, r)
		if err != nil {
			return err
		}
		id := live.GetAnnotations()[BackupAnnotation]
		if !ok || live.GetLabels()[MigrationLabel] != MigrationLabelValue || id == "" || id == b.Manifest.ID {
			continue
		}
		fmt.Fprintf(out, "  left %s: migration %s created it, not this one\n", r, id)
		res.Skipped = append(res.Skipped, r.String())
		if !others[id] {
			others[id] = true
			res.OtherMigrations = append(res.OtherMigrations, id)
		}
	}
	for _, id := range res.OtherMigrations {
		fmt.Fprintf(out, "  roll back migration %s too: maasctl migrate tiers --rollback <its backup directory, named %s>\n", id, id)
	}
	return nil
}

// restorable are the parts of an object a rollback puts back.
var restorable = [][]string{{"spec"}, {"data"}, {"binaryData"}, {"metadata", "labels"}, {"metadata", "annotations"}}

// restoreObject re-creates a deleted object from its backup, or rewrites
// the restorable parts of a live one that differs from it.
func restoreObject(ctx context.Context, c *kube.Clients, b *Backup, e BackupEntry, res *RollbackResult, out io.Writer) error {
	want, err := b.Object(e)
	if err != nil {
		return err
	}
	m, ok, err := mapping(c, e.Ref.GroupKind())
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("restore %s: its kind is no longer served", e.Ref)
	}
	ri := resourceFor(c, m, e.Ref.Namespace)
	live, err := ri.Get(ctx, e.Ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		obj := &unstructured.Unstructured{Object: map[string]any{}}
		obj.SetAPIVersion(want.GetAPIVersion())
		obj.SetKind(want.GetKind())
		obj.SetNamespace(want.GetNamespace())
		obj.SetName(want.GetName())
		copyRestorable(want, obj)
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: kube.FieldManager}); err != nil {
			return fmt.Errorf("restore %s: %w", e.Ref, err)
		}
		return restored(b, e.Ref, "re-created from "+e.File, res, out)
	}
	if err != nil {
		return fmt.Errorf("restore %s: %w", e.Ref, err)
	}
	if sameRestorable(want, live) {
		res.Unchanged = append(res.Unchanged, e.Ref.String())
		fmt.Fprintf(out, "  %s is as backed up\n", e.Ref)
		return b.Record(JournalEntry{Action: ActionUnchanged, Object: e.Ref})
	}
	upd := live.DeepCopy()
	copyRestorable(want, upd)
	if _, err := ri.Update(ctx, upd, metav1.UpdateOptions{FieldManager: kube.FieldManager}); err != nil {
		return fmt.Errorf("restore %s: %w", e.Ref, err)
	}
	return restored(b, e.Ref, "rewritten to the backup in "+e.File, res, out)
}

func restored(b *Backup, r ObjectRef, detail string, res *RollbackResult, out io.Writer) error {
	res.Restored = append(res.Restored, r.String())
	fmt.Fprintf(out, "  restored %s (%s)\n", r, detail)
	return b.Record(JournalEntry{Action: ActionRestored, Object: r, Detail: detail})
}

// copyRestorable sets dst's restorable parts to src's (removing those src
// lacks).
func copyRestorable(src, dst *unstructured.Unstructured) {
	for _, p := range restorable {
		if v, ok, _ := unstructured.NestedFieldCopy(src.Object, p...); ok {
			_ = unstructured.SetNestedField(dst.Object, v, p...)
		} else {
			unstructured.RemoveNestedField(dst.Object, p...)
		}
	}
}

func sameRestorable(a, b *unstructured.Unstructured) bool {
	for _, p := range restorable {
		va, _, _ := unstructured.NestedFieldNoCopy(a.Object, p...)
		vb, _, _ := unstructured.NestedFieldNoCopy(b.Object, p...)
		if !reflect.DeepEqual(va, vb) {
			return false
		}
	}
	return true
}

// restoreAnnotation puts a model's tier annotation back (a merge patch of
// that one annotation; the rest of the model is left as it is now).
func restoreAnnotation(ctx context.Context, c *kube.Clients, b *Backup, e BackupEntry, res *RollbackResult, out io.Writer) error {
	want, err := b.Object(e)
	if err != nil {
		return err
	}
	v, ok := want.GetAnnotations()[TierAnnotation]
	if !ok {
		return nil
	}
	live, found, err := get(ctx, c, e.Ref)
	if err != nil {
		return err
	}
	if !found {
		res.Skipped = append(res.Skipped, e.Ref.String())
		fmt.Fprintf(out, "  skipped %s: it no longer exists (a model is not re-created from a backup)\n", e.Ref)
		return nil
	}
	if cur, ok := live.GetAnnotations()[TierAnnotation]; ok && cur == v {
		res.Unchanged = append(res.Unchanged, e.Ref.String())
		fmt.Fprintf(out, "  %s still has annotation %s=%s\n", e.Ref, TierAnnotation, v)
		return b.Record(JournalEntry{Action: ActionUnchanged, Object: e.Ref})
	}
	m, _, err := mapping(c, e.Ref.GroupKind())
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{TierAnnotation: v}}})
	if _, err := resourceFor(c, m, e.Ref.Namespace).Patch(ctx, e.Ref.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
		return fmt.Errorf("restore annotation on %s: %w", e.Ref, err)
	}
	return restored(b, e.Ref, "annotation "+TierAnnotation+"="+v, res, out)
}

// journalObjects splits the objects the journal applied, latest first,
// into those the migration created and those it found.
func journalObjects(journal []JournalEntry) (created, found []ObjectRef) {
	seen, createdHere := map[string]bool{}, map[string]bool{}
	for _, e := range journal {
		if e.Action == ActionApplied && e.Created {
			createdHere[e.Object.String()] = true
		}
	}
	for i := len(journal) - 1; i >= 0; i-- {
		e := journal[i]
		if e.Action != ActionApplied || seen[e.Object.String()] {
			continue
		}
		seen[e.Object.String()] = true
		if createdHere[e.Object.String()] {
			created = append(created, e.Object)
		} else {
			found = append(found, e.Object)
		}
	}
	return created, found
}

// removeCreated deletes the objects the migration created that still
// carry its label (by UID, journaled) and returns them.
func removeCreated(ctx context.Context, c *kube.Clients, b *Backup, created []ObjectRef, res *RollbackResult, out io.Writer) ([]ObjectRef, error) {
	var removed []ObjectRef
	for _, r := range created {
		live, found, err := get(ctx, c, r)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if live.GetLabels()[MigrationLabel] != MigrationLabelValue {
			res.Skipped = append(res.Skipped, r.String())
			fmt.Fprintf(out, "  skipped %s: it no longer carries label %s=%s\n", r, MigrationLabel, MigrationLabelValue)
			continue
		}
		m, _, err := mapping(c, r.GroupKind())
		if err != nil {
			return nil, err
		}
		uid := live.GetUID()
		err = resourceFor(c, m, r.Namespace).Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("delete %s: %w", r, err)
		}
		if err := b.Record(JournalEntry{Action: ActionRemoved, Object: r}); err != nil {
			return nil, err
		}
		res.Removed = append(res.Removed, r.String())
		removed = append(removed, r)
		fmt.Fprintf(out, "  deleted %s\n", r)
	}
	return removed, nil
}
