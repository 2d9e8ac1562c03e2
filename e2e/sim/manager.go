package sim

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// key names one object a reconciler handles.
type key struct {
	Namespace, Name string
}

func (k key) String() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

func keyOf(obj *unstructured.Unstructured) key {
	return key{Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// watch is a secondary informer of a reconciler: events on gvr enqueue the
// primary keys that mapFn returns. A nil mapFn only keeps the cache warm so
// the reconciler can read the kind.
type watch struct {
	gvr   schema.GroupVersionResource
	mapFn func(obj *unstructured.Unstructured) []key
	// changed filters update events (controller-runtime's predicates on a
	// Watches): an update enqueues only when changed(old, new) is true.
	// Nil admits every update. Adds and deletes always enqueue.
	changed func(old, new *unstructured.Unstructured) bool
}

// objectChanged is controller-runtime's GenerationChangedPredicate or
// LabelChangedPredicate or AnnotationChangedPredicate, plus the update that
// sets deletionTimestamp: a status-only write does not pass. It also drops
// informer resyncs (old and new are the same object).
func objectChanged(old, new *unstructured.Unstructured) bool {
	return old.GetGeneration() != new.GetGeneration() ||
		!maps.Equal(old.GetLabels(), new.GetLabels()) ||
		!maps.Equal(old.GetAnnotations(), new.GetAnnotations()) ||
		(old.GetDeletionTimestamp() == nil) != (new.GetDeletionTimestamp() == nil)
}

// generationOrDeletion is GenerationChangedPredicate plus the update that
// sets deletionTimestamp: spec changes and the start of a deletion pass,
// status and metadata writes do not.
func generationOrDeletion(old, new *unstructured.Unstructured) bool {
	return old.GetGeneration() != new.GetGeneration() ||
		(old.GetDeletionTimestamp() == nil) != (new.GetDeletionTimestamp() == nil)
}

// updateHandler returns an UpdateFunc calling h for updates changed admits
// (all when changed is nil).
// Both the old and the new object are mapped (h is called with each), so
// that a mapping by content (referencedRefs, referencing) also requeues
// what the old object named.
func updateHandler(changed func(old, new *unstructured.Unstructured) bool, h func(obj any)) func(oldObj, newObj any) {
	return func(oldObj, newObj any) {
		if changed != nil {
			o, ok1 := oldObj.(*unstructured.Unstructured)
			n, ok2 := newObj.(*unstructured.Unstructured)
			if ok1 && ok2 && !changed(o, n) {
				return
			}
		}
		h(oldObj)
		h(newObj)
	}
}

// reconciler is one controller loop: a primary kind, the kinds it watches or
// reads, and a reconcile function called with one key at a time.
type reconciler struct {
	name string // "olm/subscription"
	// delayKey is the Options.Delay key (a controller name).
	delayKey string
	primary  schema.GroupVersionResource
	watches  []watch
	// workers is how many keys are reconciled at once (default 1; one key
	// is never reconciled twice at the same time).
	workers int
	// onStart runs once after the caches synced, before the first reconcile.
	onStart   func(ctx context.Context) error
	reconcile func(ctx context.Context, k key) error

	queue workqueue.TypedRateLimitingInterface[key]
	// conflicts paces retries after a write conflict (a stale cache):
	// fast, since the watch event of the newer version requeues the key
	// anyway; reset when a reconcile succeeds.
	conflicts workqueue.TypedRateLimiter[key]
	started   bool
	log       *zap.Logger
	// reconciles and busy count the reconciles and their summed wall
	// time in nanoseconds (Handle.ReconcileStats).
	reconciles, busy atomic.Int64
}

// manager owns the clients, the shared dynamic informer factory and the
// reconcilers; it starts each reconciler once every kind it needs is served.
type manager struct {
	opts    Options
	cfg     *rest.Config // the simulators' own (cluster-admin) client config
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	factory dynamicinformer.DynamicSharedInformerFactory
	log     *zap.Logger
	crds    *crdStore
	ca      *servingCA
	// istioCRDs are Options.IstioCRDs, parsed.
	istioCRDs []*crdFile

	mu          sync.Mutex
	served      map[schema.GroupVersionResource]bool
	reconcilers []*reconciler
	ctx         context.Context
	wg          sync.WaitGroup

	// firstSeen records when a delay trigger was first observed, per
	// object UID and trigger.
	firstSeen sync.Map // string -> time.Time
	// liveSeen records when an informer delivered an object created after
	// its initial list, per UID (used to order creations within a second).
	liveSeen sync.Map // types.UID -> time.Time
	tracked  sync.Map // cache.SharedIndexInformer -> bool
	observed sync.Map // reconciler name|gvr -> bool
	// probes holds, per custom resource kind, a channel closed once the
	// API server's watch cache for it is ready (see watchable).
	probes sync.Map // schema.GroupVersionResource -> chan struct{}
	// inFlight holds the ids of background creations running now (see
	// background).
	inFlight sync.Map // string -> bool
	// crdsCreated holds the names of CRDs ensureCRDsAsync created; a
	// name is dropped when the CRD watch reports the CRD deleted.
	crdsCreated sync.Map // string -> bool
	// written holds, per resource and key, the object the last status
	// write of this process returned (see fresh).
	written sync.Map // string -> *unstructured.Unstructured
	// indexMu guards indexed: the informer indexes byIndex has added,
	// per resource and index name.
	indexMu sync.Mutex
	indexed map[string]bool
}

func newManager(cfg *rest.Config, o Options) (*manager, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS, cfg.Burst = 200, 400
	}
	cfg.UserAgent = "maasctl-sim"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kube client: %w", err)
	}
	ca, err := newServingCA()
	if err != nil {
		return nil, err
	}
	var istio []*crdFile
	if o.IstioCRDs != "" {
		if istio, err = parseCRDFile(o.IstioCRDs); err != nil {
			return nil, err
		}
	}
	m := &manager{
		istioCRDs: istio,
		opts:      o,
		cfg:       cfg,
		dyn:       dyn,
		kube:      kube,
		factory:   dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		log:       o.Logger,
		crds:      newCRDStore(o.CRDDir),
		ca:        ca,
		served:    map[schema.GroupVersionResource]bool{},
	}
	for _, g := range builtinGVRs {
		m.served[g] = true
	}
	return m, nil
}

