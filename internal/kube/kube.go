// Package kube is maasctl's Kubernetes plumbing: clients built from
// kubeconfig flags, a REST mapper that re-discovers when a CRD appears, and
// server-side apply with maasctl's field manager and strict field validation.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/maasctl/maasctl/internal/names"
	"github.com/maasctl/maasctl/steps/event"
)

// FieldManager is the server-side apply field manager of every write maasctl
// makes (https://kubernetes.io/docs/reference/using-api/server-side-apply/).
const FieldManager = names.FieldManager

// Clients bundles the clients one maasctl run uses. Create with New.
type Clients struct {
	Config  *rest.Config
	Dynamic dynamic.Interface
	Kube    kubernetes.Interface
	// Metadata reads objects as PartialObjectMetadata (metadata only):
	// see GetMetadata.
	Metadata  metadata.Interface
	Discovery discovery.CachedDiscoveryInterface
	Mapper    *restmapper.DeferredDiscoveryRESTMapper
	// Requests counts the HTTP requests sent through these clients.
	Requests *RequestCounter

	// view is the open read view (BeginView), shared by the transports of
	// the clients above.
	view *viewSlot
	log  *zap.Logger

	// missMu guards missed: kinds and resources (lookup's keys) that were
	// still unknown right after a discovery reset, with the time of that
	// reset (see lookup).
	missMu sync.Mutex
	missed map[string]time.Time
	// resetMu serializes the discovery re-reads of Mapping; refreshed is
	// when the last one finished and refreshedGen the value of resetGen
	// when it began. ResetMapper bumps resetGen without waiting for a
	// re-read in flight: a re-read that began before it is not fresh.
	resetMu      sync.Mutex
	firstLookup  sync.Once
	refreshed    time.Time
	refreshedGen uint64
	resetGen     atomic.Uint64

	// seenMu guards seen: per object (seenKey), what the API server's
	// last answer to this Clients' server-side apply or Get of it said.
	seenMu sync.Mutex
	seen   map[string]SeenState

	// learnMu guards learned: the REST mappings of CRDs the run saw
	// Established (LearnCRD), by kind and by resource, until ResetMapper.
	learnMu sync.RWMutex
	learned learnedMappings

	// shared holds what Shared made, by key.
	shared sync.Map
}

// Shared returns the value stored under key for these Clients, making it
// with mk on first use (once, even when called concurrently): state that
// other packages keep per Clients, such as the CRD feed of the waiters.
// Keys should be unexported types of the calling package, as for
// context values.
func (c *Clients) Shared(key any, mk func() any) any {
	v, _ := c.shared.LoadOrStore(key, &sharedOnce{})
	o := v.(*sharedOnce)
	o.once.Do(func() { o.v = mk() })
	return o.v
}

type sharedOnce struct {
	once sync.Once
	v    any
}

// SeenState is what the API server's answer to a server-side apply
// (Clients.Apply) or a read (Clients.Get, Clients.Saw) said of the object
// at that moment: its metadata.uid and whether an ownerReference with
// controller=true names its owner.
type SeenState struct {
	UID   string
	Owned bool
}

func seenKey(gvk schema.GroupVersionKind, ns, name string) string {
	return gvk.Group + "/" + gvk.Kind + "/" + ns + "/" + name
}

// LastSeen returns what the answer to this Clients' last Apply (not a dry
// run) or successful Get of obj (by group, kind, namespace and name), or
// the last Saw of it, said of it; ok is false when none was made. It
// reads nothing: the run record uses it after a step instead of a GET of
// each object the step wrote or read (issue 16). An object deleted since
// still has its state here; the record reads objects again on every later
// run that needs them.
func (c *Clients) LastSeen(obj *unstructured.Unstructured) (SeenState, bool) {
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	st, ok := c.seen[seenKey(obj.GroupVersionKind(), obj.GetNamespace(), obj.GetName())]
	return st, ok
}

// Saw keeps what a read of obj other than Get (an item of a LIST) said
// of it, for LastSeen. obj must be as the API server answered (kind,
// apiVersion and uid set).
func (c *Clients) Saw(obj *unstructured.Unstructured) {
	if obj != nil && obj.GetUID() != "" {
		c.keepSeen(obj)
	}
}

