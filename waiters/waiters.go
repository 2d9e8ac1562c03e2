// Package waiters waits for Kubernetes objects to reach a condition by
// watching them (client-go watch tools), never by fixed sleeps. A condition can
// also fail fast (CSV Failed, InstallPlan RequiresApproval); on timeout the
// error names every object still blocking with its last observed state.
package waiters

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/internal/kube"
)

// Result is one evaluation of a Condition against the live object.
type Result struct {
	// Done is true when the wanted state is reached.
	Done bool
	// Failed is a terminal failure: waiting longer will not help.
	Failed error
	// Status describes the observed state in a few words, e.g.
	// "Ready=False (MissingDependency): ...". It is shown while waiting and in
	// timeout errors, so it must never contain secret values.
	Status string
}

// Condition evaluates a live object. It must be a pure function of obj.
type Condition func(obj *unstructured.Unstructured) Result

// Target is one object to wait for.
type Target struct {
	GVK       schema.GroupVersionKind
	Namespace string
	Name      string
	// Cond decides when the object is ready; nil means "exists".
	Cond Condition
	// OnChange, when set, is called each time the observed Status changes.
	OnChange func(Result)
	// ManagedFields keeps metadata.managedFields in the objects Cond sees,
	// for a condition on who applied what; by default they are dropped
	// (kube.LeanWatch). Honoured by For, and by All and AllObjects for a
	// target alone in its kind and namespace.
	ManagedFields bool
}

// String names the target as Kind namespace/name.
func (t Target) String() string {
	if t.Namespace == "" {
		return t.GVK.Kind + " " + t.Name
	}
	return t.GVK.Kind + " " + t.Namespace + "/" + t.Name
}

// Blocked is one object a wait was still blocked on.
type Blocked struct {
	Object string
	Status string
}

// TimeoutError is returned when the context ends before every target is done.
type TimeoutError struct {
	Blocked []Blocked
}

func (e *TimeoutError) Error() string {
	parts := make([]string, 0, len(e.Blocked))
	for _, b := range e.Blocked {
		parts = append(parts, fmt.Sprintf("%s (%s)", b.Object, b.Status))
	}
	return "timed out waiting for " + strings.Join(parts, "; ")
}

// IsTimeout reports whether err is a TimeoutError.
func IsTimeout(err error) bool {
	var t *TimeoutError
	return errors.As(err, &t)
}

// InterruptedError is returned when the context of a wait was cancelled
// (a signal, a broken stdout, another wait failing) rather than reaching its
// deadline. It names what the wait was still blocked on. It unwraps to
// context.Canceled and to the context's cause (context.Cause), so
// errors.Is(err, context.Canceled) holds.
type InterruptedError struct {
	Blocked []Blocked
	Cause   error
}

func (e *InterruptedError) Error() string {
	parts := make([]string, 0, len(e.Blocked))
	for _, b := range e.Blocked {
		parts = append(parts, fmt.Sprintf("%s (%s)", b.Object, b.Status))
	}
	why := "interrupted"
	if e.Cause != nil && !errors.Is(e.Cause, context.Canceled) {
		why = "interrupted (" + e.Cause.Error() + ")"
	}
	if len(parts) == 0 {
		return why
	}
	return why + " while waiting for " + strings.Join(parts, "; ")
}

// Unwrap returns context.Canceled and the cause.
func (e *InterruptedError) Unwrap() []error { return []error{context.Canceled, e.Cause} }

// ended is the error of a wait whose ctx ended while blocked: a
// TimeoutError at the deadline, an InterruptedError when ctx was cancelled.
func ended(ctx context.Context, blocked []Blocked) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return &InterruptedError{Blocked: blocked, Cause: context.Cause(ctx)}
	}
	return &TimeoutError{Blocked: blocked}
}

// Ended is ended for callers outside the package that wait on their own
// (uninstall's waits for deletion): the error of a wait on blocked whose
// ctx is done.
func Ended(ctx context.Context, blocked []Blocked) error { return ended(ctx, blocked) }