// builtinGVRs are served by every kube-apiserver; everything else waits for
// its CRD.
var builtinGVRs = []schema.GroupVersionResource{
	gvrNamespace, gvrSecret, gvrConfigMap, gvrService, gvrPod, gvrPVC, gvrDeployment, gvrStorageClass, gvrCRD, gvrJob,
}

func (m *manager) add(r *reconciler) {
	r.conflicts = workqueue.NewTypedItemExponentialFailureRateLimiter[key](5*time.Millisecond, time.Second)
	r.queue = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[key](50*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[key]{Name: r.name},
	)
	r.log = m.log.With(zap.String("controller", r.name))
	m.reconcilers = append(m.reconcilers, r)
}

func (m *manager) start(ctx context.Context) error {
	if _, err := m.kube.Discovery().ServerVersion(); err != nil {
		return fmt.Errorf("connect to api server: %w", err)
	}
	m.ctx = ctx
	if err := m.installCertWebhook(ctx); err != nil {
		return err
	}
	if !m.opts.RealCNPG {
		registerCNPG(m)
	}
	registerDBJobs(m)
	registerCertManager(m)
	registerServiceCA(m)
	registerServiceCABundle(m)
	registerGateway(m)
	registerRouter(m)
	registerLWS(m)
	registerRHOAI(m)
	registerMaaS(m)

	// The CRD informer drives discovery: a reconciler starts once every
	// kind it needs has an Established CRD.
	crdInf := m.factory.ForResource(gvrCRD).Informer()
	reg, err := crdInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { m.crdChanged(obj) },
		UpdateFunc: func(_, obj any) { m.crdChanged(obj) },
		DeleteFunc: func(obj any) { m.crdDeleted(obj) },
	})
	if err != nil {
		return fmt.Errorf("watch crds: %w", err)
	}
	m.factory.Start(ctx.Done())
	// The handler's own sync: every CRD of the initial list has passed
	// through crdChanged (and started its watch cache probe).
	if !cache.WaitForCacheSync(ctx.Done(), crdInf.HasSynced, reg.HasSynced) {
		return fmt.Errorf("sync crd cache: %w", context.Cause(ctx))
	}
	m.mu.Lock()
	m.startReady()
	m.mu.Unlock()
	// Parse the CRD files now, while the probes below run, rather than
	// inside the delay of the reconcile that first registers them.
	m.crds.preload(ctx, m.crdPatterns())
	// Return only once kube-apiserver's watch caches of the kinds served
	// now are ready (each probe gives up after watchCacheWait). On a real
	// cluster they have been warm for long (OLM, cert-manager and the
	// gateway controllers watch these kinds); a client started right after
	// Start would otherwise meet a LIST answered 429 with Retry-After 1 s
	// (see watchable), time that belongs to no simulated operator.
	var pending []chan struct{}
	m.probes.Range(func(_, v any) bool {
		pending = append(pending, v.(chan struct{}))
		return true
	})
	for _, ch := range pending {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for watch caches: %w", context.Cause(ctx))
		}
	}
	return nil
}

