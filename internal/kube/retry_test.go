package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
)

// fault is one scripted answer of the fake API server.
type fault string

const (
	ok            fault = "200"
	err500        fault = "500"
	err429        fault = "429"
	err503        fault = "503"
	conflict      fault = "409"
	alreadyExists fault = "409-exists"
	notFound      fault = "404"
	drop          fault = "drop"
)

// scripted is a fake API server that answers the n-th request with
// script[n] (the last entry repeats) and counts requests by method.
type scripted struct {
	mu      sync.Mutex
	script  []fault
	n       int
	methods map[string]int
	bodies  []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.script[min(s.n, len(s.script)-1)]
	s.n++
	s.methods[r.Method]++
	var b strings.Builder
	if r.Body != nil {
		buf := make([]byte, 4096)
		for {
			k, err := r.Body.Read(buf)
			b.Write(buf[:k])
			if err != nil {
				break
			}
		}
	}
	s.bodies = append(s.bodies, b.String())
	s.mu.Unlock()
	status := func(code int, reason metav1.StatusReason) {
		w.Header().Set("Content-Type", "application/json")
		if code == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "30")
		}
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(&metav1.Status{
			TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
			Status:   metav1.StatusFailure, Code: int32(code), Reason: reason, Message: string(f),
		})
	}
	switch f {
	case ok:
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{Kind: "ConfigMap", APIVersion: "v1"},
			ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "ns", ResourceVersion: "7"},
		})
	case err500:
		status(http.StatusInternalServerError, metav1.StatusReasonInternalError)
	case err503:
		status(http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable)
	case err429:
		status(http.StatusTooManyRequests, metav1.StatusReasonTooManyRequests)
	case conflict:
		status(http.StatusConflict, metav1.StatusReasonConflict)
	case alreadyExists:
		status(http.StatusConflict, metav1.StatusReasonAlreadyExists)
	case notFound:
		status(http.StatusNotFound, metav1.StatusReasonNotFound)
	case drop:
		c, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = c.Close()
		}
	}
}

