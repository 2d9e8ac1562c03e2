package kube

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/pager"
)

// ListPageSize is the number of objects ListAll asks for per request
// (metav1.ListOptions.Limit). A page of 250 MaaS objects is about 0.6 MB of
// JSON and several times that once decoded into unstructured maps; one
// LIST of 1,000 models' objects of one kind held all of them at once.
const ListPageSize = 250

// ListAll lists the objects of ri that match opts, ListPageSize at a time
// (client-go tools/pager, continue tokens; a consistent read when opts has
// no ResourceVersion, like a GET), and drops each object's
// metadata.managedFields as its page arrives (DropManagedFields). Items come
// in the API server's order (namespace, then name). Errors are the API's,
// wrapped with nothing: apierrors.IsNotFound and friends still work.
//
// maasctl reads managedFields nowhere; they are 30-45% of a MaaS object's
// JSON (measured on the local control plane: a MaaSModelRef 989 of 2,505
// bytes, a TokenRateLimitPolicy 1,329 of 3,032), so keeping the lists of
// 1,000 models without them is what keeps maasctl's memory flat.
func ListAll(ctx context.Context, ri dynamic.ResourceInterface, opts metav1.ListOptions) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	err := EachListItem(ctx, ri, opts, func(u *unstructured.Unstructured) error {
		out = append(out, u)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EachListItem is ListAll without the slice: fn gets each object, without
// managedFields, as its page arrives, one at a time in the server's
// order; an object fn does not keep is garbage once fn returns, so a caller
// that only looks at each object holds one page at most. An error from fn
// stops the list and is returned.
func EachListItem(ctx context.Context, ri dynamic.ResourceInterface, opts metav1.ListOptions, fn func(*unstructured.Unstructured) error) error {
	p := pager.New(pager.SimplePageFunc(func(o metav1.ListOptions) (runtime.Object, error) {
		return ri.List(ctx, o)
	}))
	p.PageSize = ListPageSize
	return p.EachListItem(ctx, opts, func(o runtime.Object) error {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			return fmt.Errorf("list: item of type %T, want *unstructured.Unstructured", o)
		}
		DropManagedFields(u)
		return fn(u)
	})
}

// DropManagedFields removes metadata.managedFields from u in place (server-
// side apply's field ownership record, which maasctl never reads once an
// object is decoded; its writes are server-side applies with force).
func DropManagedFields(u *unstructured.Unstructured) {
	if md, ok := u.Object["metadata"].(map[string]any); ok {
		delete(md, "managedFields")
	}
}

// LeanWatch wraps w so that each event's object arrives without
// metadata.managedFields (DropManagedFields): an informer's store of 1,000
// objects of one kind then lacks what is 30-45% of a MaaS object's JSON. Events pass in order and
// none is dropped; Bookmarks (watch-list's initial-events-end included)
// keep their annotations. Not apimachinery's watch.Filter: its goroutine
// blocks for good on an event nobody reads after Stop (a reflector stops
// reading when its wait ends); this one gives up the event on Stop.
func LeanWatch(w watch.Interface) watch.Interface {
	lw := &leanWatch{in: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go lw.loop()
	return lw
}

type leanWatch struct {
	in       watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *leanWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *leanWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.in.Stop()
}

func (w *leanWatch) loop() {
	defer close(w.out)
	for ev := range w.in.ResultChan() {
		if u, ok := ev.Object.(*unstructured.Unstructured); ok {
			DropManagedFields(u)
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

// LeanList drops metadata.managedFields from every item of an
// *unstructured.UnstructuredList (a list decoded by the dynamic client);
// other objects are returned as they are.
func LeanList(o runtime.Object) runtime.Object {
	if l, ok := o.(*unstructured.UnstructuredList); ok {
		for i := range l.Items {
			DropManagedFields(&l.Items[i])
		}
	}
	return o
}
