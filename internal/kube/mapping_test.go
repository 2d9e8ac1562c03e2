package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// discovery read within FreshDiscovery of the run's first one, none after
// it while the run has neither written nor watched, then one reset after
// a write, not one per lookup, until NotServedTTL passes or ResetMapper is
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
	// Past NotServedTTL (the misses above are remembered that long) but
	// with no write or watch since the read, discovery still answers.
	time.Sleep(time.Until(read.Add(NotServedTTL + 50*time.Millisecond)))
	if got := lookups(3); got != 0 {
		t.Errorf("3 lookups of an unserved kind with no write since the discovery read read it %d times, want 0", got)
	}
	// After a write (refused by this server, and still sent) and past
	// NotServedTTL, the first miss resets discovery once (2 requests: /api
	// and /apis); the next two are answered from the remembered miss.
	sendWrite(t, c)
	time.Sleep(NotServedTTL + 50*time.Millisecond)
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
// (FreshDiscovery; none right after the first read, none while the run
// neither wrote nor watched), and ResetMapper makes the next miss read
// again.
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
	if got := miss("Gateway"); got != 0 {
		t.Errorf("a lookup of an unserved kind with no write or watch since the discovery read read it %d times, want 0", got)
	}
	startWatch(t, c)
	kinds := []string{"MaaSModelRef", "Cluster", "Route"}
	if got := miss(kinds...); got != 2 {
		t.Errorf("%d lookups of different unserved kinds read discovery %d times, want 2 (one reset)", len(kinds), got)
	}
	c.ResetMapper()
	if miss("Other") == 0 {
		t.Errorf("after ResetMapper a miss was answered without reading discovery")
	}
}

// sendWrite sends one write (a ConfigMap create the discovery server refuses)
// and checks that it counts as a change.
func sendWrite(t *testing.T, c *Clients) {
	t.Helper()
	before := c.Requests.Changes()
	_, _ = c.Kube.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
	if c.Requests.Changes() == before {
		t.Fatal("a create did not count as a change")
	}
	// A dry-run write changes nothing.
	before = c.Requests.Changes()
	_, _ = c.Kube.CoreV1().ConfigMaps("default").Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if c.Requests.Changes() != before {
		t.Fatal("a dry-run create counted as a change")
	}
}

// startWatch starts one watch (refused by the discovery server) and checks that
// it counts as a change, and that a plain read does not.
func startWatch(t *testing.T, c *Clients) {
	t.Helper()
	before := c.Requests.Changes()
	_, _ = c.Kube.CoreV1().ConfigMaps("default").Get(context.Background(), "x", metav1.GetOptions{})
	if c.Requests.Changes() != before {
		t.Fatal("a get counted as a change")
	}
	if w, err := c.Kube.CoreV1().ConfigMaps("default").Watch(context.Background(), metav1.ListOptions{}); err == nil {
		w.Stop()
	}
	if c.Requests.Changes() == before {
		t.Fatal("a watch did not count as a change")
	}
}