// FailedError is a terminal failure reported by a Condition.
type FailedError struct {
	Object string
	Err    error
}

func (e *FailedError) Error() string { return e.Object + ": " + e.Err.Error() }
func (e *FailedError) Unwrap() error { return e.Err }

// notSeen is a target's status until its first event: the object may
// not exist, or the watch's initial list may not have arrived yet (an
// interrupted run called existing CRDs "not found": a new user's trial,
// session 42).
const notSeen = "not seen yet"

// For waits until t is done and returns the object as last seen. If t's kind
// is not served yet, it first waits for its CRD to be Established (case B03).
func For(ctx context.Context, c *kube.Clients, t Target) (*unstructured.Unstructured, error) {
	if t.GVK == CRDGVK && !t.ManagedFields {
		// On the Clients' shared watch of every CRD (crdFeed): Cond sees
		// the CRD without its schemas (slimCRD).
		objs, err := Group(ctx, c, t)
		return objs[0], err
	}
	var mu sync.Mutex
	last := Result{Status: notSeen} // Cond's last Result
	trouble := ""                   // unanswered's last report
	shown := last.Status            // what OnChange last got
	// update changes last or trouble under mu and calls OnChange when the
	// status shown (Cond's, then the API server's trouble) changed.
	update := func(f func()) {
		mu.Lock()
		f()
		r := last
		r.Status = withTrouble(r.Status, trouble)
		changed := r.Status != shown
		shown = r.Status
		mu.Unlock()
		if changed && t.OnChange != nil {
			t.OnChange(r)
		}
	}
	set := func(r Result) { update(func() { last = r }) }
	get := func() Result { mu.Lock(); defer mu.Unlock(); return Result{Status: shown} }

	if _, err := c.Mapping(t.GVK); err != nil {
		if !kube.IsNotServed(err) {
			return nil, err
		}
		set(Result{Status: "kind " + t.GVK.Kind + " not served yet"})
		if err := kindServed(ctx, c, t.GVK); err != nil {
			if ctx.Err() != nil {
				return nil, ended(ctx, []Blocked{{Object: t.String(), Status: get().Status}})
			}
			return nil, err
		}
	}
	ri, _, err := c.Resource(t.GVK, t.Namespace)
	if err != nil {
		return nil, err
	}
	cond := t.Cond
	if cond == nil {
		cond = Exists()
	}
	// A consistent watch-list (client-go's default), not ListThenWatch:
	// a wait usually follows maasctl's own write of the object, and a LIST
	// from the watch cache can still show the object from before that
	// write (old spec, old status, matching old generation), which would
	// end the wait on a stale state.
	lw := unanswered(nameListWatch(ri, t.Name, t.ManagedFields), func(s string) { update(func() { trouble = s }) })
	var obj *unstructured.Unstructured
	// No precondition: with one, UntilWithSync first polls the informer's
	// HasSynced every 100 ms (cache.WaitForCacheSync), which delays every
	// wait by up to 100 ms. The status starts as notSeen and the
	// informer's initial list arrives as events.
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		if ev.Type == watch.Deleted {
			set(Result{Status: "deleted"})
			return false, nil
		}
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		obj = u
		r := cond(u)
		set(r)
		if r.Failed != nil {
			return false, &FailedError{Object: t.String(), Err: r.Failed}
		}
		return r.Done, nil
	})
	if err != nil {
		var fe *FailedError
		if errors.As(err, &fe) {
			return obj, fe
		}
		if ctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed) || errors.Is(err, context.DeadlineExceeded) {
			return obj, ended(ctx, []Blocked{{Object: t.String(), Status: get().Status}})
		}
		if apierrors.IsForbidden(err) {
			return obj, fmt.Errorf("watch %s: %w", t, err)
		}
		return obj, fmt.Errorf("wait for %s: %w", t, err)
	}
	learnCRDs(c, t.GVK, obj)
	return obj, nil
}