func (c *Clients) keepSeen(out *unstructured.Unstructured) {
	st := SeenState{UID: string(out.GetUID())}
	for _, ref := range out.GetOwnerReferences() {
		if ref.Controller != nil && *ref.Controller {
			st.Owned = true
		}
	}
	c.seenMu.Lock()
	defer c.seenMu.Unlock()
	if c.seen == nil {
		c.seen = map[string]SeenState{}
	}
	c.seen[seenKey(out.GroupVersionKind(), out.GetNamespace(), out.GetName())] = st
}

// NotServedTTL is how long Mapping trusts that a kind is not served after
// a discovery reset did not find it. Within it, asking again costs no
// request: on a cluster without, say, packages.operators.coreos.com every
// lookup used to re-read discovery (2 requests each). ResetMapper ends it
// at once, so a CRD that became Established is found right away.
const NotServedTTL = 2 * time.Second

// FreshDiscovery is how long discovery read by Mapping (first, or again
// after a miss) answers for every kind: a kind missing from it is reported
// not served without another read. Lookups of several unserved kinds at
// once (a first run reads a dozen kinds whose CRDs do not exist yet) cost
// one discovery read instead of one each, and a kind a cluster does not
// serve at all (PackageManifest without OLM's package server) costs no
// re-read right after the run's first. ResetMapper ends it at once.
const FreshDiscovery = time.Second

// ResetMapper drops the cached discovery and every remembered miss: call it
// after CRDs became Established.
func (c *Clients) ResetMapper() {
	c.learnMu.Lock()
	c.learned = learnedMappings{}
	c.learnMu.Unlock()
	c.missMu.Lock()
	c.missed = nil
	c.missMu.Unlock()
	c.resetGen.Add(1)
	c.Mapper.Reset()
}

// ForgetMisses drops the remembered misses (NotServedTTL) and makes the
// next lookup of a kind missing from the cached discovery re-read it,
// without dropping the cached discovery itself as ResetMapper does: call
// it when kinds may have become served that no wait taught the Clients
// (LearnCRD), such as after an operator's CSV succeeded (its owned CRDs
// were learned; a dependency's or one the operator registers later was
// not). Kinds already in the cached discovery, or learned, cost no
// request.
func (c *Clients) ForgetMisses() {
	c.missMu.Lock()
	c.missed = nil
	c.missMu.Unlock()
	c.resetGen.Add(1)
}

// RequestCounter counts API requests by kind. Reads are GET/LIST/WATCH; writes
// are every other method except dry-run requests. Every attempt counts: a
// request retried after a transient failure (see RetryPolicy) counts once
// per attempt, and once in Retries per retry.
type RequestCounter struct {
	reads, writes, retries atomic.Int64
}

// Retries returns the number of retries after transient failures so far.
func (c *RequestCounter) Retries() int64 { return c.retries.Load() }

// Reads returns the number of read requests sent so far.
func (c *RequestCounter) Reads() int64 { return c.reads.Load() }

// Writes returns the number of write requests sent so far.
func (c *RequestCounter) Writes() int64 { return c.writes.Load() }

// countingTransport counts every request and, when log is enabled at
// debug level, logs one "api request" line per attempt: method, path,
// query (labelSelector, watch, dryRun and the like; never a body or a
// header, so never a credential), status code and milliseconds. A watch is
// logged when its response headers arrive.
type countingTransport struct {
	next    http.RoundTripper
	counter *RequestCounter
	log     *zap.Logger
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		t.counter.reads.Add(1)
	default:
		if req.URL.Query().Get("dryRun") == "" {
			t.counter.writes.Add(1)
		}
	}
	if t.log == nil || !t.log.Core().Enabled(zap.DebugLevel) {
		return t.next.RoundTrip(req)
	}
	t0 := time.Now()
	resp, err := t.next.RoundTrip(req)
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	fields := []zap.Field{zap.String("method", req.Method), zap.String("path", req.URL.Path),
		zap.String("query", req.URL.RawQuery), zap.Int("status", status), zap.Int64("ms", time.Since(t0).Milliseconds())}
	if tag := RequestTag(req.Context()); tag != "" {
		fields = append(fields, zap.String("tag", tag))
	}
	if err != nil {
		fields = append(fields, zap.Error(err))
	}
	t.log.Debug("api request", fields...)
	return resp, err
}

