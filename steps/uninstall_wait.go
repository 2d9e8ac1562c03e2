package steps

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/waiters"
)

// deleteAndWait deletes one object (with a UID precondition when known, so
// an object someone re-created is never deleted) and watches until it is
// gone.
func (u *uninstaller) deleteAndWait(ctx context.Context, stepID string, a UninstallAction, progress func(string, ...any)) error {
	ri, _, err := u.c.Resource(a.stub.GroupVersionKind(), a.stub.GetNamespace())
	if kube.IsNotServed(err) {
		progress("%s already gone (kind not served)", a.Object)
		return nil
	}
	if err != nil {
		return err
	}
	opts := metav1.DeleteOptions{}
	if a.uid != "" {
		uid := types.UID(a.uid)
		opts.Preconditions = &metav1.Preconditions{UID: &uid}
	}
	err = ri.Delete(ctx, a.stub.GetName(), opts)
	switch {
	case apierrors.IsNotFound(err):
		progress("%s already gone", a.Object)
		return nil
	case apierrors.IsConflict(err):
		progress("keeping %s: it was re-created by someone else after maasctl created it", a.Object)
		u.kept = append(u.kept, a.Object+" (re-created by someone else)")
		return nil
	case err != nil:
		return fmt.Errorf("delete %s: %w", a.Object, err)
	}
	progress("deleted %s, waiting for it to be gone", a.Object)
	return u.waitGone(ctx, []goneTarget{{stub: a.stub, uid: a.uid}}, progress)
}

// waitOperatorGone waits for the Deployments OLM installed for a CSV
// (label olm.owner=<csv>) to be garbage-collected.
func (u *uninstaller) waitOperatorGone(ctx context.Context, stepID string, csv *unstructured.Unstructured, progress func(string, ...any)) error {
	deps, err := u.c.Kube.AppsV1().Deployments(csv.GetNamespace()).List(ctx, metav1.ListOptions{LabelSelector: "olm.owner=" + csv.GetName()})
	if err != nil {
		return fmt.Errorf("list Deployments of %s: %w", kube.Describe(csv), err)
	}
	var ts []goneTarget
	for _, d := range deps.Items {
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(deploymentGVK)
		stub.SetNamespace(d.Namespace)
		stub.SetName(d.Name)
		ts = append(ts, goneTarget{stub: stub, uid: string(d.UID)})
	}
	if len(ts) == 0 {
		return nil
	}
	progress("waiting for the operator Deployments of %s to be gone", csv.GetName())
	return u.waitGone(ctx, ts, progress)
}

type goneTarget struct {
	stub *unstructured.Unstructured
	uid  string
}

// waitGone watches every target until it is deleted (or replaced by an
// object with another UID). On timeout, with ForceRemoveFinalizers it
// clears the finalizers of the blocked objects once, says so, and waits
// again; otherwise it returns a *waiters.TimeoutError that names each
// blocked object with its finalizers or Namespace conditions.
func (u *uninstaller) waitGone(ctx context.Context, ts []goneTarget, progress func(string, ...any)) error {
	err := u.waitGoneOnce(ctx, ts)
	var te *waiters.TimeoutError
	if err == nil || !errors.As(err, &te) || ctx.Err() != nil {
		return err
	}
	if !u.o.ForceRemoveFinalizers {
		return &Problem{Message: err.Error() + "\nan object whose finalizer is never cleared blocks the uninstall",
			Fix: "make its controller run again, or re-run with --force-remove-finalizers to clear them (the cleanup those finalizers guard is then skipped)", Err: err}
	}
	for _, t := range ts {
		ri, _, rerr := u.c.Resource(t.stub.GroupVersionKind(), t.stub.GetNamespace())
		if rerr != nil {
			continue
		}
		live, gerr := ri.Get(ctx, t.stub.GetName(), metav1.GetOptions{})
		if gerr != nil || len(live.GetFinalizers()) == 0 {
			continue
		}
		if _, perr := ri.Patch(ctx, t.stub.GetName(), types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{FieldManager: kube.FieldManager}); perr != nil {
			return fmt.Errorf("remove finalizers of %s: %w", kube.Describe(t.stub), perr)
		}
		progress("removed finalizers %v from %s (--force-remove-finalizers)", live.GetFinalizers(), kube.Describe(t.stub))
	}
	return u.waitGoneOnce(ctx, ts)
}

func (u *uninstaller) waitGoneOnce(ctx context.Context, ts []goneTarget) error {
	ctx, cancel := context.WithTimeout(ctx, u.o.WaitTimeout)
	defer cancel()
	type res struct {
		blocked *waiters.Blocked
		err     error
	}
	ch := make(chan res, len(ts))
	for _, t := range ts {
		go func() {
			b, err := waitOneGone(ctx, u.c, t)
			ch <- res{b, err}
		}()
	}
	var blocked []waiters.Blocked
	var first error
	for range ts {
		r := <-ch
		if r.blocked != nil {
			blocked = append(blocked, *r.blocked)
		}
		if r.err != nil && first == nil {
			first = r.err
		}
	}
	if first != nil {
		return first
	}
	if len(blocked) > 0 {
		sort.Slice(blocked, func(i, j int) bool { return blocked[i].Object < blocked[j].Object })
		return waiters.Ended(ctx, blocked)
	}
	return nil
}

