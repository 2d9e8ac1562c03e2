package faultproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// upstream is a fake API server: writes answer with a ConfigMap at
// resourceVersion = the request number, GETs with watch=true stream one
// event every 5 ms until the client goes away, other GETs answer {}.
type upstream struct {
	n atomic.Int64
}

func (u *upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := u.n.Add(1)
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") == "true" {
		w.WriteHeader(http.StatusOK)
		for i := 1; ; i++ {
			_, err := fmt.Fprintf(w, `{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns","resourceVersion":"%d"}}}`+"\n", i)
			if err != nil {
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if r.Method == http.MethodGet {
		_, _ = io.WriteString(w, `{}`)
		return
	}
	fmt.Fprintf(w, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","namespace":"ns","resourceVersion":"%d","generation":3}}`, n)
}

func startProxy(t *testing.T, o Options) (*Proxy, *upstream) {
	t.Helper()
	up := &upstream{}
	srv := httptest.NewServer(up)
	t.Cleanup(srv.Close)
	o.Upstream = &rest.Config{Host: srv.URL}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p, up
}

func do(t *testing.T, p *Proxy, method, path string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequest(method, p.URL()+path, strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", "test-client")
	return http.DefaultClient.Do(req)
}

func TestFaultKinds(t *testing.T) {
	tests := []struct {
		name       string
		fault      Fault
		method     string
		wantStatus int // 0: connection dropped
		wantReason string
		forwarded  bool
	}{
		{name: "500", fault: Fault500, method: http.MethodGet, wantStatus: 500, wantReason: "InternalError"},
		{name: "429 with Retry-After", fault: Fault429, method: http.MethodPatch, wantStatus: 429, wantReason: "TooManyRequests"},
		{name: "409 on a write", fault: Fault409, method: http.MethodPatch, wantStatus: 409, wantReason: "Conflict"},
		{name: "409 never on a read", fault: Fault409, method: http.MethodGet, wantStatus: 200, forwarded: true},
		{name: "dropped connection", fault: FaultDrop, method: http.MethodPut},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, up := startProxy(t, Options{Rate: 1, Faults: []Fault{tt.fault}, Record: true, RetryAfterSeconds: 3})
			resp, err := do(t, p, tt.method, "/api/v1/namespaces/ns/configmaps/cm")
			if tt.wantStatus == 0 {
				if err == nil {
					resp.Body.Close()
					t.Fatalf("want a dropped connection, got HTTP %d", resp.StatusCode)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				if resp.StatusCode != tt.wantStatus {
					t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
				}
				var st struct {
					Reason  string `json:"reason"`
					Details struct {
						RetryAfterSeconds int `json:"retryAfterSeconds"`
					} `json:"details"`
				}
				_ = json.NewDecoder(resp.Body).Decode(&st)
				if st.Reason != tt.wantReason {
					t.Errorf("reason %q, want %q", st.Reason, tt.wantReason)
				}
				if tt.fault == Fault429 && (resp.Header.Get("Retry-After") != "3" || st.Details.RetryAfterSeconds != 3) {
					t.Errorf("429 without Retry-After 3: header %q, details %d", resp.Header.Get("Retry-After"), st.Details.RetryAfterSeconds)
				}
			}
			if got := up.n.Load() == 1; got != tt.forwarded {
				t.Errorf("forwarded = %v, want %v", got, tt.forwarded)
			}
			c := p.Counts()
			wantInjected := int64(1)
			if tt.forwarded {
				wantInjected = 0
			}
			if c.Requests != 1 || c.Total() != wantInjected || c.Injected[tt.fault] != wantInjected {
				t.Errorf("counts %+v, want 1 request and %d %s", c, wantInjected, tt.fault)
			}
			// The proxy completes a record after the client has its
			// response: wait for the completion, bounded.
			recs := p.Requests()
			for deadline := time.Now().Add(5 * time.Second); (len(recs) != 1 || recs[0].End.IsZero()) && time.Now().Before(deadline); recs = p.Requests() {
				time.Sleep(5 * time.Millisecond)
			}
			if len(recs) != 1 || recs[0].Status != tt.wantStatus || recs[0].UserAgent != "test-client" {
				t.Fatalf("records %+v", recs)
			}
			if !tt.forwarded && recs[0].Fault != tt.fault {
				t.Errorf("recorded fault %q, want %q", recs[0].Fault, tt.fault)
			}
		})
	}
}

func TestRateIsAShareOfRequests(t *testing.T) {
	p, up := startProxy(t, Options{Rate: 0.25, Faults: []Fault{Fault500, Fault429}, Seed: 42})
	const n = 800
	failed := 0
	for range n {
		resp, err := do(t, p, http.MethodGet, "/api")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			failed++
		}
	}
	c := p.Counts()
	// Binomial(800, 0.25): mean 200, sd 12.2; ±5 sd.
	if failed < 139 || failed > 261 {
		t.Errorf("%d of %d requests failed, want about 25 %%", failed, n)
	}
	if c.Total() != int64(failed) || c.Injected[Fault500] == 0 || c.Injected[Fault429] == 0 || c.Injected[Fault409] != 0 {
		t.Errorf("counts %+v do not match %d failures of the two chosen kinds", c, failed)
	}
	if up.n.Load() != int64(n-failed) {
		t.Errorf("upstream saw %d requests, want the %d not faulted", up.n.Load(), n-failed)
	}
	p.SetRate(0)
	resp, err := do(t, p, http.MethodGet, "/api")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after SetRate(0): %v %v", resp, err)
	}
	resp.Body.Close()
}

func TestRecordsWritesAndWatchEvents(t *testing.T) {
	p, _ := startProxy(t, Options{Record: true, RecordWatchEvents: func(*http.Request) bool { return true }})
	resp, err := do(t, p, http.MethodPatch, "/api/v1/namespaces/ns/configmaps/cm")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/api/v1/namespaces/ns/configmaps?watch=true", nil)
	wresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(wresp.Body)
	for range 3 {
		var ev map[string]any
		if err := dec.Decode(&ev); err != nil {
			t.Fatal(err)
		}
	}
	// Events are recorded before the proxy passes them on, so the three
	// the client decoded are in the record already.
	recs := p.Requests()
	cancel()
	wresp.Body.Close()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	w := recs[0]
	if !w.IsWrite() || w.Object == nil || w.Object.Key() != "ConfigMap ns/cm" || w.Object.ResourceVersion != "1" || w.Object.Generation != 3 {
		t.Errorf("write record %+v object %+v", w, w.Object)
	}
	if !recs[1].Watch || len(recs[1].Events) < 3 || recs[1].Events[0].Object.ResourceVersion != "1" || recs[1].Events[2].Type != "MODIFIED" {
		t.Errorf("watch record %+v", recs[1])
	}
}

// TestWatchCut: a watch stream that passes its start is cut mid-stream, and
// the client sees an unexpected end, not a clean one.
func TestWatchCut(t *testing.T) {
	// 409 never applies to a GET, so no watch is faulted at its start and
	// every one is cut (rate 1).
	p, _ := startProxy(t, Options{Rate: 1, Faults: []Fault{Fault409}, WatchCutWithin: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.URL()+"/api/v1/configmaps?watch=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	if err == nil || ctx.Err() != nil {
		t.Fatalf("want the stream cut with an error before the deadline, got err=%v ctx=%v", err, ctx.Err())
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("cut stream ended with %v", err)
	}
	if c := p.Counts(); c.Injected[FaultWatchCut] != 1 {
		t.Errorf("counts %+v, want one watch cut", c)
	}
}

func TestStartValidates(t *testing.T) {
	tests := []struct {
		name string
		o    Options
	}{
		{name: "no upstream", o: Options{}},
		{name: "rate above 1", o: Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Rate: 1.5}},
		{name: "unknown fault", o: Options{Upstream: &rest.Config{Host: "http://127.0.0.1:1"}, Faults: []Fault{"418"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := Start(context.Background(), tt.o); err == nil {
				_ = p.Close()
				t.Fatal("want an error")
			}
		})
	}
}

// TestRecordsProtobufWrites: a write answered in Kubernetes' protobuf
// encoding (a built-in kind, as a client asking for protobuf gets it) is
// recorded with its object like a JSON one, so that a writer speaking
// protobuf is not invisible to the write accounting.
func TestRecordsProtobufWrites(t *testing.T) {
	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Name: "svc", Namespace: "ns", ResourceVersion: "42", Generation: 2},
	}
	var body bytes.Buffer
	if err := protobufCodec.Encode(svc, &body); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", protobufType)
		_, _ = w.Write(body.Bytes())
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := Start(ctx, Options{Record: true, Upstream: &rest.Config{Host: srv.URL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for _, m := range []string{http.MethodPut, http.MethodGet} {
		resp, err := do(t, p, m, "/api/v1/namespaces/ns/services/svc")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, body.Bytes()) {
			t.Errorf("%s: the client got %d bytes, not the %d the server sent", m, len(got), body.Len())
		}
	}
	recs := p.Requests()
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	w := recs[0]
	if !w.IsWrite() || w.Object == nil || w.Object.Key() != "Service ns/svc" || w.Object.ResourceVersion != "42" || w.Object.Generation != 2 {
		t.Errorf("protobuf write record %+v object %+v", w, w.Object)
	}
	if recs[1].Object != nil {
		t.Errorf("a read got an object recorded: %+v", recs[1].Object)
	}
}

// TestContentDigest: the digest ignores the resourceVersion and the
// status only.
func TestContentDigest(t *testing.T) {
	obj := func(rv, label string) map[string]any {
		return map[string]any{"kind": "GatewayClass", "metadata": map[string]any{"name": "gc", "resourceVersion": rv, "labels": map[string]any{"a": label}}}
	}
	if a, b := contentDigest(obj("1", "x")), contentDigest(obj("2", "x")); a == "" || a != b {
		t.Errorf("the same content under two resourceVersions: digests %q and %q, want equal", a, b)
	}
	withStatus := func(rv, ready string) map[string]any {
		o := obj(rv, "x")
		o["status"] = map[string]any{"readyReplicas": ready}
		return o
	}
	if a, b := contentDigest(withStatus("1", "0")), contentDigest(withStatus("2", "1")); a != b {
		t.Errorf("the same content with another status: digests %q and %q, want equal", a, b)
	}
	if a, b := contentDigest(obj("1", "x")), contentDigest(obj("1", "y")); a == b {
		t.Errorf("two contents have the same digest %q", a)
	}
}

// TestManagersDigest: a manager's digest changes with its entries' time
// or fields and with nothing else, another manager's entry included.
func TestManagersDigest(t *testing.T) {
	obj := func(maasctlTime, otherTime string) map[string]any {
		return map[string]any{"kind": "Deployment", "metadata": map[string]any{"name": "d", "managedFields": []any{
			map[string]any{"manager": "maasctl", "operation": "Apply", "time": maasctlTime, "fieldsV1": map[string]any{"f:spec": map[string]any{}}},
			map[string]any{"manager": "kube-controller-manager", "operation": "Update", "time": otherTime, "fieldsV1": map[string]any{"f:status": map[string]any{}}},
		}}}
	}
	a, b := managersDigest(obj("2026-12-06T16:00:00Z", "2026-12-06T16:00:00Z")), managersDigest(obj("2026-12-06T16:00:00Z", "2026-12-06T16:00:05Z"))
	if a["maasctl"] == "" || a["maasctl"] != b["maasctl"] || a["kube-controller-manager"] == b["kube-controller-manager"] {
		t.Errorf("another manager's write changed maasctl's digest, or not its own: %v, %v", a, b)
	}
	if c := managersDigest(obj("2026-12-06T16:00:01Z", "2026-12-06T16:00:00Z")); c["maasctl"] == a["maasctl"] {
		t.Errorf("maasctl's entry changed time, its digest did not: %v", c)
	}
}

// TestCountsTransientAnswers: answers the upstream sent with a status a
// client may retry are counted by status, apart from injected faults;
// other answers are not.
func TestCountsTransientAnswers(t *testing.T) {
	codes := map[string]int{"/a": http.StatusServiceUnavailable, "/b": http.StatusConflict, "/c": http.StatusNotFound, "/d": http.StatusOK}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(codes[r.URL.Path])
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	p, err := Start(ctx, Options{Upstream: &rest.Config{Host: srv.URL}, Faults: []Fault{Fault500}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	for _, path := range []string{"/a", "/a", "/b", "/c", "/d"} {
		resp, err := do(t, p, http.MethodGet, path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	p.SetRate(1)
	if resp, err := do(t, p, http.MethodGet, "/d"); err == nil {
		resp.Body.Close()
	}
	c := p.Counts()
	want := map[int]int64{http.StatusServiceUnavailable: 2, http.StatusConflict: 1}
	if len(c.Transient) != len(want) || c.Transient[503] != 2 || c.Transient[409] != 1 || c.TransientTotal() != 3 {
		t.Errorf("transient answers %v (total %d), want %v", c.Transient, c.TransientTotal(), want)
	}
	if c.Total() != 1 || c.Injected[Fault500] != 1 {
		t.Errorf("injected %v, want one 500", c.Injected)
	}
}