func (m *manager) wait() {
	m.factory.Shutdown()
	m.wg.Wait()
}

func (m *manager) crdChanged(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	gvrs := servedGVRs(u)
	m.mu.Lock()
	defer m.mu.Unlock()
	changed := false
	for _, g := range gvrs {
		if !m.served[g] {
			m.served[g] = true
			changed = true
			m.log.Debug("crd established", zap.String("gvr", g.String()))
			if m.ctx != nil {
				m.watchable(g) // warm the API server's watch cache now
			}
		}
	}
	if changed && m.ctx != nil {
		m.startReady()
	}
}

func (m *manager) crdDeleted(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	m.crdsCreated.Delete(u.GetName())
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	m.mu.Lock()
	defer m.mu.Unlock()
	for g := range m.served {
		if g.Group == group && g.Resource == plural {
			delete(m.served, g)
		}
	}
}

// servedGVRs returns the group/version/resources a CRD serves once its
// Established condition is True.
func servedGVRs(u *unstructured.Unstructured) []schema.GroupVersionResource {
	if !conditionTrue(u, "Established") {
		return nil
	}
	group, _, _ := unstructured.NestedString(u.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(u.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(u.Object, "spec", "versions")
	var out []schema.GroupVersionResource
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		if served, _ := vm["served"].(bool); served && name != "" {
			out = append(out, schema.GroupVersionResource{Group: group, Version: name, Resource: plural})
		}
	}
	return out
}

// isServed reports whether the API server serves gvr (its CRD is Established).
func (m *manager) isServed(g schema.GroupVersionResource) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.served[g]
}

// startReady starts every reconciler whose kinds are all served, once the
// API server's watch caches of those kinds are ready (see watchable).
// Callers hold m.mu.
func (m *manager) startReady() {
	for _, r := range m.reconcilers {
		if r.started || !m.served[r.primary] {
			continue
		}
		ready := true
		for _, w := range r.watches {
			if !m.served[w.gvr] {
				ready = false
				break
			}
		}
		if !ready {
			continue
		}
		r.started = true
		var pending []<-chan struct{}
		for _, g := range append([]schema.GroupVersionResource{r.primary}, watchGVRs(r)...) {
			ch := m.watchable(g)
			select {
			case <-ch:
			default:
				pending = append(pending, ch)
			}
		}
		if len(pending) == 0 {
			m.startReconciler(r)
			continue
		}
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			for _, ch := range pending {
				select {
				case <-ch:
				case <-m.ctx.Done():
					return
				}
			}
			m.mu.Lock()
			defer m.mu.Unlock()
			m.startReconciler(r)
		}()
	}
}

func watchGVRs(r *reconciler) []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, len(r.watches))
	for i, w := range r.watches {
		out[i] = w.gvr
	}
	return out
}