type requestTagKey struct{}

// WithRequestTag returns ctx tagged with tag: the "api request" debug line
// of every request sent with it carries the field tag (the Runner tags a
// step's requests with the step's ID, its bookkeeping with "record" and
// "checkpoint"), so that a run's requests can be broken down by who sent
// them. The tag changes nothing else.
func WithRequestTag(ctx context.Context, tag string) context.Context {
	return context.WithValue(ctx, requestTagKey{}, tag)
}

// RequestTag returns the tag WithRequestTag put on ctx, or "".
func RequestTag(ctx context.Context) string {
	s, _ := ctx.Value(requestTagKey{}).(string)
	return s
}

// Options configures NewWithOptions. The zero value is what New uses.
type Options struct {
	// Log receives one debug line per retried request (method, path,
	// reason, attempt, wait) and one when the retries of a request are
	// exhausted. Default: no logging.
	Log *zap.Logger
	// Retry bounds retries of transient failures; zero fields take the
	// values of DefaultRetryPolicy.
	Retry RetryPolicy
}

// New builds Clients from a REST config with the default Options.
func New(cfg *rest.Config) (*Clients, error) { return NewWithOptions(cfg, Options{}) }

// NewWithOptions builds Clients from a REST config. The config is copied;
// a config without a QPS gets no client-side rate limit (QPS -1): one run
// issues several requests per managed object, and at client-go's token
// bucket (formerly 100/s here) a 1,000-model install spent most of its time
// throttled (issue 16). The API server's priority and fairness
// (flowcontrol.apiserver.k8s.io) queues what it cannot take, and the steps
// bound their own concurrency (observeWorkers, applyWorkers). Every request goes through a bounded retry of transient failures
// (o.Retry) and is counted (Clients.Requests). Watches that break are
// re-established by the informers of the waiters (client-go reflectors).
func NewWithOptions(cfg *rest.Config, o Options) (*Clients, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	counter := &RequestCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{next: rt, counter: counter, log: o.Log}
	})
	// Wrapped after the counter, so it is the outer layer: each attempt is
	// counted.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &retryTransport{next: rt, policy: o.Retry.withDefaults(), log: o.Log, counter: counter}
	})
	// Outermost: a read the view answers is neither sent, retried nor
	// counted.
	slot := new(viewSlot)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &viewTransport{next: rt, slot: slot}
	})
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	md, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	disc := memory.NewMemCacheClient(kc.Discovery())
	return &Clients{
		Config:    cfg,
		Dynamic:   dyn,
		Kube:      kc,
		Metadata:  md,
		Discovery: disc,
		Mapper:    restmapper.NewDeferredDiscoveryRESTMapper(disc),
		Requests:  counter,
		view:      slot,
		log:       o.Log,
	}, nil
}

// Mapping returns the REST mapping of gvk. When the kind is not known it
// invalidates the discovery cache once and asks again, so a CRD registered
// after the run started is found (case B03: "no matches for kind"); a kind
// still unknown after that is reported not served without a new discovery
// read for NotServedTTL (or until ResetMapper).
func (c *Clients) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	if m, ok := c.learnedMapping(gvk); ok {
		return m, nil
	}
	var m *meta.RESTMapping
	err := c.lookup("kind "+gvk.String(), func() (err error) {
		m, err = c.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		return err
	})
	if err != nil {
		if meta.IsNoMatchError(err) || discovery.IsGroupDiscoveryFailedError(err) {
			return nil, &NotServedError{GVK: gvk, Err: err}
		}
		return nil, err
	}
	return m, nil
}

