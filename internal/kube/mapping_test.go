package kube

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// discoveryServer serves legacy discovery for the core group only and
// counts the discovery requests (/api, /apis).
func discoveryServer(t *testing.T, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	write := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api":
			hits.Add(1)
			write(w, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case "/apis":
			hits.Add(1)
			write(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}})
		case "/api/v1":
			write(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
				APIResources: []metav1.APIResource{{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: []string{"get"}}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestMappingRemembersMisses: a kind the server does not serve costs one
// discovery reset, not one per lookup, until NotServedTTL passes or
// ResetMapper is called; a served kind is still resolved.
func TestMappingRemembersMisses(t *testing.T) {
	var hits atomic.Int64
	srv := discoveryServer(t, &hits)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	pm := schema.GroupVersionKind{Group: "packages.operators.coreos.com", Version: "v1", Kind: "PackageManifest"}
	if _, err := c.Mapping(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}); err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	first := hits.Load()
	for i := range 3 {
		if _, err := c.Mapping(pm); !IsNotServed(err) {
			t.Fatalf("lookup %d of PackageManifest: err %v, want not served", i, err)
		}
	}
	// The first miss resets discovery once (2 requests: /api and /apis);
	// the next two are answered from the remembered miss.
	if got := hits.Load() - first; got != 2 {
		t.Errorf("3 lookups of an unserved kind read discovery %d times, want 2 (one reset)", got)
	}
	c.ResetMapper()
	before := hits.Load()
	if _, err := c.Mapping(pm); !IsNotServed(err) {
		t.Fatalf("after ResetMapper: err %v, want not served", err)
	}
	if hits.Load() == before {
		t.Errorf("after ResetMapper the miss was still remembered: no discovery read")
	}
}

// TestMappingSharesFreshDiscovery: lookups of several different unserved
// kinds right after one another cost one discovery read between them
// (FreshDiscovery), and ResetMapper makes the next miss read again.
func TestMappingSharesFreshDiscovery(t *testing.T) {
	var hits atomic.Int64
	srv := discoveryServer(t, &hits)
	c, err := New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Mapping(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}); err != nil {
		t.Fatalf("ConfigMap: %v", err)
	}
	first := hits.Load()
	kinds := []string{"Kuadrant", "DataScienceCluster", "MaaSModelRef", "Cluster"}
	for _, k := range kinds {
		gvk := schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: k}
		if _, err := c.Mapping(gvk); !IsNotServed(err) {
			t.Fatalf("%s: err %v, want not served", k, err)
		}
	}
	if got := hits.Load() - first; got != 2 {
		t.Errorf("%d lookups of different unserved kinds read discovery %d times, want 2 (one reset)", len(kinds), got)
	}
	c.ResetMapper()
	before := hits.Load()
	if _, err := c.Mapping(schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: "Other"}); !IsNotServed(err) {
		t.Fatalf("after ResetMapper: err %v, want not served", err)
	}
	if hits.Load() == before {
		t.Errorf("after ResetMapper a miss was answered without reading discovery")
	}
}