func (m *manager) startReconciler(r *reconciler) {
	ctx := m.ctx
	var synced []cache.InformerSynced
	inf := m.factory.ForResource(r.primary).Informer()
	handler := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if u, ok := obj.(*unstructured.Unstructured); ok {
			r.queue.Add(keyOf(u))
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    handler,
		UpdateFunc: func(_, obj any) { handler(obj) },
		DeleteFunc: handler,
	}); err != nil {
		r.log.Error("watch primary", zap.Error(err))
		return
	}
	synced = append(synced, inf.HasSynced)
	for _, w := range r.watches {
		winf := m.factory.ForResource(w.gvr).Informer()
		synced = append(synced, winf.HasSynced)
		m.trackLive(winf)
		if w.mapFn == nil {
			continue
		}
		mapFn, changed := w.mapFn, w.changed
		h := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				for _, k := range mapFn(u) {
					r.queue.Add(k)
				}
			}
		}
		if _, err := winf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h,
			UpdateFunc: updateHandler(changed, h),
			DeleteFunc: h,
		}); err != nil {
			r.log.Error("watch", zap.String("gvr", w.gvr.String()), zap.Error(err))
			return
		}
	}
	m.factory.Start(ctx.Done())
	r.log.Info("starting")
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer r.queue.ShutDown()
		go func() {
			<-ctx.Done()
			r.queue.ShutDown()
		}()
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			return
		}
		if r.onStart != nil {
			if err := r.onStart(ctx); err != nil {
				r.log.Error("start", zap.Error(err))
			}
		}
		var wg sync.WaitGroup
		for range max(r.workers, 1) {
			wg.Go(func() {
				for m.processNext(ctx, r) {
				}
			})
		}
		wg.Wait()
	}()
}

// trackLive records, for objects created after an informer's initial list,
// the time this process first saw them. Used where a creation order finer
// than creationTimestamp's one second is needed.
func (m *manager) trackLive(inf cache.SharedIndexInformer) {
	if _, loaded := m.tracked.LoadOrStore(inf, true); loaded {
		return
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			if u, ok := obj.(*unstructured.Unstructured); ok && !isInInitialList {
				m.liveSeen.LoadOrStore(u.GetUID(), time.Now())
			}
		},
	})
}

func (m *manager) processNext(ctx context.Context, r *reconciler) bool {
	k, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(k)
	began := time.Now()
	err := r.reconcile(ctx, k)
	r.busy.Add(int64(time.Since(began)))
	r.reconciles.Add(1)
	switch {
	case err == nil:
		r.queue.Forget(k)
		r.conflicts.Forget(k)
	case apierrors.IsConflict(err):
		// Benign: the cache is behind the server. The newer version's
		// watch event requeues the key; the retry only covers writes to
		// objects whose events do not map back to k.
		d := r.conflicts.When(k)
		r.log.Debug("conflict, retrying", zap.Stringer("key", k), zap.Duration("after", d))
		r.queue.AddAfter(k, d)
	case ctx.Err() != nil:
	default:
		r.log.Warn("reconcile failed, retrying", zap.Stringer("key", k), zap.Error(err))
		r.queue.AddRateLimited(k)
	}
	return true
}

// delayLeft starts, on its first call for reconciler r, object obj and
// trigger (a string naming what changed, so a new trigger restarts the
// timer), r's configured delay, and returns how much of it is left (zero
// or less once it has passed, or when r has no delay).
func (m *manager) delayLeft(r *reconciler, obj *unstructured.Unstructured, trigger string) time.Duration {
	d := m.opts.Delay[r.delayKey]
	if d <= 0 {
		return 0
	}
	v, _ := m.firstSeen.LoadOrStore(delayID(r, obj.GetUID(), trigger), time.Now())
	return d - time.Since(v.(time.Time))
}

// delayLeftIfStarted is delayLeft for a delay another reconciler starts:
// zero when it has not started (nothing to wait for).
func (m *manager) delayLeftIfStarted(r *reconciler, uid types.UID, trigger string) time.Duration {
	d := m.opts.Delay[r.delayKey]
	v, ok := m.firstSeen.Load(delayID(r, uid, trigger))
	if d <= 0 || !ok {
		return 0
	}
	return d - time.Since(v.(time.Time))
}

func delayID(r *reconciler, uid types.UID, trigger string) string {
	return r.name + "|" + string(uid) + "|" + trigger
}

// delayed reports whether the reconciler must still wait before acting on
// obj for trigger at all (see delayLeft). When it must wait it schedules
// the key for when the delay ends. Used where the delay stands for work
// whose result other controllers or tests must not see early (for
// example Istio appearing only once the GatewayClass is accepted, case
// B01); elsewhere hold lets the work start at once.
func (m *manager) delayed(r *reconciler, obj *unstructured.Unstructured, trigger string) bool {
	left := m.delayLeft(r, obj, trigger)
	if left <= 0 {
		return false
	}
	r.log.Debug("delaying", zap.Stringer("key", keyOf(obj)), zap.Duration("left", left))
	r.queue.AddAfter(keyOf(obj), left)
	return true
}

