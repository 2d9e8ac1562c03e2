package sim

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Two kube-apiserver behaviours for custom resources that a real operator
// meets only when it acts within a second or two of its CRD's
// registration. On a real cluster OLM registers the CRDs long before the
// operator's pod runs; the simulators compress those minutes into the
// configured delays and would otherwise measure the API server's
// start-up pauses instead of the delays (issue #8). Neither workaround
// lets a simulator act before its trigger or write a status earlier.

const (
	// watchCacheWait bounds how long a controller waits for the API
	// server's watch cache of a new kind before it starts its informers
	// anyway (their own retries then take over).
	watchCacheWait = 5 * time.Second

	// crdCreateWindow is how long after a CRD's Established
	// lastTransitionTime kube-apiserver delays every create of its
	// custom resources by crdCreateWindow (apiextensions-apiserver
	// pkg/apiserver/customresource_handler.go, crdHandler.serveResource,
	// case "create": "justCreated ... time.Sleep(2 * time.Second)").
	crdCreateWindow = 2 * time.Second
	// crdCreateMargin covers the time between our check and the API
	// server's own.
	crdCreateMargin = 20 * time.Millisecond
)

// watchable returns a channel that is closed once kube-apiserver accepts a
// streaming watch (watch-list) on g, or after watchCacheWait, or when the
// simulators stop. The first call for g starts the probe (see
// waitWatchCache); later calls share it. Built-in kinds are ready at once.
//
// Why: kube-apiserver builds the watch cache of a custom resource on the
// first request for it and, until the cache has its initial list, answers
// every watch with 429 and "Retry-After: 1" (k8s.io/apiserver
// pkg/storage/cacher/cacher.go, Cacher.Watch via ready.checkAndReadGeneration;
// util.go calculateRetryAfterForUnreadyCache: at least 1 s). client-go's
// REST client honours that header (rest/with_retry.go,
// withRetry.IsNextRetry and Before), so an informer started on a
// just-Established CRD sits one whole second before its first list,
// although the cache is ready milliseconds later.
func (m *manager) watchable(g schema.GroupVersionResource) <-chan struct{} {
	if g.Group == "" || isBuiltin(g) {
		return closedChan
	}
	ch := make(chan struct{})
	v, loaded := m.probes.LoadOrStore(g, ch)
	if loaded {
		return v.(chan struct{})
	}
	go func() {
		defer close(ch)
		m.waitWatchCache(m.ctx, g)
	}()
	return ch
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func isBuiltin(g schema.GroupVersionResource) bool {
	for _, b := range builtinGVRs {
		if b == g {
			return true
		}
	}
	return false
}

// waitWatchCache opens the same cluster-wide watch-list request a
// client-go reflector opens first (sendInitialEvents=true,
// resourceVersionMatch=NotOlderThan), without client-go's Retry-After
// retry, until the API server accepts it (HTTP 200: its watch cache is
// ready), and closes it at once. A 429 (cache not ready) or 404 (the
// API server's own CRD lister has not caught up) is retried after 10 ms,
// growing to 100 ms; it gives up after watchCacheWait or on any other
// error, leaving the retries to the informers.
func (m *manager) waitWatchCache(ctx context.Context, g schema.GroupVersionResource) {
	if ctx == nil {
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, watchCacheWait)
	defer cancel()
	path := "/apis/" + g.Group + "/" + g.Version + "/" + g.Resource
	attempts, refused := 0, 0
	backoff := wait.Backoff{Duration: 10 * time.Millisecond, Factor: 1.5, Cap: 100 * time.Millisecond, Steps: 1 << 20}
	// DelayFunc().Until retries at the cap until ctx ends
	// (ExponentialBackoffWithContext stops when the delay reaches Cap).
	err := backoff.DelayFunc().Until(ctx, true, false, func(ctx context.Context) (bool, error) {
		attempts++
		body, err := m.kube.CoreV1().RESTClient().Get().AbsPath(path).
			Param("watch", "true").
			Param("sendInitialEvents", "true").
			Param("resourceVersionMatch", "NotOlderThan").
			Param("allowWatchBookmarks", "true").
			Param("timeoutSeconds", "1").
			SetHeader("Accept", "application/json").
			MaxRetries(0).
			Stream(ctx)
		switch {
		case err == nil:
			_ = body.Close()
			return true, nil
		case apierrors.IsTooManyRequests(err), apierrors.IsNotFound(err):
			refused++
			return false, nil
		default:
			return false, err
		}
	})
	lg := m.log.With(zap.String("gvr", g.String()), zap.Int("attempts", attempts),
		zap.Int("refused", refused), zap.Duration("took", time.Since(start)))
	if err != nil && ctx.Err() == nil {
		lg.Debug("watch cache probe failed; informers retry themselves", zap.Error(err))
		return
	}
	if err != nil {
		lg.Debug("watch cache not ready; informers retry themselves", zap.Error(err))
		return
	}
	lg.Debug("watch cache ready")
}

// waitCreateWindow waits, before a create of a custom resource of g, until
// kube-apiserver no longer treats g's CRD as just Established, so the
// create is not held 2 s inside the API server.
//
// Why: crdHandler.serveResource (apiextensions-apiserver
// pkg/apiserver/customresource_handler.go) sleeps a fixed 2 s in every
// create that arrives while time.Since(Established.lastTransitionTime) <
// 2 s, for HA API servers that may not have seen the CRD yet. The
// lastTransitionTime it reads has whole seconds (metav1.Time drops
// nanoseconds in JSON and protobuf), so the window ends 1 to 2 s after the
// CRD really became Established, and a create at its last moment still
// waits the full 2 s. Waiting here for the window's end instead puts the
// object in place no later than before (the create is never sent before
// the simulator decided to create it) and at most 2 s sooner; a real
// operator, started by OLM well after its CRDs, meets neither wait.
// Errors: the context ending.
func (m *manager) waitCreateWindow(ctx context.Context, g schema.GroupVersionResource) error {
	if g.Group == "" || isBuiltin(g) {
		return nil
	}
	name := g.Resource + "." + g.Group
	crd := m.get(gvrCRD, "", name)
	if !conditionTrue(crd, "Established") {
		// The cache may lag the API server; ask it.
		live, err := m.dyn.Resource(gvrCRD).Get(ctx, name, metaGet)
		if err != nil {
			return nil // not a CRD, or gone: nothing to wait for
		}
		crd = live
	}
	left := createWindowLeft(crd, time.Now())
	if left <= 0 {
		return nil
	}
	m.log.Debug("waiting for the crd create window", zap.String("crd", name), zap.Duration("left", left))
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return fmt.Errorf("wait for crd %s create window: %w", name, context.Cause(ctx))
	case <-t.C:
		return nil
	}
}

// createWindowLeft returns how long after now kube-apiserver still delays
// creates of crd's custom resources (zero or less: not at all, also when
// crd is not Established).
func createWindowLeft(crd *unstructured.Unstructured, now time.Time) time.Duration {
	c := findCondition(crd, "Established")
	if c == nil || c["status"] != "True" {
		return 0
	}
	s, _ := c["lastTransitionTime"].(string)
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return 0
	}
	return t.Add(crdCreateWindow + crdCreateMargin).Sub(now)
}