// unanswered wraps lw so that report gets, after each of its LIST and
// WATCH calls, a few words on the API server's failure to answer it ("" on
// success): client-go's Reflector retries a failed call with a back-off
// and only logs it (k8s.io/client-go/tools/cache reflector.go
// ListAndWatch), so without this a wait on an API server that went away
// would say nothing until its deadline. Failures are transport errors
// (connection refused, reset, timeouts) and 5xx answers (a server
// shutting down answers 503); another API status (a 400 to a watch-list
// request, after which the Reflector falls back to LIST) is the server
// answering, and a call ended by its context is no failure.
func unanswered(lw *cache.ListWatch, report func(string)) *cache.ListWatch {
	check := func(ctx context.Context, err error) {
		switch {
		case err == nil:
			report("")
		case ctx.Err() != nil:
		case !unanswer(err):
		default:
			report("the API server did not answer: " + err.Error() + "; retrying")
		}
	}
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			obj, err := lw.ListWithContextFunc(ctx, o)
			check(ctx, err)
			return obj, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			w, err := lw.WatchFuncWithContext(ctx, o)
			check(ctx, err)
			return w, err
		},
	}
}

// unanswer reports whether err means the API server did not answer: no
// API status at all, or a 5xx one.
func unanswer(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return true
	}
	return st.Status().Code >= 500
}

// withTrouble is a wait's status with the API server's trouble (from
// unanswered) after it, when there is any.
func withTrouble(status, trouble string) string {
	if trouble == "" {
		return status
	}
	return status + "; " + trouble
}

// NameListWatch lists and watches the one object of ri named name (field
// selector metadata.name), for watchtools.UntilWithSync. The objects come
// without metadata.managedFields (kube.LeanWatch).
func NameListWatch(ri dynamic.ResourceInterface, name string) *cache.ListWatch {
	return nameListWatch(ri, name, false)
}

// leanListWatch lists and watches every object of ri (a consistent
// watch-list by default), without metadata.managedFields (kube.LeanWatch).
func leanListWatch(ri dynamic.ResourceInterface) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return leanList(ri.List(ctx, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return leanWatch(ri.Watch(ctx, o))
		},
	}
}

// nameListWatch is NameListWatch, keeping metadata.managedFields when
// managedFields is true.
func nameListWatch(ri dynamic.ResourceInterface, name string, managedFields bool) *cache.ListWatch {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			if managedFields {
				return ri.List(ctx, o)
			}
			return leanList(ri.List(ctx, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			if managedFields {
				return ri.Watch(ctx, o)
			}
			return leanWatch(ri.Watch(ctx, o))
		},
	}
}

// listThenWatch makes an informer start with a LIST at resourceVersion 0
// (served by the apiserver's watch cache as it is) and then WATCH from the
// LIST's resourceVersion, instead of a watch-list stream (client-go
// WatchListClient, on by default since 1.35). A watch-list's initial
// snapshot must be consistent: the apiserver answers it only once its watch
// cache has caught up with etcd's current revision, which after writes to
// other kinds takes the next etcd progress notification (apiserver
// storage/cacher/progress requests one every 100 ms; measured here: up to
// 110 ms per informer). Only for watches that need no read-your-writes:
// the WATCH delivers every change after the LIST, but the LIST itself can
// trail maasctl's own last write (client-go Reflector: "initial list
// performed by reflector uses 0 as resource version").
type listThenWatch struct{ *cache.ListWatch }

// IsWatchListSemanticsUnSupported tells client-go's Reflector to use LIST
// and WATCH (k8s.io/client-go/util/watchlist).
func (listThenWatch) IsWatchListSemanticsUnSupported() bool { return true }

// ListThenWatch returns lw for watchtools.UntilWithSync and informers so
// that they start with a LIST from the watch cache and then WATCH (see
// listThenWatch): for watches of objects others write (Jobs, PVCs, pods,
// CertificateRequests) or of a deletion, where a LIST that trails
// maasctl's own writes is harmless.
func ListThenWatch(lw *cache.ListWatch) cache.ListerWatcher { return listThenWatch{lw} }

