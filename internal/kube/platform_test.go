package kube

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestN01AdmissionPolicyDenialIsNotRetried: a write an admission policy
// denies (403 from a ValidatingAdmissionPolicy, as OpenShift's for Gateway
// API CRDs) is sent once and reported as such, never retried.
func TestN01AdmissionPolicyDenialIsNotRetried(t *testing.T) {
	var patches atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api":
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
		case r.URL.Path == "/apis":
			_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"example.com","versions":[{"groupVersion":"example.com/v1","version":"v1"}],"preferredVersion":{"groupVersion":"example.com/v1","version":"v1"}}]}`))
		case r.URL.Path == "/apis/example.com/v1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","apiVersion":"v1","groupVersion":"example.com/v1","resources":[{"name":"widgets","namespaced":false,"kind":"Widget","verbs":["get","patch"]}]}`))
		case r.Method == http.MethodPatch:
			patches.Add(1)
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"widgets.example.com \"w\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'p' denied request: no"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w"}}}
	_, err = c.Apply(context.Background(), w)
	if err == nil || !strings.Contains(err.Error(), "forbidden by admission policy, not retried") {
		t.Fatalf("Apply: %v, want the admission policy named as not retried", err)
	}
	if n := patches.Load(); n != 1 {
		t.Errorf("%d PATCH requests, want exactly 1", n)
	}
}