// Served reports whether the API server serves resource gr (for a CRD:
// its plural and group) in at least one version, from discovery. The API
// server lists a CustomResourceDefinition's versions in discovery only once
// it is Established (apiextensions-apiserver, DiscoveryController.sync skips
// every CRD without Established=True), so for a CRD this is "Established,
// and served" without reading the CRD object, whose schema can be
// megabytes: a converged re-run checks the two dozen CRDs of its operators
// with the discovery it read for its REST mappings (no request). A resource
// missing from the cached discovery is looked up once more after a
// discovery re-read, as Mapping does, so one Established during the run is
// found. Errors other than "not served" are discovery read errors.
func (c *Clients) Served(gr schema.GroupResource) (bool, error) {
	if c.learnedResource(gr) {
		return true, nil
	}
	err := c.lookup("resource "+gr.String(), func() error {
		rs, err := c.Mapper.ResourcesFor(gr.WithVersion(""))
		if err == nil && len(rs) == 0 {
			err = &meta.NoResourceMatchError{PartialResource: gr.WithVersion("")}
		}
		return err
	})
	if meta.IsNoMatchError(err) || discovery.IsGroupDiscoveryFailedError(err) {
		return false, nil
	}
	return err == nil, err
}

// CRDServed is Served for a CRD named plural.group.
func (c *Clients) CRDServed(name string) (bool, error) {
	plural, group, _ := strings.Cut(name, ".")
	return c.Served(schema.GroupResource{Group: group, Resource: plural})
}

// lookup runs find against the cached discovery; when it reports no match
// (or a failed group discovery) it re-reads discovery once, unless that
// happened within FreshDiscovery since the last ResetMapper, and runs find
// again. A key still not found is answered "not found" without a re-read
// for NotServedTTL (or until ResetMapper).
func (c *Clients) lookup(key string, find func() error) error {
	c.firstLookup.Do(func() {
		// The first find reads discovery (the mapper is lazy): it is as
		// fresh as a re-read.
		c.resetMu.Lock()
		c.refreshed, c.refreshedGen = time.Now(), c.resetGen.Load()
		c.resetMu.Unlock()
	})
	err := find()
	if err == nil || (!meta.IsNoMatchError(err) && !discovery.IsGroupDiscoveryFailedError(err)) {
		return err
	}
	c.missMu.Lock()
	at, recent := c.missed[key]
	recent = recent && time.Since(at) < NotServedTTL
	c.missMu.Unlock()
	if recent {
		return err
	}
	c.resetMu.Lock()
	gen := c.resetGen.Load()
	stale := c.refreshedGen != gen || time.Since(c.refreshed) >= FreshDiscovery
	if stale {
		if c.log != nil {
			c.log.Debug("discovery re-read", zap.String("missing", key))
		}
		c.Mapper.Reset()
	}
	err = find()
	if stale {
		c.refreshed, c.refreshedGen = time.Now(), gen
	}
	c.resetMu.Unlock()
	if err != nil {
		c.missMu.Lock()
		if c.missed == nil {
			c.missed = map[string]time.Time{}
		}
		c.missed[key] = time.Now()
		c.missMu.Unlock()
	}
	return err
}

// NotServedError says that the API server does not serve a kind (yet).
type NotServedError struct {
	GVK schema.GroupVersionKind
	Err error
}

func (e *NotServedError) Error() string {
	return fmt.Sprintf("%s is not served by the API server (is its operator installed?)", e.GVK.GroupKind().String()+"/"+e.GVK.Version)
}

func (e *NotServedError) Unwrap() error { return e.Err }

// IsNotServed reports whether err is a NotServedError.
func IsNotServed(err error) bool {
	var ns *NotServedError
	return errors.As(err, &ns)
}

// Resource returns the dynamic client for obj's kind and namespace.
func (c *Clients) Resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, *meta.RESTMapping, error) {
	m, err := c.Mapping(gvk)
	if err != nil {
		return nil, nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.Dynamic.Resource(m.Resource).Namespace(namespace), m, nil
	}
	return c.Dynamic.Resource(m.Resource), m, nil
}

// GetMetadata reads only the metadata of the object gvk namespace/name
// (labels, annotations, owners; no spec or status): a GET that asks for
// PartialObjectMetadata (Accept application/json;as=PartialObjectMetadata;
// g=meta.k8s.io;v=v1, client-go's metadata client), which the API server
// answers without the object's body: for objects whose body is large and
// not needed (a CustomResourceDefinition's schemas, say). It returns nil and
// no error when the object does not exist. A read view never answers it
// (jsonAccepted: what a view keeps is whole objects), so it is always sent.
func (c *Clients) GetMetadata(ctx context.Context, gvk schema.GroupVersionKind, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	m, err := c.Mapping(gvk)
	if err != nil {
		return nil, err
	}
	ri := c.Metadata.Resource(m.Resource)
	var obj *metav1.PartialObjectMetadata
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		obj, err = ri.Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	} else {
		obj, err = ri.Get(ctx, name, metav1.GetOptions{})
	}
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return obj, err
}

