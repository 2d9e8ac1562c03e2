package steps

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// readMemo shares reads among the preflight checks of one Preflight call:
// they run concurrently and several read the same object (the
// CatalogSource all three operators subscribe from, the CNPG Cluster). Each key is read once; a later caller waits for the first
// read and gets its result, error included. It lives only as long as one
// Preflight call, so no step ever sees a result older than the preflight.
type readMemo struct {
	mu sync.Mutex
	m  map[string]*memoEntry
}

type memoEntry struct {
	once sync.Once
	obj  *unstructured.Unstructured
	ok   bool
	err  error
}

type memoKey struct{}

func withReadMemo(ctx context.Context) context.Context {
	return context.WithValue(ctx, memoKey{}, &readMemo{m: map[string]*memoEntry{}})
}

// memoized runs read once per key within the memo of ctx; without a memo
// in ctx it just calls read.
func memoized(ctx context.Context, key string, read func() (*unstructured.Unstructured, bool, error)) (*unstructured.Unstructured, bool, error) {
	rm, _ := ctx.Value(memoKey{}).(*readMemo)
	if rm == nil {
		return read()
	}
	rm.mu.Lock()
	me := rm.m[key]
	if me == nil {
		me = &memoEntry{}
		rm.m[key] = me
	}
	rm.mu.Unlock()
	me.once.Do(func() { me.obj, me.ok, me.err = read() })
	return me.obj, me.ok, me.err
}

// getShared is getOptional through the memo of ctx. Callers must not
// modify the object returned.
func getShared(ctx context.Context, e *Env, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	obj, _, err := memoized(ctx, "get "+gvk.String()+" "+ns+"/"+name, func() (*unstructured.Unstructured, bool, error) {
		o, err := getOptional(ctx, e.Clients, gvk, ns, name)
		return o, o != nil, err
	})
	return obj, err
}
