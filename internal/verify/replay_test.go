package verify

import (
	"context"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// countingReader counts the reads that reach the Reader it wraps, by API
// group ("core" for the core group), and calls onRead, when set, before
// each (one call at a time).
type countingReader struct {
	Reader
	mu     sync.Mutex
	n      map[string]int
	onRead func(schema.GroupVersionKind)
}

func (c *countingReader) count(gvk schema.GroupVersionKind) {
	g := gvk.Group
	if g == "" {
		g = "core"
	}
	c.mu.Lock()
	c.n[g]++
	if c.onRead != nil {
		c.onRead(gvk)
	}
	c.mu.Unlock()
}

func (c *countingReader) Get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	c.count(gvk)
	return c.Reader.Get(ctx, gvk, ns, name)
}

func (c *countingReader) List(ctx context.Context, gvk schema.GroupVersionKind, ns, sel string) ([]*unstructured.Unstructured, error) {
	c.count(gvk)
	return c.Reader.List(ctx, gvk, ns, sel)
}

func (c *countingReader) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func checkResult(t *testing.T, s *State, code string) Result {
	t.Helper()
	for _, c := range LiveChecks(s) {
		if c.Code == code {
			return c.Result
		}
	}
	t.Fatalf("no check %s", code)
	return ""
}

// TestReplayRereadsOnlyFreshKinds is the install verify's settle wait on a
// Replay: before Freeze every read is sent; after it, only the fresh kinds
// (here kuadrant.io, where the generated TokenRateLimitPolicy lives) are
// read again, so the lagging check sees the policy appear while a change
// to any other kind (the Route removed) is not seen and not read.
func TestReplayRereadsOnlyFreshKinds(t *testing.T) {
	ctx := context.Background()
	inner := healthyReader(t)
	mns := "llm-coding-assistant"
	trlp, err := inner.Get(ctx, TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder")
	if err != nil {
		t.Fatal(err)
	}
	inner.Remove(TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder")
	cr := &countingReader{Reader: inner, n: map[string]int{}}
	rp := &Replay{Reader: cr, Fresh: func(g schema.GroupVersionKind) bool { return g.Group == "kuadrant.io" }}

	s, err := Snapshot(ctx, rp, inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	if got := checkResult(t, s, CodeTokenLimitEnf); got != Fail {
		t.Fatalf("first pass without the TokenRateLimitPolicy: %s %s, want FAIL", CodeTokenLimitEnf, got)
	}
	first := cr.take()
	if first["kuadrant.io"] == 0 || first["route.openshift.io"] == 0 || first["core"] == 0 {
		t.Fatalf("first pass reads by group %v: want kuadrant.io, route.openshift.io and core reads", first)
	}

	rp.Freeze()
	inner.Put(trlp)
	inner.Remove(RouteGVK, "openshift-ingress", "maas-default-gateway-https")
	s, err = Snapshot(ctx, rp, inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	if got := checkResult(t, s, CodeTokenLimitEnf); got != Pass {
		t.Errorf("after Freeze the fresh TokenRateLimitPolicy was not read again: %s %s, want pass", CodeTokenLimitEnf, got)
	}
	if got := checkResult(t, s, CodeRoute); got != Pass {
		t.Errorf("after Freeze the Route's kept answer was not used: %s %s, want pass", CodeRoute, got)
	}
	second := cr.take()
	if second["kuadrant.io"] != first["kuadrant.io"] {
		t.Errorf("kuadrant.io reads after Freeze: %d, want %d (every one again)", second["kuadrant.io"], first["kuadrant.io"])
	}
	for g, n := range second {
		if g != "kuadrant.io" {
			t.Errorf("after Freeze %d reads of %s were sent; want none (answered from the kept reads)", n, g)
		}
	}
}

// TestReplayKeepsErrors: a kept NotFound stays NotFound after Freeze,
// kept objects are answered again, and a read never kept is sent.
func TestReplayKeepsErrors(t *testing.T) {
	ctx := context.Background()
	inner := healthyReader(t)
	rp := &Replay{Reader: inner}
	if _, err := rp.Get(ctx, RouteGVK, "openshift-ingress", "other"); !apierrors.IsNotFound(err) {
		t.Fatalf("missing Route: %v, want NotFound", err)
	}
	o, err := rp.Get(ctx, RouteGVK, "openshift-ingress", "maas-default-gateway-https")
	if err != nil {
		t.Fatal(err)
	}
	rp.Freeze()
	again := o.DeepCopy()
	again.SetName("other")
	inner.Put(again)
	changed := o.DeepCopy()
	changed.SetLabels(map[string]string{"changed": "in-the-cluster"})
	inner.Put(changed)
	if _, err := rp.Get(ctx, RouteGVK, "openshift-ingress", "other"); !apierrors.IsNotFound(err) {
		t.Errorf("kept NotFound after Freeze: %v, want NotFound", err)
	}
	o2, err := rp.Get(ctx, RouteGVK, "openshift-ingress", "maas-default-gateway-https")
	if err != nil {
		t.Fatal(err)
	}
	if o2.GetLabels()["changed"] != "" {
		t.Errorf("after Freeze the Route was read again: labels %v, want the kept answer's", o2.GetLabels())
	}
	// A read never kept is sent after Freeze, and kept.
	l, err := rp.List(ctx, RouteGVK, "openshift-ingress", "")
	if err != nil || len(l) != 2 {
		t.Fatalf("first List after Freeze: %d objects, %v; want the 2 Routes", len(l), err)
	}
	inner.Remove(RouteGVK, "openshift-ingress", "other")
	if l, err = rp.List(ctx, RouteGVK, "openshift-ingress", ""); err != nil || len(l) != 2 {
		t.Errorf("kept List: %d objects, %v; want the 2 kept", len(l), err)
	}
}

// TestReplayKeepsNotServedForFreshKinds: a fresh kind the API server did
// not serve before Freeze is answered "not served" again without a read.
func TestReplayKeepsNotServedForFreshKinds(t *testing.T) {
	ctx := context.Background()
	envoy := schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"}
	inner := healthyReader(t)
	inner.NotServed[envoy.GroupKind()] = true
	cr := &countingReader{Reader: inner, n: map[string]int{}}
	rp := &Replay{Reader: cr, Fresh: func(g schema.GroupVersionKind) bool { return g.Group == envoy.Group }}
	if _, err := rp.Get(ctx, envoy, "openshift-ingress", "kuadrant-maas-default-gateway"); !kube.IsNotServed(err) {
		t.Fatalf("EnvoyFilter not served: %v, want a not-served error", err)
	}
	rp.Freeze()
	if _, err := rp.Get(ctx, envoy, "openshift-ingress", "kuadrant-maas-default-gateway"); !kube.IsNotServed(err) {
		t.Errorf("after Freeze: %v, want the kept not-served error", err)
	}
	if n := cr.take()["networking.istio.io"]; n != 1 {
		t.Errorf("%d reads of the EnvoyFilter sent, want 1 (the first)", n)
	}
}
