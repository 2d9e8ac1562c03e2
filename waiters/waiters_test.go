package waiters

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/maasctl/maasctl/internal/kube"
)

// TestListThenWatch: an UntilWithSync over ListThenWatch starts with a LIST
// at resourceVersion 0 (answered by the watch cache as it is), never with
// a watch-list stream (sendInitialEvents), whose consistent snapshot the
// apiserver delays until etcd's next progress notification; an object
// already done ends the wait on the LIST alone.
func TestListThenWatch(t *testing.T) {
	var (
		mu       sync.Mutex
		requests []string
	)
	srv := configMapServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.URL.RawQuery)
		mu.Unlock()
		q := r.URL.Query()
		if q.Get("watch") == "true" {
			if q.Get("sendInitialEvents") == "true" {
				http.Error(w, "watch-list not expected", http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		writeJSON(w, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMapList", "metadata": map[string]any{"resourceVersion": "7"},
			"items": []any{map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "7"},
				"data":     map[string]any{"ready": "yes"},
			}},
		})
	})
	c, err := kube.New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ri, _, err := c.Resource(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, "ns")
	if err != nil {
		t.Fatal(err)
	}
	lw := ListThenWatch(NameListWatch(ri, "cm"))
	var obj *unstructured.Unstructured
	_, err = watchtools.UntilWithSync(ctx, lw, &unstructured.Unstructured{}, nil, func(ev watch.Event) (bool, error) {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			return false, nil
		}
		obj = u
		v, _, _ := unstructured.NestedString(u.Object, "data", "ready")
		return v == "yes", nil
	})
	if err != nil {
		t.Fatalf("UntilWithSync: %v", err)
	}
	if obj.GetName() != "cm" {
		t.Errorf("ended on %v, want ConfigMap cm", obj)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) == 0 {
		t.Fatal("no request reached the ConfigMaps of ns")
	}
	first, err := urlQuery(requests[0])
	if err != nil {
		t.Fatal(err)
	}
	if first.Get("watch") == "true" || first.Get("resourceVersion") != "0" || first.Get("fieldSelector") != "metadata.name=cm" {
		t.Errorf("first request %q, want a LIST with resourceVersion=0 and fieldSelector=metadata.name=cm", requests[0])
	}
}

func urlQuery(raw string) (url.Values, error) { return url.ParseQuery(raw) }

// TestEndedTellsInterruptionFromTimeout: a wait whose context reached its
// deadline is a TimeoutError; one whose context was cancelled (a signal)
// is an InterruptedError naming its cause and what it waited on, which is
// not a timeout and unwraps to context.Canceled.
func TestEndedTellsInterruptionFromTimeout(t *testing.T) {
	blocked := []Blocked{{Object: "Cluster rhoai-maas-db/maas-postgres", Status: "phase Setting up primary"}}

	dctx, dcancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer dcancel()
	<-dctx.Done()
	if err := ended(dctx, blocked); !IsTimeout(err) || err.Error() != "timed out waiting for Cluster rhoai-maas-db/maas-postgres (phase Setting up primary)" {
		t.Errorf("deadline: %T %v", err, err)
	}

	cctx, ccancel := context.WithCancelCause(context.Background())
	cause := errors.New("received terminated")
	ccancel(cause)
	err := ended(cctx, blocked)
	if IsTimeout(err) {
		t.Errorf("an interruption must not read as a timeout: %v", err)
	}
	if !errors.Is(err, context.Canceled) || !errors.Is(err, cause) {
		t.Errorf("%v should unwrap to context.Canceled and its cause", err)
	}
	if want := "interrupted (received terminated) while waiting for Cluster rhoai-maas-db/maas-postgres (phase Setting up primary)"; err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
}

