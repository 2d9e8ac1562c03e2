package kube

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

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

// TestMappingRemembersMisses: a kind the server does not serve costs no
// discovery read within FreshDiscovery of the run's first one, then one
// reset, not one per lookup, until NotServedTTL passes or ResetMapper is
// called; a served kind is still resolved.
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
	read := time.Now()
	first := hits.Load()
	if first == 0 {
		t.Fatal("the first lookup read no discovery")
	}
	lookups := func(n int) int64 {
		before := hits.Load()
		for i := range n {
			if _, err := c.Mapping(pm); !IsNotServed(err) {
				t.Fatalf("lookup %d of PackageManifest: err %v, want not served", i, err)
			}
		}
		return hits.Load() - before
	}
	// Discovery just read answers.
	if got := lookups(3); got != 0 && time.Since(read) < FreshDiscovery {
		t.Errorf("3 lookups of an unserved kind right after the first discovery read it %d times, want 0", got)
	}
	// Past NotServedTTL (the misses above are remembered that long) the
	// first miss resets discovery once (2 requests: /api and /apis); the
	// next two are answered from the remembered miss.
	time.Sleep(time.Until(read.Add(NotServedTTL + 50*time.Millisecond)))
	if got := lookups(3); got != 2 {
		t.Errorf("3 lookups of an unserved kind read discovery %d times, want 2 (one reset)", got)
	}
	c.ResetMapper()
	if lookups(1) == 0 {
		t.Errorf("after ResetMapper the miss was still remembered: no discovery read")
	}
}

// TestMappingSharesFreshDiscovery: lookups of several different unserved
// kinds right after one another cost one discovery read between them
// (FreshDiscovery; none right after the first read), and ResetMapper makes
// the next miss read again.
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
	read := time.Now()
	miss := func(kinds ...string) int64 {
		before := hits.Load()
		for _, k := range kinds {
			gvk := schema.GroupVersionKind{Group: "example.io", Version: "v1", Kind: k}
			if _, err := c.Mapping(gvk); !IsNotServed(err) {
				t.Fatalf("%s: err %v, want not served", k, err)
			}
		}
		return hits.Load() - before
	}
	if got := miss("Kuadrant", "DataScienceCluster"); got != 0 && time.Since(read) < FreshDiscovery {
		t.Errorf("2 lookups of unserved kinds right after the first discovery read it %d times, want 0", got)
	}
	time.Sleep(time.Until(read.Add(FreshDiscovery + 50*time.Millisecond)))
	kinds := []string{"MaaSModelRef", "Cluster", "Gateway", "Route"}
	if got := miss(kinds...); got != 2 {
		t.Errorf("%d lookups of different unserved kinds read discovery %d times, want 2 (one reset)", len(kinds), got)
	}
	c.ResetMapper()
	if miss("Other") == 0 {
		t.Errorf("after ResetMapper a miss was answered without reading discovery")
	}
}
