package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/maasctl/maasctl/internal/kube"
)

// TestListAllPagesWithoutManagedFields lists 600 ConfigMaps from a real
// kube-apiserver through kube.ListAll: three pages of kube.ListPageSize
// (counted by the clients' request counter), every object once, in name
// order, none with managedFields (the server does send them: a GET shows
// them). Then kube.LeanWatch: an event arrives without managedFields
// (internal/kube's TestLeanWatchStopsWithAnEventUnread checks its Stop).
func TestListAllPagesWithoutManagedFields(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, c := bareAPIServer(t, ctx)
	const ns, n = "lean", 2*kube.ListPageSize + 100
	if _, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%04d", i)}, Data: map[string]string{"i": fmt.Sprint(i)}}
		if _, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: "lean-test"}); err != nil {
			t.Fatal(err)
		}
	}
	ri, _, err := c.Resource(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, ns)
	if err != nil {
		t.Fatal(err)
	}
	one, err := ri.Get(ctx, "cm-0000", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.GetManagedFields()) == 0 {
		t.Fatal("the API server sent no managedFields for cm-0000: the test cannot tell whether ListAll drops them")
	}
	before := c.Requests.Reads()
	items, err := kube.ListAll(ctx, ri, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Requests.Reads()-before, int64((n+kube.ListPageSize-1)/kube.ListPageSize); got != want {
		t.Errorf("ListAll of %d objects made %d reads, want %d pages of %d", n, got, want, kube.ListPageSize)
	}
	// kube-root-ca.crt is published by the controller manager, which does
	// not run here: the namespace holds exactly the test's ConfigMaps.
	if len(items) != n {
		t.Fatalf("ListAll returned %d objects, want %d", len(items), n)
	}
	for i, it := range items {
		if want := fmt.Sprintf("cm-%04d", i); it.GetName() != want {
			t.Fatalf("item %d is %s, want %s (every object once, in name order)", i, it.GetName(), want)
		}
		if mf := it.GetManagedFields(); len(mf) != 0 {
			t.Fatalf("%s kept %d managedFields entries", it.GetName(), len(mf))
		}
		if v, _, _ := unstructured.NestedString(it.Object, "data", "i"); v != fmt.Sprint(i) {
			t.Fatalf("%s has data.i %q, want %d", it.GetName(), v, i)
		}
	}

	// LeanWatch: the event of a new object comes without managedFields.
	w, err := ri.Watch(ctx, metav1.ListOptions{ResourceVersion: one.GetResourceVersion(), FieldSelector: "metadata.name=cm-new"})
	if err != nil {
		t.Fatal(err)
	}
	lw := kube.LeanWatch(w)
	if _, err := c.Kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-new"}}, metav1.CreateOptions{FieldManager: "lean-test"}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-lw.ResultChan():
		if ev.Type != watch.Added {
			t.Fatalf("first event %s, want ADDED", ev.Type)
		}
		u, ok := ev.Object.(interface {
			GetManagedFields() []metav1.ManagedFieldsEntry
		})
		if !ok {
			t.Fatalf("event object %T", ev.Object)
		}
		if len(u.GetManagedFields()) != 0 {
			t.Fatalf("the watch event kept managedFields: %v", u.GetManagedFields())
		}
	case <-ctx.Done():
		t.Fatal("no watch event for cm-new")
	}
	lw.Stop()
}
