package kube

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCountingReviews (a new user's trial, session 42): preflight's
// SelfSubjectAccessReviews are POSTs that store nothing, so a run that
// failed preflight counts 0 writes to managed objects; a POST that creates
// an object, a PATCH and a DELETE are writes, a dry run is not.
func TestCountingReviews(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	c := &RequestCounter{}
	tr := &countingTransport{next: http.DefaultTransport, counter: c}
	for _, r := range []struct{ method, path string }{
		{"POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"},
		{"POST", "/apis/authorization.k8s.io/v1/namespaces/ns/localsubjectaccessreviews"},
		{"POST", "/apis/authentication.k8s.io/v1/tokenreviews"},
		{"GET", "/api/v1/namespaces/ns/configmaps/x"},
		{"POST", "/api/v1/namespaces/ns/configmaps"},
		{"PATCH", "/api/v1/namespaces/ns/configmaps/x"},
		{"PATCH", "/api/v1/namespaces/ns/configmaps/x?dryRun=All"},
		{"DELETE", "/api/v1/namespaces/ns/configmaps/x"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if c.Reads() != 4 || c.Writes() != 3 {
		t.Errorf("reads %d, writes %d; want 4 (a GET, three reviews) and 3 (POST, PATCH, DELETE of a ConfigMap)", c.Reads(), c.Writes())
	}
}