// TestForManagedFields: For hands Cond objects without
// metadata.managedFields unless the Target asks for them.
func TestForManagedFields(t *testing.T) {
	srv := configMapServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			// No watch-list here: the reflector falls back to LIST.
			http.Error(w, "no watch", http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMapList", "metadata": map[string]any{"resourceVersion": "7"},
			"items": []any{map[string]any{
				"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "7",
					"managedFields": []any{map[string]any{"manager": "kuadrant-operator", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:data": map[string]any{}}}}},
			}},
		})
	})
	c, err := kube.New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	for _, keep := range []bool{false, true} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		seen := -1
		_, err := For(ctx, c, Target{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns", Name: "cm", ManagedFields: keep,
			Cond: func(u *unstructured.Unstructured) Result {
				seen = len(u.GetManagedFields())
				return Result{Done: true}
			}})
		cancel()
		if err != nil {
			t.Fatalf("ManagedFields %v: %v", keep, err)
		}
		if want := map[bool]int{false: 0, true: 1}[keep]; seen != want {
			t.Errorf("ManagedFields %v: Cond saw %d managedFields entries, want %d", keep, seen, want)
		}
	}
}

// configMapServer serves discovery for the core group's ConfigMaps only
// and hands requests for the ConfigMaps of namespace ns to configMaps; it
// answers 404 to everything else.
func configMapServer(t *testing.T, configMaps http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api":
			writeJSON(w, metav1.APIVersions{TypeMeta: metav1.TypeMeta{Kind: "APIVersions"}, Versions: []string{"v1"}})
		case "/apis":
			writeJSON(w, metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}})
		case "/api/v1":
			writeJSON(w, metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: "v1",
				APIResources: []metav1.APIResource{{Name: "configmaps", Namespaced: true, Kind: "ConfigMap", Verbs: []string{"get", "list", "watch"}}}})
		case "/api/v1/namespaces/ns/configmaps":
			configMaps(w, r)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// TestForSaysTheAPIServerDidNotAnswer: while the API server fails the
// wait's LIST and WATCH calls (a dropped connection, then a 503), For's
// status says so, in OnChange and in a timeout error; once it answers,
// the status is the condition's again and the wait ends on the object.
func TestForSaysTheAPIServerDidNotAnswer(t *testing.T) {
	var (
		mu    sync.Mutex
		calls int
		heal  = make(chan struct{})
	)
	srv := configMapServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		n := calls
		mu.Unlock()
		select {
		case <-heal:
		default:
			if n%2 == 1 {
				conn, _, err := w.(http.Hijacker).Hijack()
				if err == nil {
					_ = conn.Close()
				}
				return
			}
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Query().Get("watch") == "true" {
			http.Error(w, "no watch", http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{
			"apiVersion": "v1", "kind": "ConfigMapList", "metadata": map[string]any{"resourceVersion": "7"},
			"items": []any{map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]any{"name": "cm", "namespace": "ns", "resourceVersion": "7"}}},
		})
	})
	c, err := kube.New(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	target := Target{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "ns", Name: "cm"}

	// Unanswered until the deadline: the timeout names the trouble.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	_, err = For(ctx, c, target)
	cancel()
	if !IsTimeout(err) || !strings.Contains(err.Error(), "ConfigMap ns/cm (not seen yet; the API server did not answer: ") || !strings.Contains(err.Error(), "; retrying)") {
		t.Fatalf("For on an API server that does not answer: %v, want a timeout naming it", err)
	}

	// Unanswered, then healed: OnChange saw the trouble, then the object.
	var statuses []string
	var smu sync.Mutex
	target.OnChange = func(r Result) { smu.Lock(); statuses = append(statuses, r.Status); smu.Unlock() }
	go func() {
		for {
			smu.Lock()
			n := len(statuses)
			smu.Unlock()
			if n > 0 {
				close(heal)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := For(ctx, c, target); err != nil {
		t.Fatalf("For after the API server healed: %v", err)
	}
	smu.Lock()
	defer smu.Unlock()
	if len(statuses) < 2 || !strings.HasPrefix(statuses[0], "not seen yet; the API server did not answer: ") || statuses[len(statuses)-1] != "exists" {
		t.Errorf("statuses %q, want the API server's trouble first and the object's existence last", statuses)
	}
}
