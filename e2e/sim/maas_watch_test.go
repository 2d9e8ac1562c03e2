package sim

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestObjectChanged: the MaaS watch filter admits what controller-runtime's
// Generation/Label/AnnotationChangedPredicate admit and the update that
// starts a deletion, and drops status writes and resyncs.
func TestObjectChanged(t *testing.T) {
	base := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "r", "generation": int64(1), "labels": map[string]any{"a": "1"}},
		"status":   map[string]any{"parents": []any{}},
	}}
	edit := func(f func(u *unstructured.Unstructured)) *unstructured.Unstructured {
		u := base.DeepCopy()
		f(u)
		return u
	}
	for _, tc := range []struct {
		name string
		new  *unstructured.Unstructured
		want bool
	}{
		{"resync", base.DeepCopy(), false},
		{"status write", edit(func(u *unstructured.Unstructured) { u.Object["status"] = map[string]any{"parents": []any{"x"}} }), false},
		{"spec change", edit(func(u *unstructured.Unstructured) { u.SetGeneration(2) }), true},
		{"label change", edit(func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{"a": "2"}) }), true},
		{"annotation added", edit(func(u *unstructured.Unstructured) { u.SetAnnotations(map[string]string{"x": "y"}) }), true},
		{"deletion starts", edit(func(u *unstructured.Unstructured) { now := metav1.Now(); u.SetDeletionTimestamp(&now) }), true},
	} {
		if got := objectChanged(base, tc.new); got != tc.want {
			t.Errorf("%s: objectChanged = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestMaaSWatchesIgnoreStatusWrites: maas-controller v0.2.1 does not
// reconcile on a status write of an HTTPRoute or Gateway, only on its
// creation, deletion and metadata/spec changes (issue 18, measured;
// controller_watches_int_test.go upstream). Each MaaS reconciler's watch on
// those kinds, as registerMaaS configures it, drives a probe reconciler on
// the local API server: a status write must not enqueue, a label change
// must.
func TestMaaSWatchesIgnoreStatusWrites(t *testing.T) {
	c := startCluster(t, Options{})
	cfgMgr, err := newManager(c.cfg, Options{Logger: zaptest.NewLogger(t), RHOAIVersion: RHOAI35})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cfgMgr.wait() })
	cfgMgr.ctx = ctx
	registerMaaS(cfgMgr)
	type probe struct {
		owner string
		w     watch
	}
	var probes []probe
	for _, r := range cfgMgr.reconcilers {
		for _, w := range r.watches {
			if w.gvr == gvrHTTPRoute || w.gvr == gvrGateway {
				probes = append(probes, probe{r.name, w})
			}
		}
	}
	if len(probes) < 4 {
		t.Fatalf("found %d HTTPRoute/Gateway watches of the MaaS reconcilers, want the ref's two, the auth policy's and the subscription's", len(probes))
	}
	ns := "maas-watch-probe"
	c.apply(t, gvrNamespace, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
	for i, p := range probes {
		t.Run(fmt.Sprintf("%s %s", p.owner, p.w.gvr.Resource), func(t *testing.T) {
			name := fmt.Sprintf("probe-%d", i)
			var hits atomic.Int64
			r := &reconciler{
				name: "probe/" + name, primary: gvrNamespace,
				watches: []watch{{gvr: p.w.gvr, changed: p.w.changed, mapFn: func(u *unstructured.Unstructured) []key {
					if u.GetName() == name {
						return []key{{Name: name}}
					}
					return nil
				}}},
				reconcile: func(_ context.Context, k key) error {
					if k.Name == name {
						hits.Add(1)
					}
					return nil
				},
			}
			cfgMgr.add(r)
			cfgMgr.startReconciler(r)
			settled := func() int64 {
				for last := int64(-1); ; {
					time.Sleep(1500 * time.Millisecond)
					n := hits.Load()
					if n == last {
						return n
					}
					last = n
				}
			}
			obj := probeObject(p.w.gvr, ns, name)
			c.apply(t, p.w.gvr, obj)
			created := settled()
			if created == 0 {
				t.Fatalf("creating the %s did not reconcile", p.w.gvr.Resource)
			}
			live, err := c.dyn.Resource(p.w.gvr).Namespace(ns).Get(t.Context(), name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			live.Object["status"] = probeStatus(p.w.gvr, live.GetGeneration())
			if _, err := c.dyn.Resource(p.w.gvr).Namespace(ns).UpdateStatus(t.Context(), live, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			if n := settled(); n != created {
				t.Errorf("a status write of the %s reconciled (%d reconciles, %d before); the real controller ignores it", p.w.gvr.Resource, n, created)
			}
			before := hits.Load()
			if _, err := c.dyn.Resource(p.w.gvr).Namespace(ns).Patch(t.Context(), name, "application/merge-patch+json",
				[]byte(`{"metadata":{"labels":{"probe":"relabelled"}}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			if n := settled(); n <= before {
				t.Errorf("a label change of the %s did not reconcile", p.w.gvr.Resource)
			}
		})
	}
}

// probeObject is a minimal valid object of g (HTTPRoute or Gateway) that no
// simulated gateway controller acts on.
func probeObject(g schema.GroupVersionResource, ns, name string) map[string]any {
	meta := map[string]any{"name": name, "namespace": ns}
	if g == gvrHTTPRoute {
		return map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute", "metadata": meta,
			"spec": map[string]any{"hostnames": []any{"probe.example.com"}}}
	}
	return map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": meta,
		"spec": map[string]any{"gatewayClassName": "probe-class-nobody-serves", "listeners": []any{map[string]any{
			"name": "http", "port": int64(80), "protocol": "HTTP"}}}}
}

func probeStatus(g schema.GroupVersionResource, gen int64) map[string]any {
	c := map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "probe",
		"lastTransitionTime": nowString(), "observedGeneration": gen}
	if g == gvrHTTPRoute {
		return map[string]any{"parents": []any{map[string]any{
			"parentRef": map[string]any{"name": "probe-gw"}, "controllerName": "example.com/probe",
			"conditions": []any{c}}}}
	}
	return map[string]any{"conditions": []any{c}}
}