// All waits for every target in parallel. A terminal failure of one target
// ends the wait at once; on timeout the error lists every target not done.
// Targets of one kind in one namespace share one list-watch (Group).
func All(ctx context.Context, c *kube.Clients, targets ...Target) error {
	_, err := AllObjects(ctx, c, targets...)
	return err
}

// AllObjects is All that also returns each target's object as last seen,
// in targets' order (nil where none was seen).
func AllObjects(ctx context.Context, c *kube.Clients, targets ...Target) ([]*unstructured.Unstructured, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type gkey struct {
		gvk schema.GroupVersionKind
		ns  string
	}
	var order []gkey
	groups := map[gkey][]int{}
	for i, t := range targets {
		k := gkey{t.GVK, t.Namespace}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	objs := make([]*unstructured.Unstructured, len(targets))
	ch := make(chan error, len(order))
	for _, k := range order {
		idx := groups[k]
		go func() {
			if len(idx) == 1 {
				obj, err := For(ctx, c, targets[idx[0]])
				objs[idx[0]] = obj
				ch <- err
				return
			}
			ts := make([]Target, len(idx))
			for j, i := range idx {
				ts[j] = targets[i]
			}
			got, err := Group(ctx, c, ts...)
			for j, i := range idx {
				objs[i] = got[j]
			}
			ch <- err
		}()
	}
	var blocked []Blocked
	var first error
	var interrupted *InterruptedError
	for range order {
		err := <-ch
		if err == nil {
			continue
		}
		var te *TimeoutError
		if errors.As(err, &te) {
			blocked = append(blocked, te.Blocked...)
			continue
		}
		var ie *InterruptedError
		if errors.As(err, &ie) && first == nil {
			blocked = append(blocked, ie.Blocked...)
			interrupted = ie
			continue
		}
		if first == nil {
			first = err
			cancel()
		}
	}
	if first != nil {
		return objs, first
	}
	if len(blocked) > 0 {
		sort.Slice(blocked, func(i, j int) bool { return blocked[i].Object < blocked[j].Object })
		if interrupted != nil {
			return objs, &InterruptedError{Blocked: blocked, Cause: interrupted.Cause}
		}
		return objs, &TimeoutError{Blocked: blocked}
	}
	return objs, nil
}

// Group waits, on one list-watch of their kind in their namespace, until
// every target is done: targets must share GVK and Namespace. It is For
// for many objects (the same conditions, statuses, OnChange calls and
// errors, a TimeoutError or InterruptedError naming every target not
// done), at one LIST and WATCH instead of one per object. A target is
// finished once done; a terminal failure of one ends the wait. It returns
// each target's object as last seen, in targets' order.
func Group(ctx context.Context, c *kube.Clients, targets ...Target) ([]*unstructured.Unstructured, error) {
	if len(targets) == 0 {
		return make([]*unstructured.Unstructured, 0), nil
	}
	g := newGroupWait(targets)
	gvk, ns := targets[0].GVK, targets[0].Namespace
	for _, t := range targets[1:] {
		if t.GVK != gvk || t.Namespace != ns {
			return g.objs, fmt.Errorf("waiters.Group: %s is not of kind %s in namespace %q", t, gvk.Kind, ns)
		}
	}
	if _, err := c.Mapping(gvk); err != nil {
		if !kube.IsNotServed(err) {
			return g.objs, err
		}
		for i := range targets {
			g.set(i, Result{Status: "kind " + gvk.Kind + " not served yet"})
		}
		if err := kindServed(ctx, c, gvk); err != nil {
			if ctx.Err() != nil {
				return g.objs, ended(ctx, g.blocked())
			}
			return g.objs, err
		}
	}
	var err error
	if gvk == CRDGVK {
		// CRDs: the Clients' one shared watch of them (crdFeed).
		err = crdEvents(ctx, c, g.setTrouble, g.observe)
	} else {
		var ri dynamic.ResourceInterface
		ri, _, err = c.Resource(gvk, ns)
		if err != nil {
			return g.objs, err
		}
		// A consistent watch-list, as in For: the wait follows maasctl's
		// own writes.
		lw := unanswered(leanListWatch(ri), g.setTrouble)
		_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, g.observe)
	}
	if err != nil {
		var fe *FailedError
		if errors.As(err, &fe) {
			return g.objs, fe
		}
		if ctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed) || errors.Is(err, context.DeadlineExceeded) {
			return g.objs, ended(ctx, g.blocked())
		}
		if apierrors.IsForbidden(err) {
			return g.objs, fmt.Errorf("watch %s in namespace %q: %w", gvk.Kind, ns, err)
		}
		return g.objs, fmt.Errorf("wait for %s in namespace %q: %w", gvk.Kind, ns, err)
	}
	learnCRDs(c, gvk, g.objs...)
	return g.objs, nil
}

