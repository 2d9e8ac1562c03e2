package kube

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
)

// TestN01NeverAppliesGatewayAPICRDs is case N01's "force a bundled CRD
// into the plan" variant: an apply or dry-run apply of a Gateway API CRD
// (named by spec.group, or by its name alone) fails at once with
// ErrPlatformOwnedCRD and sends no request at all, while a CRD of another
// group does reach the server.
func TestN01NeverAppliesGatewayAPICRDs(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	crd := func(name, group string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": map[string]any{"name": name}}}
		if group != "" {
			o.Object["spec"] = map[string]any{"group": group}
		}
		return o
	}
	before := hits.Load()
	for _, o := range []*unstructured.Unstructured{
		crd("httproutes.gateway.networking.k8s.io", "gateway.networking.k8s.io"),
		crd("tlsroutes.gateway.networking.k8s.io", ""),
		crd("renamed", "gateway.networking.k8s.io"),
	} {
		if _, err := c.Apply(context.Background(), o); !errors.Is(err, ErrPlatformOwnedCRD) {
			t.Errorf("Apply %s: %v, want ErrPlatformOwnedCRD", o.GetName(), err)
		}
		if _, err := c.DryRunApply(context.Background(), o); !errors.Is(err, ErrPlatformOwnedCRD) {
			t.Errorf("DryRunApply %s: %v, want ErrPlatformOwnedCRD", o.GetName(), err)
		}
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("%d requests for platform-owned CRDs, want 0", n)
	}
	// The x-k8s.io experimental group is not restricted
	// (openshift/cluster-ingress-operator#1446), nor is any other group.
	for _, o := range []*unstructured.Unstructured{crd("maasmodelrefs.maas.opendatahub.io", "maas.opendatahub.io"), crd("xlistenersets.gateway.networking.x-k8s.io", "gateway.networking.x-k8s.io")} {
		if IsPlatformOwnedCRD(o) {
			t.Errorf("%s reported platform-owned", o.GetName())
		}
		if _, err := c.Apply(context.Background(), o); errors.Is(err, ErrPlatformOwnedCRD) {
			t.Errorf("Apply %s refused as platform-owned", o.GetName())
		}
	}
	if hits.Load() == before {
		t.Errorf("an ordinary CRD apply sent no request: the guard is not selective")
	}
	for name, want := range map[string]bool{"gateways.gateway.networking.k8s.io": true, "gateways.gateway.networking.x-k8s.io": false, "gateway.networking.k8s.io": false, "kuadrants.kuadrant.io": false} {
		if got := IsPlatformOwnedCRDName(name); got != want {
			t.Errorf("IsPlatformOwnedCRDName(%s) = %v, want %v", name, got, want)
		}
	}
}