// waitOneGone returns nil, nil once t is gone; a Blocked when ctx ended
// first.
func waitOneGone(ctx context.Context, c *kube.Clients, t goneTarget) (*waiters.Blocked, error) {
	ri, _, err := c.Resource(t.stub.GroupVersionKind(), t.stub.GetNamespace())
	if kube.IsNotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lw := waiters.ListThenWatch(waiters.NameListWatch(ri, t.stub.GetName()))
	var mu sync.Mutex
	var last *unstructured.Unstructured
	gone := func(obj *unstructured.Unstructured) bool {
		return obj == nil || (t.uid != "" && string(obj.GetUID()) != t.uid)
	}
	pre := func(store cache.Store) (bool, error) {
		items := store.List()
		if len(items) == 0 {
			return true, nil
		}
		obj, _ := items[0].(*unstructured.Unstructured)
		mu.Lock()
		last = obj
		mu.Unlock()
		return gone(obj), nil
	}
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, pre, func(ev watch.Event) (bool, error) {
		obj, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			return true, nil
		}
		mu.Lock()
		last = obj
		mu.Unlock()
		return gone(obj), nil
	})
	if err == nil {
		return nil, nil
	}
	if ctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed) || errors.Is(err, context.DeadlineExceeded) {
		mu.Lock()
		defer mu.Unlock()
		return &waiters.Blocked{Object: kube.Describe(t.stub), Status: blockedStatus(last)}, nil
	}
	return nil, fmt.Errorf("wait for %s to be gone: %w", kube.Describe(t.stub), err)
}

// blockedStatus says why an object is not gone: not deleted yet, or
// Terminating with finalizers, and for a Namespace its deletion conditions
// (NamespaceFinalizersRemaining, NamespaceContentRemaining).
func blockedStatus(obj *unstructured.Unstructured) string {
	if obj == nil {
		return "still there"
	}
	if obj.GetDeletionTimestamp() == nil {
		return "not deleted yet"
	}
	s := "Terminating since " + obj.GetDeletionTimestamp().UTC().Format(time.RFC3339)
	if f := obj.GetFinalizers(); len(f) > 0 {
		s += ", finalizers " + strings.Join(f, ", ") + " never cleared (is their controller running?)"
		for _, x := range f {
			if release.IsMaaSFinalizer(x) {
				s += "; " + x + " is removed only by the MaaS controller (maas-controller), which the RHOAI operator runs while the DataScienceCluster enables MaaS: if the DataScienceCluster was deleted first, re-create it (maasctl install --only rhoai/dsc) and run maasctl uninstall again"
				break
			}
		}
	}
	if obj.GetKind() == "Namespace" {
		for _, typ := range []string{"NamespaceFinalizersRemaining", "NamespaceContentRemaining", "NamespaceDeletionContentFailure"} {
			if c, ok := waiters.GetCondition(obj, typ); ok && c.Status == "True" {
				s += "; " + c.Reason + ": " + c.Message
			}
		}
	}
	return s
}

func (u *uninstaller) removeNamespaces(ctx context.Context, st UninstallStep, progress func(string, ...any)) error {
	var ts []goneTarget
	var deleted []RecordEntry
	for _, a := range st.Actions {
		if a.Verb == ActionKeep {
			u.keep(a)
			progress("keeping %s: %s", a.Object, a.Reason)
			continue
		}
		opts := metav1.DeleteOptions{}
		if a.uid != "" {
			uid := types.UID(a.uid)
			opts.Preconditions = &metav1.Preconditions{UID: &uid}
		}
		err := u.c.Kube.CoreV1().Namespaces().Delete(ctx, a.stub.GetName(), opts)
		switch {
		case apierrors.IsNotFound(err):
		case apierrors.IsConflict(err):
			progress("keeping %s: it was re-created by someone else", a.Object)
			continue
		case err != nil:
			return fmt.Errorf("delete %s: %w", a.Object, err)
		default:
			progress("deleted %s", a.Object)
		}
		ts = append(ts, goneTarget{stub: a.stub, uid: a.uid})
		deleted = append(deleted, *a.entry)
	}
	if len(ts) > 0 {
		progress("waiting for %d Namespaces to be gone", len(ts))
		if err := u.waitGone(ctx, ts, progress); err != nil {
			return err
		}
	}
	u.rec.Forget(deleted...)
	return u.rec.Save(ctx)
}
