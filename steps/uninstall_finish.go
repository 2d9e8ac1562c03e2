package steps

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// finish purges CRDs (when asked), removes maasctl's label from adopted
// objects, removes maasctl's own state when nothing is kept, and scans for
// orphans.
func (u *uninstaller) finish(ctx context.Context, lock **Lock) ([]string, error) {
	progress := func(format string, args ...any) {
		u.emit(Event{Type: EventProgress, Step: "uninstall/finish", Message: fmt.Sprintf(format, args...)})
	}
	if u.o.PurgeCRDs {
		if err := u.purgeCRDs(ctx, progress); err != nil {
			return nil, err
		}
	}
	// Adopted objects keep what maasctl applied, except its managed-by
	// label: they are not maasctl's to manage any more.
	for _, e := range u.rec.Entries() {
		if e.Origin != OriginAdopted {
			continue
		}
		if u.removal(e.Step).Data != "" && !u.o.DeleteData {
			continue
		}
		u.unlabel(ctx, e.Object(), progress)
		u.rec.Forget(e)
	}
	var keptEntries bool
	for _, e := range u.rec.Entries() {
		if e.Origin == OriginCreated {
			keptEntries = true
		} else {
			u.rec.Forget(e)
		}
	}
	if keptEntries {
		if err := u.rec.Save(ctx); err != nil {
			return nil, err
		}
		progress("kept maasctl's record (ConfigMaps %s.* in %s, label %s): it lists the objects kept", RecordConfigMap, StateNamespace, RecordSelector)
		// status and doctor then say MaaS was uninstalled on purpose
		// instead of reporting each removed step and object.
		if err := markUninstalled(ctx, u.c, Uninstalled{At: time.Now().UTC().Truncate(time.Second), Kept: u.kept}); err != nil {
			return nil, err
		}
	} else {
		if err := u.removeState(ctx, lock, progress); err != nil {
			return nil, err
		}
	}
	return u.orphans(ctx, progress)
}

func (u *uninstaller) unlabel(ctx context.Context, obj *unstructured.Unstructured, progress func(string, ...any)) {
	ri, _, err := u.c.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return
	}
	live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil || live.GetLabels()[assets.ManagedByLabel] != assets.ManagedByValue {
		return
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, assets.ManagedByLabel)
	if _, err := ri.Patch(ctx, obj.GetName(), types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: kube.FieldManager}); err != nil {
		u.o.Log.Warn("remove managed-by label", zap.String("object", kube.Describe(obj)), zap.Error(err))
		return
	}
	progress("left %s in place (adopted); removed its %s label", kube.Describe(obj), assets.ManagedByLabel)
}

// removeState deletes the checkpoints, the record (every shard, by
// label, and the single ConfigMap of older versions) and the installed
// inventory (InstalledInventoryConfigMap), releases the Lease
// and deletes Namespace maasctl, waiting until it is gone so that an
// install can start right after.
func (u *uninstaller) removeState(ctx context.Context, lock **Lock, progress func(string, ...any)) error {
	err := u.c.Kube.CoreV1().ConfigMaps(StateNamespace).Delete(ctx, CheckpointsConfigMap, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete ConfigMap %s/%s: %w", StateNamespace, CheckpointsConfigMap, err)
	}
	if err := deleteRecord(ctx, u.c); err != nil {
		return err
	}
	if err := deleteInstalledInventory(ctx, u.c); err != nil {
		return err
	}
	if *lock != nil {
		if err := (*lock).Release(ctx); err != nil {
			return fmt.Errorf("release Lease %s/%s: %w", StateNamespace, LeaseName, err)
		}
		*lock = nil
	}
	ns, err := u.c.Kube.CoreV1().Namespaces().Get(ctx, StateNamespace, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("get Namespace %s: %w", StateNamespace, err)
	}
	if err := u.c.Kube.CoreV1().Namespaces().Delete(ctx, StateNamespace, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete Namespace %s: %w", StateNamespace, err)
	}
	progress("deleted maasctl's state (Namespace %s)", StateNamespace)
	stub := &unstructured.Unstructured{}
	stub.SetAPIVersion("v1")
	stub.SetKind("Namespace")
	stub.SetName(StateNamespace)
	return u.waitGone(ctx, []goneTarget{{stub: stub, uid: string(ns.UID)}}, progress)
}

