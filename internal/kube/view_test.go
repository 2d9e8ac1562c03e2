package kube

import (
	"net/http"
	"net/url"
	"testing"
)

// TestParseViewPath: which request paths a read view may answer (objects
// and collections) and which it always sends (discovery, subresources).
func TestParseViewPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		want viewPath
		ok   bool
	}{
		{"/api/v1/namespaces/ns/secrets/s", viewPath{prefix: "/api/v1", ns: "ns", resource: "secrets", name: "s", namespaced: true}, true},
		{"/api/v1/namespaces/ns/pods", viewPath{prefix: "/api/v1", ns: "ns", resource: "pods", namespaced: true}, true},
		{"/api/v1/namespaces/maasctl", viewPath{prefix: "/api/v1", resource: "namespaces", name: "maasctl"}, true},
		{"/api/v1/namespaces", viewPath{prefix: "/api/v1", resource: "namespaces"}, true},
		{"/apis/apps/v1/namespaces/ns/deployments/d", viewPath{prefix: "/apis/apps/v1", group: "apps", ns: "ns", resource: "deployments", name: "d", namespaced: true}, true},
		{"/apis/operators.coreos.com/v1alpha1/subscriptions", viewPath{prefix: "/apis/operators.coreos.com/v1alpha1", group: "operators.coreos.com", resource: "subscriptions"}, true},
		{"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/a.b.io", viewPath{prefix: "/apis/apiextensions.k8s.io/v1", group: "apiextensions.k8s.io", resource: "customresourcedefinitions", name: "a.b.io"}, true},
		{"/api/v1/namespaces/ns/status", viewPath{}, false},
		{"/api/v1/namespaces/ns/finalize", viewPath{}, false},
		{"/apis/apps/v1/namespaces/ns/deployments/d/scale", viewPath{}, false},
		{"/api/v1/namespaces/ns/pods/p/log", viewPath{}, false},
		{"/api", viewPath{}, false},
		{"/api/v1", viewPath{}, false},
		{"/apis", viewPath{}, false},
		{"/apis/apps/v1", viewPath{}, false},
		{"/version", viewPath{}, false},
	} {
		got, ok := parseViewPath(tc.path)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseViewPath(%q) = %+v, %v; want %+v, %v", tc.path, got, ok, tc.want, tc.ok)
		}
	}
}

// TestEndsView: every write ends a read view but dry runs, access and
// token reviews and Leases.
func TestEndsView(t *testing.T) {
	for _, tc := range []struct {
		method, path, query string
		ends                bool
	}{
		{http.MethodPatch, "/apis/kuadrant.io/v1beta1/namespaces/k/kuadrants/kuadrant", "fieldManager=maasctl", true},
		{http.MethodPut, "/api/v1/namespaces/maasctl/configmaps/maasctl-checkpoints", "", true},
		{http.MethodDelete, "/api/v1/namespaces/x", "", true},
		{http.MethodPost, "/api/v1/namespaces/x/secrets", "", true},
		{http.MethodPatch, "/apis/apps/v1/namespaces/x/deployments/d", "dryRun=All&fieldManager=maasctl", false},
		{http.MethodPost, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "", false},
		{http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "", false},
		{http.MethodPut, "/apis/coordination.k8s.io/v1/namespaces/maasctl/leases/maasctl-run", "", false},
	} {
		req := &http.Request{Method: tc.method, URL: &url.URL{Path: tc.path, RawQuery: tc.query}}
		if got := endsView(req); got != tc.ends {
			t.Errorf("%s %s?%s ends the view: %v, want %v", tc.method, tc.path, tc.query, got, tc.ends)
		}
	}
}