// holdKey marks a reconcile context whose status writes are held back.
type holdKey struct{}

// hold is the timing model of a configured delay: the delay stands for the
// whole time the real operator takes from seeing its trigger to writing
// the status that ends a client's wait. The reconcile goes on at once
// with its intrinsic work (creating CRDs, Deployments, Services, generated
// policies, which take real time on the local control plane too), but
// every status write made with the returned context (updateStatus,
// updateStatusStamped) is skipped until the delay since the trigger has
// passed; the key is requeued for that moment, and the reconcile then
// writes the status the live state calls for. So no status, favourable or
// not, appears earlier than it did when the whole reconcile waited, and
// work that fits inside the delay no longer adds to it.
func (m *manager) hold(ctx context.Context, r *reconciler, obj *unstructured.Unstructured, trigger string) context.Context {
	left := m.delayLeft(r, obj, trigger)
	if left <= 0 {
		return ctx
	}
	r.log.Debug("holding status", zap.Stringer("key", keyOf(obj)), zap.Duration("left", left))
	r.queue.AddAfter(keyOf(obj), left)
	return context.WithValue(ctx, holdKey{}, true)
}

// held reports whether ctx holds status writes back (see hold).
func held(ctx context.Context) bool {
	h, _ := ctx.Value(holdKey{}).(bool)
	return h
}

// get returns the cached object, or nil when it does not exist.
func (m *manager) get(g schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	lister := m.factory.ForResource(g).Lister()
	var (
		obj runtime.Object
		err error
	)
	if ns == "" {
		obj, err = lister.Get(name)
	} else {
		obj, err = lister.ByNamespace(ns).Get(name)
	}
	if err != nil {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// Informer indexes (cache.Indexers on the shared informers). The informer
// keeps an index under its store's lock, so an index never disagrees with
// get and list: a lookup by index returns what a scan of list would.
const (
	// indexModelRefs holds "namespace/name" of every spec.modelRefs
	// entry (MaaSAuthPolicy, MaaSSubscription).
	indexModelRefs = "modelRefs"
	// indexPriority holds spec.priority in decimal, "0" when unset
	// (MaaSSubscription).
	indexPriority = "priority"
)

var indexFuncs = map[string]cache.IndexFunc{
	indexModelRefs: modelRefIndex,
	indexPriority:  priorityIndex,
}

// modelRefIndex is the IndexFunc of indexModelRefs.
func modelRefIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	l, _, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "modelRefs")
	refs, _ := l.([]any)
	out := make([]string, 0, len(refs))
	for _, r := range refs {
		rm, _ := r.(map[string]any)
		out = append(out, modelRefKey(mstr(rm, "namespace"), mstr(rm, "name")))
	}
	return out, nil
}

// modelRefKey is the indexModelRefs value of model ns/name.
func modelRefKey(ns, name string) string { return ns + "/" + name }

// priorityIndex is the IndexFunc of indexPriority.
func priorityIndex(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	return []string{priorityKey(u)}, nil
}

// priorityKey is the indexPriority value of a MaaSSubscription: its
// spec.priority as unstructured.NestedInt64 reads it (0 when unset).
func priorityKey(u *unstructured.Unstructured) string {
	p, _, _ := unstructured.NestedInt64(u.Object, "spec", "priority")
	return strconv.FormatInt(p, 10)
}

