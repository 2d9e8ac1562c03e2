package waiters

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/maasctl/maasctl/internal/kube"
)

// CRDFeedLinger is how long the shared CRD feed of a Clients (crdFeed)
// keeps its watch open after its last wait ended: a first install waits
// for CRDs at several moments a few seconds apart (each operator's CSV,
// a kind not served yet, the MaaS CRDs), and each of those waits used to
// open its own watch of every CRD (issue 16: 6 per install, each sending
// every CRD's schema).
const CRDFeedLinger = 20 * time.Second

// crdFeed is one list-watch of every CustomResourceDefinition, shared by
// the CRD waits of one kube.Clients (For and Group of CRDEstablished
// targets, kindServed): a client-go shared informer started on the first
// wait and stopped CRDFeedLinger after the last one. A wait that joins a
// running feed first gets every CRD in its store as an Added event
// (SharedIndexInformer.AddEventHandler replays them), then the changes.
// The informer starts with a consistent watch-list, as For's does. The
// objects come without metadata.managedFields (kube.LeanWatch).
//
// A store that trails the API server can only delay a CRD wait, never end
// one early on a stale state: maasctl does not write CRDs (OLM and the
// operators do), and Established does not go back to False.
type crdFeed struct {
	c *kube.Clients

	mu       sync.Mutex
	inf      cache.SharedIndexInformer
	stop     context.CancelFunc
	users    int
	idle     *time.Timer
	trouble  string
	watchers map[*crdWatcher]bool
}

type crdFeedKey struct{}

func feedOf(c *kube.Clients) *crdFeed {
	return c.Shared(crdFeedKey{}, func() any { return &crdFeed{c: c, watchers: map[*crdWatcher]bool{}} }).(*crdFeed)
}

// crdWatcher is one wait on the feed.
type crdWatcher struct {
	events  chan watch.Event
	trouble func(string)
	// done is closed when the wait left: a handler call still sending
	// then returns.
	done chan struct{}
}

// crdEvents calls fn with the feed's events (Added for each CRD already
// seen, then every change) until fn returns true or an error, or ctx ends
// (ctx's error). trouble gets the feed's reports of an API server that
// does not answer, as unanswered gives them, while the wait runs.
func crdEvents(ctx context.Context, c *kube.Clients, trouble func(string), fn func(watch.Event) (bool, error)) error {
	f := feedOf(c)
	w := &crdWatcher{events: make(chan watch.Event, 64), trouble: trouble, done: make(chan struct{})}
	reg, err := f.join(w)
	if err != nil {
		return err
	}
	defer f.leave(w, reg)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-w.events:
			done, err := fn(ev)
			if err != nil || done {
				return err
			}
		}
	}
}

// join starts the informer when it is not running and adds w's handler;
// w then gets the feed's current trouble report, if any (outside f.mu:
// it may call the wait's OnChange).
func (f *crdFeed) join(w *crdWatcher) (cache.ResourceEventHandlerRegistration, error) {
	f.mu.Lock()
	reg, trouble, err := f.joinLocked(w)
	f.mu.Unlock()
	if err == nil && trouble != "" {
		w.trouble(trouble)
	}
	return reg, err
}

func (f *crdFeed) joinLocked(w *crdWatcher) (cache.ResourceEventHandlerRegistration, string, error) {
	if f.idle != nil {
		f.idle.Stop()
		f.idle = nil
	}
	if f.inf == nil {
		ri := f.c.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
		lw := unanswered(leanListWatch(ri), f.report)
		inf := cache.NewSharedIndexInformer(lw, &unstructured.Unstructured{}, 0, cache.Indexers{})
		if err := inf.SetTransform(slimCRD); err != nil {
			return nil, "", err
		}
		ctx, cancel := context.WithCancel(context.Background())
		go inf.RunWithContext(ctx)
		f.inf, f.stop = inf, cancel
	}
	f.users++
	f.watchers[w] = true

	// The handler runs in the informer's goroutine for this registration
	// (client-go processorListener, which buffers without bound), so a
	// send that waits for a slow reader stalls no other wait; done ends
	// it once the wait left.
	done := w.done
	send := func(t watch.EventType, obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
				u, ok = d.Obj.(*unstructured.Unstructured)
			}
			if !ok {
				return
			}
		}
		select {
		case w.events <- watch.Event{Type: t, Object: u}:
		case <-done:
		}
	}
	reg, err := f.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { send(watch.Added, obj) },
		UpdateFunc: func(_, obj any) { send(watch.Modified, obj) },
		DeleteFunc: func(obj any) { send(watch.Deleted, obj) },
	})
	if err != nil {
		f.users--
		delete(f.watchers, w)
		close(done)
		if f.users == 0 && f.idle == nil {
			f.stop()
			f.inf, f.stop, f.trouble = nil, nil, ""
		}
		return nil, "", err
	}
	return reg, f.trouble, nil
}

// slimCRD is the feed's informer transform: it keeps of a CRD only what
// the CRD waits and LearnCRD read (name, resourceVersion and uid; spec
// group, names and scope; each version's name, served and storage;
// status conditions, acceptedNames and storedVersions) and drops the
// rest, chiefly the versions' OpenAPI schemas, which are most of a CRD's
// bytes: an OpenShift cluster has hundreds of CRDs, and the feed holds
// them all for the run. A Condition on a CRD (For, Group) therefore sees
// no schema, annotations or labels.
func slimCRD(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown passes as it is
	}
	out := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
		"metadata": map[string]any{"name": u.GetName(), "resourceVersion": u.GetResourceVersion(), "uid": string(u.GetUID())},
	}}
	if out.GetAPIVersion() == "" {
		out.SetGroupVersionKind(CRDGVK)
	}
	if dt := u.GetDeletionTimestamp(); dt != nil {
		out.SetDeletionTimestamp(dt)
	}
	spec := map[string]any{}
	in, _ := u.Object["spec"].(map[string]any)
	for _, k := range []string{"group", "names", "scope"} {
		if v, ok := in[k]; ok {
			spec[k] = v
		}
	}
	var versions []any
	vs, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	for _, v := range vs {
		m, _ := v.(map[string]any)
		versions = append(versions, map[string]any{"name": m["name"], "served": m["served"], "storage": m["storage"]})
	}
	spec["versions"] = versions
	out.Object["spec"] = spec
	if st, ok := u.Object["status"].(map[string]any); ok {
		status := map[string]any{}
		for _, k := range []string{"conditions", "acceptedNames", "storedVersions"} {
			if v, ok := st[k]; ok {
				status[k] = v
			}
		}
		out.Object["status"] = status
	}
	return out, nil
}

// leave removes w's handler; the informer stops CRDFeedLinger after the
// last wait left, unless another joined.
func (f *crdFeed) leave(w *crdWatcher, reg cache.ResourceEventHandlerRegistration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.watchers, w)
	_ = f.inf.RemoveEventHandler(reg)
	close(w.done)
	f.users--
	if f.users > 0 {
		return
	}
	inf := f.inf
	f.idle = time.AfterFunc(CRDFeedLinger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.users == 0 && f.inf == inf {
			f.stop()
			f.inf, f.stop, f.idle, f.trouble = nil, nil, nil, ""
		}
	})
}

// report passes unanswered's report to every wait on the feed.
func (f *crdFeed) report(s string) {
	f.mu.Lock()
	f.trouble = s
	ws := make([]*crdWatcher, 0, len(f.watchers))
	for w := range f.watchers {
		ws = append(ws, w)
	}
	f.mu.Unlock()
	for _, w := range ws {
		w.trouble(s)
	}
}
