package e2e

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// pathCounter counts the requests of a rest.Config by kind of request.
type pathCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	// crdWatches are WATCH requests (watch=true, or a watch-list) on the
	// CRD collection; discovery are GETs of /api and /apis.
	crdWatches, discovery int
}

func (p *pathCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	q := req.URL.Query()
	p.mu.Lock()
	switch {
	case req.URL.Path == "/api" || req.URL.Path == "/apis":
		p.discovery++
	case req.URL.Path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" && (q.Get("watch") == "true" || q.Get("watch") == "1"):
		p.crdWatches++
	}
	p.mu.Unlock()
	return p.next.RoundTrip(req)
}

func (p *pathCounter) counts() (crdWatches, discovery int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crdWatches, p.discovery
}

// widgetCRD is a namespaced CRD of kind Widget in group name+".example.com"
// serving v1.
func widgetCRD(group, kind, plural string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": "Namespaced",
			"names": map[string]any{"kind": kind, "plural": plural, "singular": strings.ToLower(kind), "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
}

// TestCRDWaitsShareOneWatch runs, on a real kube-apiserver, the CRD waits
// of a first install at once and one after another: waits for CRDs to be
// Established (For, All) and a wait for objects of a kind not served yet
// (its CRD created after the wait began). They share the Clients' one
// watch of the CRD collection (waiters.crdFeed, issue 16: a first install
// opened six), and the kinds of the CRDs they saw Established need no
// discovery re-read (kube.Clients.LearnCRD): a create of a Widget right
// after the waits reads no /api or /apis.
func TestCRDWaitsShareOneWatch(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, _ := bareAPIServer(t, ctx)
	cfg := rest.CopyConfig(env.RESTConfig())
	pc := &pathCounter{}
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { pc.next = rt; return pc })
	c, err := kube.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crds := c.Dynamic.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	// The first discovery read, as every run makes one.
	if _, err := c.Mapping(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}); err != nil {
		t.Fatal(err)
	}
	_, disc0 := pc.counts()

	gadget := schema.GroupVersionKind{Group: "gadgets.example.com", Version: "v1", Kind: "Gadget"}
	errs := make(chan error, 3)
	// Three waits at once: two CRDs by name (one grouped wait) and one
	// for an object of a kind no CRD serves yet.
	go func() {
		errs <- waiters.All(ctx, c, waiters.CRDEstablished("widgets.widgets.example.com"), waiters.CRDEstablished("gizmos.gizmos.example.com"))
	}()
	go func() {
		_, err := waiters.For(ctx, c, waiters.CRDEstablished("widgets.widgets.example.com"))
		errs <- err
	}()
	go func() {
		_, err := waiters.For(ctx, c, waiters.Target{GVK: gadget, Namespace: "default", Name: "g1"})
		errs <- err
	}()
	time.Sleep(500 * time.Millisecond) // the waits have started and see no CRD
	for _, crd := range []*unstructured.Unstructured{
		widgetCRD("widgets.example.com", "Widget", "widgets"),
		widgetCRD("gizmos.example.com", "Gizmo", "gizmos"),
		widgetCRD("gadgets.example.com", "Gadget", "gadgets"),
	} {
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The Gadget wait needs its object once the kind is served.
	for {
		ri, _, err := c.Resource(gadget, "default")
		if err == nil {
			g := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "gadgets.example.com/v1", "kind": "Gadget", "metadata": map[string]any{"name": "g1"}}}
			if _, err = ri.Create(ctx, g, metav1.CreateOptions{}); err == nil {
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("create Gadget g1: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// A later wait joins the feed (it lingers) and sees the CRD at once.
	if _, err := waiters.For(ctx, c, waiters.CRDEstablished("gizmos.gizmos.example.com")); err != nil {
		t.Fatal(err)
	}
	watches, disc := pc.counts()
	if watches != 1 {
		t.Errorf("the CRD waits opened %d watches of the CRD collection, want 1 shared", watches)
	}

	// Widget and Gizmo were learned from their Established CRDs: their
	// objects are created without a discovery read.
	before := disc
	for _, k := range []struct{ gvk schema.GroupVersionKind }{
		{schema.GroupVersionKind{Group: "widgets.example.com", Version: "v1", Kind: "Widget"}},
		{schema.GroupVersionKind{Group: "gizmos.example.com", Version: "v1", Kind: "Gizmo"}},
	} {
		ri, m, err := c.Resource(k.gvk, "default")
		if err != nil {
			t.Fatalf("%s: %v", k.gvk.Kind, err)
		}
		if m.Resource.Resource != strings.ToLower(k.gvk.Kind)+"s" {
			t.Errorf("%s maps to resource %q", k.gvk.Kind, m.Resource.Resource)
		}
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.gvk.GroupVersion().String(), "kind": k.gvk.Kind, "metadata": map[string]any{"name": "one"}}}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", k.gvk.Kind, err)
		}
	}
	if ok, err := c.CRDServed("gizmos.gizmos.example.com"); err != nil || !ok {
		t.Errorf("CRDServed(gizmos) = %v, %v after its wait", ok, err)
	}
	if _, disc = pc.counts(); disc != before {
		t.Errorf("%d discovery reads after the waits, want none (learned from the CRDs)", disc-before)
	}
	t.Logf("discovery reads: %d before the waits, %d during them, %d after", disc0, before-disc0, disc-before)

	// ResetMapper forgets what was learned: a deleted CRD's kind is then
	// reported not served.
	if err := crds.Delete(ctx, "gizmos.gizmos.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waiters.Gone(ctx, c, waiters.CRDGVK, "", "gizmos.gizmos.example.com"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.ResetMapper()
		_, err := c.Mapping(schema.GroupVersionKind{Group: "gizmos.example.com", Version: "v1", Kind: "Gizmo"})
		if kube.IsNotServed(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Gizmo still mapped 30 s after its CRD was deleted and the mapper reset: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
