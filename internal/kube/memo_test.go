package kube

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// memoServer answers ConfigMap GETs with the current value of cm (404 for
// "missing", 500 for "broken") and counts the requests per path; a PATCH
// of cm changes its data. A GET of "slow" waits until release is closed.
type memoServer struct {
	mu      sync.Mutex
	value   string
	n       map[string]int
	slow    chan struct{} // closed by the handler when "slow" is requested
	release chan struct{}
}

func (s *memoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.n[r.Method+" "+r.URL.Path]++
	v := s.value
	s.mu.Unlock()
	name := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPatch:
		s.mu.Lock()
		s.value += "+"
		v = s.value
		s.mu.Unlock()
	case name == "missing":
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		return
	case name == "broken":
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"InternalError","code":500}`)
		return
	case name == "slow":
		close(s.slow)
		<-s.release
	}
	fmt.Fprintf(w, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":%q,"namespace":"ns"},"data":{"v":%q}}`, name, v)
}

func (s *memoServer) count(path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[path]
}

// TestReadMemo: marked reads are answered from the memo (200 and 404, not
// 500; unmarked reads always go out), a hit is not counted as a request,
// a write from any context clears the memo, and a read in flight across a
// write is not kept.
func TestReadMemo(t *testing.T) {
	s := &memoServer{value: "a", n: map[string]int{}, slow: make(chan struct{}), release: make(chan struct{})}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewWithOptions(&rest.Config{Host: srv.URL}, Options{Retry: RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	memo := NewReadMemo()
	c.SetMemo(memo)
	cms := c.Kube.CoreV1().ConfigMaps("ns")
	ctx := context.Background()
	mctx := Memoized(ctx)
	get := func(ctx context.Context, name string) (string, error) {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		return cm.Data["v"], nil
	}
	const cmPath = "GET /api/v1/namespaces/ns/configmaps/cm"

	for range 3 {
		if v, err := get(mctx, "cm"); err != nil || v != "a" {
			t.Fatalf("memoized get: %q, %v", v, err)
		}
	}
	if n := s.count(cmPath); n != 1 {
		t.Errorf("3 memoized gets made %d requests, want 1", n)
	}
	if hits, reads := memo.Hits(), c.Requests.Reads(); hits != 2 || reads != 1 {
		t.Errorf("hits %d, counted reads %d; want 2, 1", hits, reads)
	}
	if _, err := get(ctx, "cm"); err != nil || s.count(cmPath) != 2 {
		t.Errorf("an unmarked get was answered from the memo (%d requests, %v)", s.count(cmPath), err)
	}

	for range 2 {
		if _, err := get(mctx, "missing"); !apierrors.IsNotFound(err) {
			t.Fatalf("missing: %v, want NotFound", err)
		}
		if _, err := get(mctx, "broken"); err == nil {
			t.Fatal("broken: no error")
		}
	}
	if n := s.count("GET /api/v1/namespaces/ns/configmaps/missing"); n != 1 {
		t.Errorf("a 404 was read %d times, want once", n)
	}
	if n := s.count("GET /api/v1/namespaces/ns/configmaps/broken"); n != 2 {
		t.Errorf("a 500 was read %d times, want every time (2)", n)
	}

	// A write, from an unmarked context, clears the memo.
	if _, err := cms.Patch(ctx, "cm", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, err := get(mctx, "cm"); err != nil || v != "a+" {
		t.Errorf("after a write: %q, %v; want the new value a+", v, err)
	}
	// A Lease write (the run lock's renewal) keeps the answers.
	before := s.count(cmPath)
	if err := c.Kube.CoordinationV1().RESTClient().Patch("application/merge-patch+json").AbsPath("/apis/coordination.k8s.io/v1/namespaces/ns/leases/l").Body([]byte(`{}`)).Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(mctx, "cm"); err != nil || s.count(cmPath) != before {
		t.Errorf("a Lease write dropped an answer (%d requests, was %d; %v)", s.count(cmPath), before, err)
	}
	// A dry-run write changes nothing and keeps the memo.
	if _, err := cms.Patch(ctx, "cm", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	before = s.count(cmPath)
	if _, err := get(mctx, "cm"); err != nil || s.count(cmPath) != before {
		t.Errorf("a dry run cleared the memo (%d requests, was %d; %v)", s.count(cmPath), before, err)
	}

	// A read in flight while a write clears the memo is not kept.
	done := make(chan error, 1)
	go func() { _, err := get(mctx, "slow"); done <- err }()
	<-s.slow
	if _, err := cms.Patch(ctx, "cm", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	close(s.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s.slow = make(chan struct{})
	go func() { <-s.slow }()
	if _, err := get(mctx, "slow"); err != nil {
		t.Fatal(err)
	}
	if n := s.count("GET /api/v1/namespaces/ns/configmaps/slow"); n != 2 {
		t.Errorf("the read in flight across a write was kept (%d requests, want 2)", n)
	}

	// A typed client (protobuf first) and the dynamic client (JSON) read
	// the same URL with other Accept headers: each gets its own answer.
	before = s.count("GET /api/v1/namespaces/ns/configmaps/other")
	if _, err := get(mctx, "other"); err != nil {
		t.Fatal(err)
	}
	u, err := c.Dynamic.Resource(corev1GVR("configmaps")).Namespace("ns").Get(mctx, "other", metav1.GetOptions{})
	if err != nil || u.GetName() != "other" {
		t.Fatalf("dynamic get after a typed one: %v, %v", u, err)
	}
	if n := s.count("GET /api/v1/namespaces/ns/configmaps/other") - before; n != 2 {
		t.Errorf("typed and dynamic reads of one URL made %d requests, want 2 (one per Accept header)", n)
	}

	// Without a memo every read goes out.
	c.SetMemo(nil)
	before = s.count(cmPath)
	for range 2 {
		if _, err := get(mctx, "cm"); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.count(cmPath) - before; n != 2 {
		t.Errorf("without a memo: %d requests for 2 gets", n)
	}
}

func corev1GVR(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Version: "v1", Resource: resource}
}