// byIndex returns the cached objects of g whose index (one of indexFuncs)
// holds value, sorted like list. The index is added to g's informer on
// first use (an informer indexes the objects it already holds then).
func (m *manager) byIndex(g schema.GroupVersionResource, index, value string) []*unstructured.Unstructured {
	inf := m.factory.ForResource(g).Informer()
	id := g.String() + "|" + index
	m.indexMu.Lock()
	if !m.indexed[id] {
		if err := inf.AddIndexers(cache.Indexers{index: indexFuncs[index]}); err != nil {
			m.indexMu.Unlock()
			m.log.Error("add index", zap.String("gvr", g.String()), zap.String("index", index), zap.Error(err))
			return nil
		}
		if m.indexed == nil {
			m.indexed = map[string]bool{}
		}
		m.indexed[id] = true
	}
	m.indexMu.Unlock()
	objs, err := inf.GetIndexer().ByIndex(index, value)
	if err != nil {
		m.log.Error("read index", zap.String("gvr", g.String()), zap.String("index", index), zap.Error(err))
		return nil
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	sortByAge(out)
	return out
}

// unsorted is list without the sort, for callers that only count or
// test each object.
func (m *manager) unsorted(g schema.GroupVersionResource, ns string) []*unstructured.Unstructured {
	lister := m.factory.ForResource(g).Lister()
	var objs []runtime.Object
	if ns == "" {
		objs, _ = lister.List(everything)
	} else {
		objs, _ = lister.ByNamespace(ns).List(everything)
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// list returns the cached objects of g in ns ("" for all namespaces), sorted
// by creation time then name.
func (m *manager) list(g schema.GroupVersionResource, ns string) []*unstructured.Unstructured {
	out := m.unsorted(g, ns)
	sortByAge(out)
	return out
}

// updateStatus writes status to obj through the status subresource when it
// differs from the cached status. The API server validates it against the
// CRD schema.
func (m *manager) updateStatus(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any) error {
	_, err := m.writeStatus(ctx, g, obj, status)
	return err
}

// writeStatus is updateStatus that also returns the object the API server
// holds after the write; nil when nothing was written (the status was
// unchanged, or held back, see hold).
func (m *manager) writeStatus(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any) (*unstructured.Unstructured, error) {
	v, _, _ := unstructured.NestedFieldNoCopy(obj.Object, "status")
	old, _ := v.(map[string]any) // not copied: only compared
	// Most reconciles find the status unchanged: compare the status as
	// built first. Where it holds values of other Go types than the
	// decoded JSON (int for int64, []string for []any) that comparison
	// fails, and the normalized one decides.
	if subsetEqual(status, old) {
		return nil, nil
	}
	norm, err := normalize(status)
	if err != nil {
		return nil, fmt.Errorf("status of %s %s: %w", g.Resource, keyOf(obj), err)
	}
	if subsetEqual(norm, old) {
		return nil, nil
	}
	if held(ctx) {
		m.log.Debug("status held", zap.String("resource", g.Resource), zap.Stringer("key", keyOf(obj)))
		return nil, nil
	}
	u := obj.DeepCopy()
	u.Object["status"] = norm
	// Sent without metadata.managedFields: the API server keeps the live
	// object's when a request has none (k8s.io/apimachinery
	// util/managedfields/internal FieldManager, decodeLiveOrNew), and
	// records this write under the simulator's manager as before. They
	// are 30-45 % of a MaaS object's JSON, which the API server would
	// otherwise decode and check on each of the 11,000 status writes of
	// 1,000 models (issue 16).
	u.SetManagedFields(nil)
	out, err := m.dyn.Resource(g).Namespace(obj.GetNamespace()).UpdateStatus(ctx, u, metaUpdate)
	if err != nil {
		return nil, fmt.Errorf("update status of %s %s: %w", g.Resource, keyOf(obj), err)
	}
	m.log.Debug("status written", zap.String("resource", g.Resource), zap.Stringer("key", keyOf(obj)))
	m.written.Store(g.Resource+"|"+keyOf(out).String(), out)
	return out, nil
}

// fresh returns obj, or the object this process's last status write of it
// returned when that one is newer (the informer has not delivered it yet),
// the way client-go's IntegerResourceVersionMutationCache does: a
// reconcile triggered by another kind's event then does not act on, and
// fail to write over, a status it has already replaced.
func (m *manager) fresh(g schema.GroupVersionResource, obj *unstructured.Unstructured) *unstructured.Unstructured {
	if obj == nil {
		return nil
	}
	id := g.Resource + "|" + keyOf(obj).String()
	v, ok := m.written.Load(id)
	if !ok {
		return obj
	}
	w := v.(*unstructured.Unstructured)
	have, err1 := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	wrote, err2 := strconv.ParseUint(w.GetResourceVersion(), 10, 64)
	if err1 != nil || err2 != nil || w.GetUID() != obj.GetUID() || wrote <= have {
		m.written.CompareAndDelete(id, w)
		return obj
	}
	return w
}

// create creates obj unless it already exists (AlreadyExists is not an
// error). It returns the object the server holds after the call. For a
// custom resource whose CRD was Established moments ago it first waits
// out the API server's create window (see waitCreateWindow).
func (m *manager) create(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	c := m.dyn.Resource(g).Namespace(obj.GetNamespace())
	if err := m.waitCreateWindow(ctx, g); err != nil {
		return nil, err
	}
	out, err := c.Create(ctx, obj, metaCreate)
	if apierrors.IsAlreadyExists(err) && obj.GetName() != "" {
		return c.Get(ctx, obj.GetName(), metaGet)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s %s: %w", g.Resource, keyOf(obj), err)
	}
	m.log.Info("created", zap.String("resource", g.Resource), zap.String("namespace", out.GetNamespace()), zap.String("name", out.GetName()))
	return out, nil
}

// ensureNamespace creates namespace name when it does not exist.
func (m *manager) ensureNamespace(ctx context.Context, name string) error {
	if m.get(gvrNamespace, "", name) != nil {
		return nil
	}
	ns := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": name},
	}}
	_, err := m.create(ctx, gvrNamespace, ns)
	return err
}

// uidOwner returns an ownerReference to obj.
func ownerRef(obj *unstructured.Unstructured, controller bool) map[string]any {
	return map[string]any{
		"apiVersion":         obj.GetAPIVersion(),
		"kind":               obj.GetKind(),
		"name":               obj.GetName(),
		"uid":                string(obj.GetUID()),
		"controller":         controller,
		"blockOwnerDeletion": false,
	}
}

// ownedBy reports whether obj has an ownerReference to uid.
func ownedBy(obj *unstructured.Unstructured, uid types.UID) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == uid {
			return true
		}
	}
	return false
}

