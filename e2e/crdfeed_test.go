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

// pathCounter counts the requests of a rest.Config by kind of request:
// counted wraps each transport the config builds (cfg.Wrap(p.counted)).
type pathCounter struct {
	mu sync.Mutex
	// crdWatches are WATCH requests (watch=true, or a watch-list) on the
	// CRD collection; discovery are GETs of /api and /apis.
	crdWatches, discovery int
}

func (p *pathCounter) counted(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		p.mu.Lock()
		switch {
		case req.URL.Path == "/api" || req.URL.Path == "/apis":
			p.discovery++
		case req.URL.Path == "/apis/apiextensions.k8s.io/v1/customresourcedefinitions" && (q.Get("watch") == "true" || q.Get("watch") == "1"):
			p.crdWatches++
		}
		p.mu.Unlock()
		return next.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (p *pathCounter) counts() (crdWatches, discovery int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crdWatches, p.discovery
}

// widgetCRD is a CRD of kind in group serving v1, namespaced unless
// cluster.
func widgetCRD(group, kind, plural string, cluster ...bool) *unstructured.Unstructured {
	scope := "Namespaced"
	if len(cluster) > 0 && cluster[0] {
		scope = "Cluster"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group, "scope": scope,
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
// opened six). Then kube.Clients.LearnCRD alone: Clients that read no
// discovery learn a namespaced and a cluster-scoped CRD from the objects
// and create their objects with no /api or /apis read. Last, ResetMapper
// forgets what was learned: a deleted CRD's kind is then not served.
func TestCRDWaitsShareOneWatch(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, _ := bareAPIServer(t, ctx)
	cfg := rest.CopyConfig(env.RESTConfig())
	pc := &pathCounter{}
	cfg.Wrap(pc.counted)
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

	t.Logf("discovery reads: %d before the waits, %d during and after them", disc0, disc-disc0)

	// LearnCRD alone, on Clients that have read no discovery: the
	// mappings of a namespaced and a cluster-scoped CRD, in the kind and
	// plural the API server accepted, serve creates without /api or /apis.
	if _, err := crds.Create(ctx, widgetCRD("things.example.com", "Thing", "things", true), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := waiters.For(ctx, c, waiters.CRDEstablished("things.things.example.com")); err != nil {
		t.Fatal(err)
	}
	cfg2 := rest.CopyConfig(env.RESTConfig())
	pc2 := &pathCounter{}
	cfg2.Wrap(pc2.counted)
	c2, err := kube.New(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		crd, ns string
		gvk     schema.GroupVersionKind
		scope   string
	}{
		{"widgets.widgets.example.com", "default", schema.GroupVersionKind{Group: "widgets.example.com", Version: "v1", Kind: "Widget"}, "namespace"},
		{"things.things.example.com", "", schema.GroupVersionKind{Group: "things.example.com", Version: "v1", Kind: "Thing"}, "root"},
	} {
		crd, err := crds.Get(ctx, k.crd, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !c2.LearnCRD(crd) {
			t.Fatalf("LearnCRD(%s) learned nothing from an Established CRD", k.crd)
		}
		ri, m, err := c2.Resource(k.gvk, k.ns)
		if err != nil {
			t.Fatalf("%s: %v", k.gvk.Kind, err)
		}
		if m.Resource.Resource != strings.ToLower(k.gvk.Kind)+"s" || string(m.Scope.Name()) != k.scope {
			t.Errorf("%s maps to resource %q scope %q, want %ss scope %s", k.gvk.Kind, m.Resource.Resource, m.Scope.Name(), strings.ToLower(k.gvk.Kind), k.scope)
		}
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": k.gvk.GroupVersion().String(), "kind": k.gvk.Kind, "metadata": map[string]any{"name": "two"}}}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", k.gvk.Kind, err)
		}
	}
	if ok, err := c2.CRDServed("things.things.example.com"); err != nil || !ok {
		t.Errorf("CRDServed(things) = %v, %v after LearnCRD", ok, err)
	}
	if _, d := pc2.counts(); d != 0 {
		t.Errorf("%d discovery reads on Clients that learned the kinds from their CRDs, want 0", d)
	}

	// ResetMapper forgets what was learned: a deleted CRD's kind is then
	// reported not served.
	if err := crds.Delete(ctx, "gizmos.gizmos.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := waiters.Gone(ctx, c, waiters.CRDGVK, "", "gizmos.gizmos.example.com"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		c.ResetMapper()
		_, err := c.Mapping(schema.GroupVersionKind{Group: "gizmos.example.com", Version: "v1", Kind: "Gizmo"})
		if kube.IsNotServed(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Gizmo still mapped 2 min after its CRD was deleted and the mapper reset: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