// learnCRDs gives the Clients the REST mappings of the Established CRDs
// among objs (kube.Clients.LearnCRD): a wait for a CRD to be Established
// is followed by requests for its kind, which then need no discovery
// re-read.
func learnCRDs(c *kube.Clients, gvk schema.GroupVersionKind, objs ...*unstructured.Unstructured) {
	if gvk != CRDGVK {
		return
	}
	for _, o := range objs {
		if o != nil {
			c.LearnCRD(o)
		}
	}
}

// groupWait is the state of one Group wait: each target's last object
// and Result, which are done, and how many are left.
type groupWait struct {
	targets []Target
	objs    []*unstructured.Unstructured
	mu      sync.Mutex
	last    []Result // each target's last Result of its Cond
	shown   []string // each target's status as OnChange last got it
	trouble string   // unanswered's last report
	done    []bool
	byName  map[string][]int
	left    int
}

func newGroupWait(targets []Target) *groupWait {
	g := &groupWait{
		targets: targets, objs: make([]*unstructured.Unstructured, len(targets)),
		last: make([]Result, len(targets)), shown: make([]string, len(targets)), done: make([]bool, len(targets)),
		byName: map[string][]int{}, left: len(targets),
	}
	for i, t := range targets {
		g.last[i] = Result{Status: notSeen}
		g.shown[i] = g.last[i].Status
		g.byName[t.Name] = append(g.byName[t.Name], i)
	}
	return g
}

// set records target i's Result and reports a change of its status.
func (g *groupWait) set(i int, r Result) {
	g.mu.Lock()
	g.last[i] = r
	r.Status = withTrouble(r.Status, g.trouble)
	changed := r.Status != g.shown[i]
	g.shown[i] = r.Status
	g.mu.Unlock()
	if changed && g.targets[i].OnChange != nil {
		g.targets[i].OnChange(r)
	}
}

// setTrouble records unanswered's report and shows it on every target
// not done yet.
func (g *groupWait) setTrouble(s string) {
	g.mu.Lock()
	if s == g.trouble {
		g.mu.Unlock()
		return // every successful call reports "": most change nothing
	}
	g.trouble = s
	var open []int
	var last []Result
	for i := range g.targets {
		if !g.done[i] {
			open, last = append(open, i), append(last, g.last[i])
		}
	}
	g.mu.Unlock()
	for j, i := range open {
		g.set(i, last[j])
	}
}

// blocked lists the targets not done yet with their last status.
func (g *groupWait) blocked() []Blocked {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Blocked
	for i, t := range g.targets {
		if !g.done[i] {
			out = append(out, Blocked{Object: t.String(), Status: g.shown[i]})
		}
	}
	return out
}

// observe applies one watch event to the targets of its name; it is done
// when every target is.
func (g *groupWait) observe(ev watch.Event) (bool, error) {
	u, ok := ev.Object.(*unstructured.Unstructured)
	if !ok {
		return false, nil
	}
	for _, i := range g.byName[u.GetName()] {
		g.mu.Lock()
		finished := g.done[i]
		g.mu.Unlock()
		if finished {
			continue
		}
		if ev.Type == watch.Deleted {
			g.set(i, Result{Status: "deleted"})
			continue
		}
		g.objs[i] = u
		cond := g.targets[i].Cond
		if cond == nil {
			cond = Exists()
		}
		r := cond(u)
		g.set(i, r)
		if r.Failed != nil {
			return false, &FailedError{Object: g.targets[i].String(), Err: r.Failed}
		}
		if r.Done {
			g.mu.Lock()
			g.done[i] = true
			g.mu.Unlock()
			g.left--
		}
	}
	return g.left == 0, nil
}