func TestRetryTransport(t *testing.T) {
	policy := RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}
	get := func(ctx context.Context, c *Clients) error {
		_, err := c.Kube.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
		return err
	}
	apply := func(ctx context.Context, c *Clients) error {
		force := true
		_, err := c.Kube.CoreV1().ConfigMaps("ns").Patch(ctx, "cm", types.ApplyPatchType,
			[]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"v"}}`),
			metav1.PatchOptions{FieldManager: FieldManager, Force: &force})
		return err
	}
	create := func(ctx context.Context, c *Clients) error {
		_, err := c.Kube.CoreV1().ConfigMaps("ns").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{})
		return err
	}
	tests := []struct {
		name     string
		script   []fault
		call     func(context.Context, *Clients) error
		attempts int
		retries  int
		wantErr  func(error) bool
	}{
		{name: "success needs no retry", script: []fault{ok}, call: get, attempts: 1},
		{name: "500 then success", script: []fault{err500, err500, ok}, call: get, attempts: 3, retries: 2},
		{name: "429 with a long Retry-After waits at most MaxDelay", script: []fault{err429, ok}, call: get, attempts: 2, retries: 1},
		{name: "503 on server-side apply", script: []fault{err503, ok}, call: apply, attempts: 2, retries: 1},
		{name: "409 Conflict on apply is retried", script: []fault{conflict, conflict, ok}, call: apply, attempts: 3, retries: 2},
		{name: "409 AlreadyExists is final", script: []fault{alreadyExists, ok}, call: create, attempts: 1, wantErr: apierrors.IsAlreadyExists},
		{name: "404 is final", script: []fault{notFound, ok}, call: get, attempts: 1, wantErr: apierrors.IsNotFound},
		{name: "dropped connection on a write is retried", script: []fault{drop, ok}, call: apply, attempts: 2, retries: 1},
		{name: "dropped connection on a read is retried", script: []fault{drop, drop, ok}, call: get, attempts: 3, retries: 2},
		{
			name: "500 forever stops at MaxAttempts", script: []fault{err500}, call: get, attempts: 4, retries: 3,
			wantErr: apierrors.IsInternalError,
		},
		{
			// Retry-After is dropped from the last answer, or client-go
			// would retry 10 more times on its own.
			name: "429 forever stops at MaxAttempts", script: []fault{err429}, call: get, attempts: 4, retries: 3,
			wantErr: apierrors.IsTooManyRequests,
		},
		{
			// The error is not wrapped, or client-go would retry the GET
			// 10 more times on its own.
			name: "drops forever stop at MaxAttempts", script: []fault{drop}, call: get, attempts: 4, retries: 3,
			wantErr: func(err error) bool { return strings.Contains(err.Error(), "gave up after 4 attempts") },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &scripted{script: tt.script, methods: map[string]int{}}
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			core, logs := observer.New(zap.DebugLevel)
			c, err := NewWithOptions(&rest.Config{Host: srv.URL}, Options{Log: zap.New(core), Retry: policy})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			t0 := time.Now()
			err = tt.call(ctx, c)
			switch {
			case tt.wantErr == nil && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != nil && (err == nil || !tt.wantErr(err)):
				t.Fatalf("error %v is not the expected kind", err)
			}
			s.mu.Lock() // a dropped connection's handler may still be running
			n, bodies := s.n, slices.Clone(s.bodies)
			s.mu.Unlock()
			if n != tt.attempts {
				t.Errorf("server saw %d attempts, want %d", n, tt.attempts)
			}
			if got := c.Requests.Retries(); got != int64(tt.retries) {
				t.Errorf("Retries() = %d, want %d", got, tt.retries)
			}
			if got := c.Requests.Reads() + c.Requests.Writes(); got != int64(tt.attempts) {
				t.Errorf("counted %d requests, want one per attempt (%d)", got, tt.attempts)
			}
			// The debug log has one "api request" line per attempt, with
			// the method, path and status (0 for a dropped connection).
			reqLines := logs.FilterMessage("api request").All()
			if len(reqLines) != tt.attempts {
				t.Errorf("%d api request log lines, want one per attempt (%d)", len(reqLines), tt.attempts)
			}
			for _, e := range reqLines {
				m := e.ContextMap()
				if m["method"] == "" || !strings.HasPrefix(m["path"].(string), "/api/v1/namespaces/ns/configmaps") {
					t.Errorf("api request log line lacks method or path: %v", m)
				}
				if _, ok := m["status"]; !ok {
					t.Errorf("api request log line lacks the status: %v", m)
				}
			}
			if got := logs.FilterMessage("retrying API request").Len(); got != tt.retries {
				t.Errorf("%d retry log lines, want %d", got, tt.retries)
			}
			for _, e := range logs.FilterMessage("retrying API request").All() {
				if e.ContextMap()["maxAttempts"] != int64(policy.MaxAttempts) || e.ContextMap()["path"] != "/api/v1/namespaces/ns/configmaps/cm" && e.ContextMap()["path"] != "/api/v1/namespaces/ns/configmaps" {
					t.Errorf("retry log line lacks the bound or path: %v", e.ContextMap())
				}
			}
			if el := time.Since(t0); el > 2*time.Second {
				t.Errorf("took %s; waits must be capped at MaxDelay %s", el, policy.MaxDelay)
			}
			// Every attempt of a write carried the same body.
			for i := 1; i < len(bodies); i++ {
				if bodies[i] != bodies[0] {
					t.Errorf("attempt %d sent body %q, first sent %q", i+1, bodies[i], bodies[0])
				}
			}
		})
	}
}

// TestRetryStopsWhenContextEnds: a cancelled run does not keep retrying.
func TestRetryStopsWhenContextEnds(t *testing.T) {
	s := &scripted{script: []fault{err500}, methods: map[string]int{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := NewWithOptions(&rest.Config{Host: srv.URL}, Options{Retry: RetryPolicy{MaxAttempts: 100, BaseDelay: time.Hour, MaxDelay: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = c.Kube.CoreV1().ConfigMaps("ns").Get(ctx, "cm", metav1.GetOptions{})
	if err == nil || ctx.Err() == nil {
		t.Fatalf("want the context's error, got %v", err)
	}
	if s.n != 1 {
		t.Errorf("server saw %d attempts, want 1 (the wait was cut by the context)", s.n)
	}
}
