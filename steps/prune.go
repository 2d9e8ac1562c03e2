package steps

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// prune removes what an earlier run of step s created and the inventory no
// longer lists (Record.Dropped), for a step with Removal.Prune, after its
// Apply succeeded: a model, MaaSAuthPolicy or MaaSSubscription taken out
// of the inventory is taken out of the cluster, as uninstall would remove
// it (kubectl apply --prune and Argo CD's prune do the same for the
// objects their own inventory tracks). Each object is deleted with a UID
// precondition, so one that someone re-created under the same name after
// maasctl created it is kept (and dropped from the record, as uninstall
// keeps it); then every deleted object is waited on until it is gone (the
// MaaS controller's finalizers clean up what it generated). Each removal
// is reported as progress. Errors name the object and say that nothing
// after it was removed.
func (r *Runner) prune(ctx context.Context, s *Step) error {
	if r.Record == nil || !s.Removal.Prune {
		return nil
	}
	dropped := r.Record.Dropped(r.Env, s)
	var deleted []RecordEntry
	for _, en := range dropped {
		ri, _, err := r.Env.Clients.Resource(en.GVK(), en.Namespace)
		if kube.IsNotServed(err) {
			r.Record.Forget(en)
			continue
		}
		if err != nil {
			return fmt.Errorf("remove %s (no longer in the inventory): %w", en, err)
		}
		uid := types.UID(en.UID)
		err = ri.Delete(ctx, en.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		switch {
		case apierrors.IsNotFound(err):
			r.Record.Forget(en)
		case apierrors.IsConflict(err):
			r.Env.progress(s.ID, "keeping %s although the inventory no longer lists it: it was re-created by someone else after maasctl created it", en)
			r.Record.Forget(en)
		case err != nil:
			return fmt.Errorf("remove %s (no longer in the inventory; %d more to remove after it): %w", en, len(dropped)-len(deleted)-1, err)
		default:
			r.Env.progress(s.ID, "removing %s: the inventory no longer lists it", en)
			deleted = append(deleted, en)
		}
	}
	for _, en := range deleted {
		if err := waiters.Gone(ctx, r.Env.Clients, en.GVK(), en.Namespace, en.Name); err != nil {
			return fmt.Errorf("remove %s (no longer in the inventory): %w", en, err)
		}
		r.Record.Forget(en)
	}
	return nil
}

// removesFunc is Env.Removes for a run over reg with record rec: the
// objects Record.Dropped gives for reg's pruning steps, as the run began.
func removesFunc(e *Env, reg *Registry, rec *Record) func(schema.GroupVersionKind, string, string) bool {
	set := map[string]bool{}
	for _, s := range reg.Steps {
		if !s.Removal.Prune {
			continue
		}
		for _, en := range rec.Dropped(e, s) {
			set[en.key()] = true
		}
	}
	if len(set) == 0 {
		return nil
	}
	return func(gvk schema.GroupVersionKind, ns, name string) bool {
		return set[recordKeyOf(gvk.GroupVersion().String(), gvk.Kind, ns, name)]
	}
}

// droppedMessage is droppedMessage of step s's dropped objects, "" for a
// step without Removal.Prune or without a record.
func (r *Runner) droppedMessage(s *Step) string {
	if r.Record == nil || !s.Removal.Prune {
		return ""
	}
	return droppedMessage(r.Record.Dropped(r.Env, s))
}

// droppedMessage says which objects of a step the inventory no longer
// lists ("" for none): a Check's message, and status's and plan's detail.
func droppedMessage(dropped []RecordEntry) string {
	if len(dropped) == 0 {
		return ""
	}
	names := make([]string, 0, 3)
	for i, en := range dropped {
		if i == 3 {
			names = append(names, fmt.Sprintf("and %d more", len(dropped)-3))
			break
		}
		names = append(names, en.String())
	}
	return fmt.Sprintf("the inventory no longer lists %s that an earlier run created; install removes %s", strings.Join(names, ", "), pronoun(len(dropped)))
}

// pronoun is "it" for one object, "them" for more.
func pronoun(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// isNamespace reports whether gvk is the core Namespace kind.
func isNamespace(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "" && gvk.Kind == "Namespace"
}