// Get reads the live copy of obj (by kind, namespace and name).
func (c *Clients) Get(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	ri, _, err := c.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	out, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if err == nil {
		c.Saw(out)
	}
	return out, err
}

// Apply server-side applies obj with field manager maasctl, force (maasctl
// owns the fields it sets) and fieldValidation=Strict, so a field the CRD
// does not define is an error instead of being pruned silently.
func (c *Clients) Apply(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return c.apply(ctx, obj, false)
}

// DryRunApply is Apply with dryRun=All: the server validates and defaults the
// object and returns what would be stored, changing nothing.
func (c *Clients) DryRunApply(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return c.apply(ctx, obj, true)
}

func (c *Clients) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (*unstructured.Unstructured, error) {
	if IsPlatformOwnedCRD(obj) {
		// Refused before any request: a dry run is a write to admission
		// too, and OpenShift's policy denies it the same way.
		return nil, fmt.Errorf("apply %s: %w", Describe(obj), ErrPlatformOwnedCRD)
	}
	ri, _, err := c.Resource(obj.GroupVersionKind(), obj.GetNamespace())
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", Describe(obj), err)
	}
	force := true
	opts := metav1.PatchOptions{FieldManager: FieldManager, Force: &force, FieldValidation: "Strict"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	out, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
	if err != nil {
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			// Not retried (RetryPolicy never retries 403): the same
			// request gets the same answer from the policy.
			return nil, fmt.Errorf("apply %s: forbidden by admission policy, not retried (the cluster's policy, not a transient error): %w", Describe(obj), err)
		}
		return nil, fmt.Errorf("apply %s: %w", Describe(obj), err)
	}
	if !dryRun && out != nil && out.GetUID() != "" {
		c.keepSeen(out)
	}
	return out, nil
}

// platformOwnedCRDGroups are the API groups whose CRDs the platform owns:
// on OpenShift 4.19+ the ingress operator manages the Gateway API CRDs and
// a ValidatingAdmissionPolicy denies every other writer
// (openshift/cluster-ingress-operator#1192, case N01).
var platformOwnedCRDGroups = []string{"gateway.networking.k8s.io"}

// ErrPlatformOwnedCRD is the error of an apply (or a delete by maasctl's
// uninstall) of a CRD in platformOwnedCRDGroups: maasctl never writes
// them, and no request is sent.
var ErrPlatformOwnedCRD error = &event.Problem{
	Message: "the CRDs of gateway.networking.k8s.io belong to the platform (the OpenShift 4.19+ ingress operator owns them and an admission policy denies other writers): maasctl never creates, updates or deletes them",
	Fix:     "check their version with 'maasctl preflight' (check gateway-api-crds)",
}

// IsPlatformOwnedCRD reports whether obj is a CustomResourceDefinition of
// a platform-owned group (by spec.group, else by its name's suffix).
func IsPlatformOwnedCRD(obj *unstructured.Unstructured) bool {
	gvk := obj.GroupVersionKind()
	if gvk.Group != "apiextensions.k8s.io" || gvk.Kind != "CustomResourceDefinition" {
		return false
	}
	if g, _, _ := unstructured.NestedString(obj.Object, "spec", "group"); g != "" {
		return slices.Contains(platformOwnedCRDGroups, g)
	}
	return IsPlatformOwnedCRDName(obj.GetName())
}

// IsPlatformOwnedCRDName reports whether a CRD name (plural.group) is of a
// platform-owned group.
func IsPlatformOwnedCRDName(name string) bool {
	_, group, ok := strings.Cut(name, ".")
	return ok && slices.Contains(platformOwnedCRDGroups, group)
}

// Describe names an object as Kind namespace/name (or Kind name).
func Describe(obj *unstructured.Unstructured) string {
	if obj.GetNamespace() == "" {
		return obj.GetKind() + " " + obj.GetName()
	}
	return obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
}