// ownerKeys maps an owned object to its owners of kind, in its namespace.
func ownerKeys(kind string) func(*unstructured.Unstructured) []key {
	return func(u *unstructured.Unstructured) []key {
		var out []key
		for _, o := range u.GetOwnerReferences() {
			if o.Kind == kind {
				out = append(out, key{Namespace: u.GetNamespace(), Name: o.Name})
			}
		}
		return out
	}
}

// allOf maps any event to every object of g (namespace ns, "" for all).
func (m *manager) allOf(g schema.GroupVersionResource, sameNamespace bool) func(*unstructured.Unstructured) []key {
	return func(u *unstructured.Unstructured) []key {
		ns := ""
		if sameNamespace {
			ns = u.GetNamespace()
		}
		var out []key
		for _, o := range m.list(g, ns) {
			out = append(out, keyOf(o))
		}
		return out
	}
}

// referencedRefs maps an event on an object with spec.modelRefs (a
// MaaSAuthPolicy or MaaSSubscription) to the MaaSModelRefs it names: the
// only ones whose status (the governance pairing) it can change. With
// updateHandler mapping the old object too, a reference dropped by an
// update is requeued as well.
func referencedRefs(u *unstructured.Unstructured) []key {
	var out []key
	for _, r := range sliceOf(u, "spec", "modelRefs") {
		rm, _ := r.(map[string]any)
		out = append(out, key{Namespace: mstr(rm, "namespace"), Name: mstr(rm, "name")})
	}
	return out
}

// referencing maps an event on model namespace/name to every object of g
// whose spec.modelRefs names it (g is a kind with indexModelRefs); model
// returns that name from the event object ("" maps to every object of g).
func (m *manager) referencing(g schema.GroupVersionResource, model func(*unstructured.Unstructured) (ns, name string)) func(*unstructured.Unstructured) []key {
	all := m.allOf(g, false)
	return func(u *unstructured.Unstructured) []key {
		ns, name := model(u)
		if name == "" {
			return all(u)
		}
		var out []key
		for _, o := range m.byIndex(g, indexModelRefs, modelRefKey(ns, name)) {
			out = append(out, keyOf(o))
		}
		return out
	}
}

// inNamespaces maps an event to every object of g in the event object's
// namespace when filter accepts the event object.
func (m *manager) inNamespaces(g schema.GroupVersionResource, filter func(*unstructured.Unstructured) bool) func(*unstructured.Unstructured) []key {
	all := m.allOf(g, true)
	return func(u *unstructured.Unstructured) []key {
		if filter != nil && !filter(u) {
			return nil
		}
		return all(u)
	}
}