func (u *uninstaller) purgeCRDs(ctx context.Context, progress func(string, ...any)) error {
	var names []string
	for n := range u.crds {
		names = append(names, n)
	}
	sort.Strings(names)
	ri := u.c.Dynamic.Resource(crdGVR)
	var ts []goneTarget
	for _, n := range names {
		if kube.IsPlatformOwnedCRDName(n) {
			// Even if a CSV lists it as owned: the platform's (case N01).
			u.kept = append(u.kept, fmt.Sprintf("CustomResourceDefinition %s (owned by the platform: maasctl never deletes it)", n))
			continue
		}
		crd, err := ri.Get(ctx, n, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("get CRD %s: %w", n, err)
		}
		if left, err := u.instancesLeft(ctx, crd); err != nil {
			return err
		} else if left > 0 {
			u.kept = append(u.kept, fmt.Sprintf("CustomResourceDefinition %s (%d objects of it are left)", n, left))
			progress("keeping CRD %s: %d objects of it are left", n, left)
			continue
		}
		if err := ri.Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete CRD %s: %w", n, err)
		}
		progress("deleted CRD %s", n)
		stub := &unstructured.Unstructured{}
		stub.SetGroupVersionKind(waiters.CRDGVK)
		stub.SetName(n)
		ts = append(ts, goneTarget{stub: stub, uid: string(crd.GetUID())})
	}
	if len(ts) == 0 {
		return nil
	}
	err := u.waitGone(ctx, ts, progress)
	u.c.ResetMapper()
	return err
}

func (u *uninstaller) instancesLeft(ctx context.Context, crd *unstructured.Unstructured) (int, error) {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if m["served"] != true {
			continue
		}
		name, _ := m["name"].(string)
		list, err := u.c.Dynamic.Resource(schema.GroupVersionResource{Group: group, Version: name, Resource: plural}).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return 0, fmt.Errorf("list %s.%s: %w", plural, group, err)
		}
		return len(list.Items), nil
	}
	return 0, nil
}

// orphans lists every object labelled app.kubernetes.io/managed-by=maasctl
// that is still there and is not kept on purpose: left over from an earlier
// run whose record was lost, or written by a maasctl step without a record.
// An object with a controller ownerReference is not listed: its controller
// made it and copied the label from its owner (authorino-operator v0.21.0
// sets the labels of the Deployment, Services, ServiceAccount and
// RoleBindings of an Authorino CR to the CR's labels, pkg/reconcilers
// LabelsMutator and DeploymentLabelsMutator, and maasctl labels the CR it
// applies); the controller deletes or relabels it with its owner, and
// deleting it by hand would only make the controller create it again.
func (u *uninstaller) orphans(ctx context.Context, progress func(string, ...any)) ([]string, error) {
	u.c.Discovery.Invalidate()
	lists, err := u.c.Discovery.ServerPreferredResources()
	// Listing every kind would print the server's deprecation warnings
	// (v1 ComponentStatus, v1 Endpoints); they are not the user's concern.
	quiet := rest.CopyConfig(u.c.Config)
	quiet.WarningHandler = rest.NoWarnings{}
	dyn, derr := dynamic.NewForConfig(quiet)
	if derr != nil {
		return nil, fmt.Errorf("orphan scan: %w", derr)
	}
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("orphan scan: discover resources: %w", err)
	}
	kept := map[string]bool{}
	for _, e := range u.rec.Entries() {
		kept[e.String()] = true
	}
	var out []string
	controlled, keptLeft := 0, 0
	sel := assets.ManagedByLabel + "=" + assets.ManagedByValue
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !hasVerb(r.Verbs, "list") || r.Kind == "Event" {
				continue
			}
			list, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				continue // forbidden or gone: the scan is best effort per kind
			}
			for _, it := range list.Items {
				if it.GetNamespace() == StateNamespace || (r.Kind == "Namespace" && it.GetName() == StateNamespace) {
					continue // maasctl's own state, reported apart
				}
				it.SetKind(r.Kind)
				d := kube.Describe(&it)
				if it.GetDeletionTimestamp() != nil {
					continue
				}
				if kept[d] {
					keptLeft++
					continue
				}
				if metav1.GetControllerOf(&it) != nil {
					controlled++
					continue
				}
				out = append(out, d)
			}
		}
	}
	sort.Strings(out)
	if controlled > 0 {
		progress("orphan scan: %d object(s) labelled %s belong to a controller (a controller ownerReference; their label comes from their owner), not listed", controlled, sel)
	}
	switch {
	case len(out) == 0 && keptLeft > 0:
		progress("orphan scan: no object labelled %s is left but the %d this run kept on purpose (named above)", sel, keptLeft)
	case len(out) == 0:
		progress("orphan scan: no object labelled %s is left", sel)
	}
	for _, o := range out {
		progress("orphan: %s is labelled %s but maasctl has no record of creating it; inspect it and delete it by hand if it is not needed", o, sel)
	}
	return out, nil
}

func hasVerb(verbs []string, v string) bool {
	for _, x := range verbs {
		if x == v {
			return true
		}
	}
	return false
}