// CRDGVK is the kind of CustomResourceDefinition objects.
var CRDGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// CRDEstablished waits for the CRD with the given name (plural.group).
func CRDEstablished(name string) Target {
	return Target{GVK: CRDGVK, Name: name, Cond: ConditionTrue("Established")}
}

// kindServed waits until a CRD serving gvk is Established, then gives the
// Clients its REST mapping (kube.Clients.LearnCRD).
func kindServed(ctx context.Context, c *kube.Clients, gvk schema.GroupVersionKind) error {
	var crd *unstructured.Unstructured
	err := crdEvents(ctx, c, func(string) {}, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok || ev.Type == watch.Deleted {
			return false, nil
		}
		if servesKind(u, gvk) && ConditionTrue("Established")(u).Done {
			crd = u
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return err
	}
	// The CRD's own mapping, not a discovery re-read; a CRD object
	// without the accepted names or scope LearnCRD needs (it has them once
	// Established) falls back to one.
	if !c.LearnCRD(crd) {
		c.ResetMapper()
	}
	_, err = c.Mapping(gvk)
	return err
}

func servesKind(crd *unstructured.Unstructured, gvk schema.GroupVersionKind) bool {
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "kind")
	if group != gvk.Group || kind != gvk.Kind {
		return false
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if m["name"] == gvk.Version && m["served"] == true {
			return true
		}
	}
	return false
}

// SelectorListWatch lists and watches, with list and watch of a typed or
// dynamic client, the objects that match a label selector ("" for all),
// starting with a LIST from the watch cache (ListThenWatch): for watches of
// objects others write (Jobs, PVCs, pods) where a LIST that trails
// maasctl's own writes is harmless.
func SelectorListWatch[L runtime.Object](list func(context.Context, metav1.ListOptions) (L, error), watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error), selector string) cache.ListerWatcher {
	return ListThenWatch(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return leanList(list(ctx, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return leanWatch(watchFn(ctx, o))
		},
	})
}

// leanList and leanWatch drop metadata.managedFields from what a wait's
// informer stores (kube.LeanList, kube.LeanWatch): no condition reads them.
func leanList[L runtime.Object](l L, err error) (runtime.Object, error) {
	if err != nil {
		return nil, err
	}
	return kube.LeanList(l), nil
}

func leanWatch(w watch.Interface, err error) (watch.Interface, error) {
	if err != nil {
		return nil, err
	}
	return kube.LeanWatch(w), nil
}

// Gone waits until the object gvk ns/name does not exist (a kind that is
// not served counts as gone). It lists from the watch cache and then
// watches (ListThenWatch): a LIST that trails a deletion is followed by
// the deletion's event. When ctx ends first the error is a TimeoutError or
// InterruptedError naming the object as "still present".
func Gone(ctx context.Context, c *kube.Clients, gvk schema.GroupVersionKind, ns, name string) error {
	ri, _, err := c.Resource(gvk, ns)
	if kube.IsNotServed(err) {
		return nil
	}
	if err != nil {
		return err
	}
	lw := ListThenWatch(NameListWatch(ri, name))
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, func(store cache.Store) (bool, error) {
		return len(store.List()) == 0, nil
	}, func(ev watch.Event) (bool, error) {
		return ev.Type == watch.Deleted, nil
	})
	if err == nil {
		return nil
	}
	obj := gvk.Kind + " " + name
	if ns != "" {
		obj = gvk.Kind + " " + ns + "/" + name
	}
	if ctx.Err() != nil || errors.Is(err, watchtools.ErrWatchClosed) || errors.Is(err, context.DeadlineExceeded) {
		return ended(ctx, []Blocked{{Object: obj, Status: "still present"}})
	}
	return fmt.Errorf("wait for %s to be gone: %w", obj, err)
}