func hasPrefixAny(s string, prefixes ...string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// updateStatusStamped is updateStatus for statuses that carry "last updated"
// timestamps: each field at paths (within status) keeps its old value when
// nothing else changed, and is set to now otherwise. This keeps the
// simulators from rewriting status on every event.
func (m *manager) updateStatusStamped(ctx context.Context, g schema.GroupVersionResource, obj *unstructured.Unstructured, status map[string]any, paths ...[]string) error {
	old, _, _ := unstructured.NestedMap(obj.Object, "status")
	probe, err := normalize(status)
	if err != nil {
		return fmt.Errorf("status of %s %s: %w", g.Resource, keyOf(obj), err)
	}
	for _, p := range paths {
		if v, ok, _ := unstructured.NestedFieldCopy(old, p...); ok {
			_ = unstructured.SetNestedField(probe, v, p...)
		} else {
			unstructured.RemoveNestedField(probe, p...)
		}
	}
	if subsetEqual(probe, old) {
		return nil
	}
	now := nowString()
	for _, p := range paths {
		_ = unstructured.SetNestedField(probe, now, p...)
	}
	return m.updateStatus(ctx, g, obj, probe)
}

// observe makes reconciler r react to events of an optional kind g (one that
// may be served only later) and reports whether g's cache has synced. It
// returns false while g is not served. When the cache has not synced yet
// (or the API server's watch cache of g is not ready, see watchable), key
// k is requeued once it has.
func (m *manager) observe(r *reconciler, g schema.GroupVersionResource, mapFn func(*unstructured.Unstructured) []key, k key) bool {
	return m.observeChanged(r, g, mapFn, nil, k)
}

// observeChanged is observe with an update filter (see watch.changed).
func (m *manager) observeChanged(r *reconciler, g schema.GroupVersionResource, mapFn func(*unstructured.Unstructured) []key, changed func(old, new *unstructured.Unstructured) bool, k key) bool {
	if !m.isServed(g) {
		return false
	}
	select {
	case <-m.watchable(g):
	default:
		if _, waiting := m.observed.LoadOrStore("wait|"+r.name+"|"+g.String()+"|"+k.String(), true); !waiting {
			go func() {
				select {
				case <-m.watchable(g):
					r.queue.Add(k)
				case <-m.ctx.Done():
				}
			}()
		}
		return false
	}
	inf := m.factory.ForResource(g).Informer()
	if _, loaded := m.observed.LoadOrStore(r.name+"|"+g.String(), true); !loaded {
		h := func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if u, ok := obj.(*unstructured.Unstructured); ok {
				for _, k := range mapFn(u) {
					r.queue.Add(k)
				}
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    h,
			UpdateFunc: updateHandler(changed, h),
			DeleteFunc: h,
		})
		m.factory.Start(m.ctx.Done())
	}
	if inf.HasSynced() {
		return true
	}
	go func() {
		if cache.WaitForCacheSync(m.ctx.Done(), inf.HasSynced) {
			r.queue.Add(k)
		}
	}()
	return false
}

// background runs fn in its own goroutine (with the simulators' context)
// unless a call with the same id is still running, and calls done
// (typically a requeue of the caller's key) when fn returns. Used for
// creations that take the API server long (a 2.7 MB CRD, or a custom
// resource inside kube-apiserver's create window, see waitCreateWindow)
// so that one reconcile does not hold back the operator's other work: a
// real operator applies its manifests without waiting for each in turn.
// fn's errors are logged; the requeue retries.
func (m *manager) background(id string, fn func(ctx context.Context) error, done func()) {
	if _, running := m.inFlight.LoadOrStore(id, true); running {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer done()
		defer m.inFlight.Delete(id)
		if err := fn(m.ctx); err != nil && m.ctx.Err() == nil {
			m.log.Warn("background create failed, retrying on requeue", zap.String("id", id), zap.Error(err))
		}
	}()
}

// crdPatterns lists the CRD globs the simulated operators register: those
// the DataScienceCluster's components and MaaS register. (The operator
// bundles' CRDs are created by the real OLM from the generated catalog.)
func (m *manager) crdPatterns() []string {
	var out []string
	for _, c := range dscComponents(m.opts.RHOAIVersion) {
		out = append(out, c.crds...)
	}
	return append(out, maasCRDGlobs35)
}
