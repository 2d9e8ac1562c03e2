package vaultserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const (
	rootToken = "root-token-for-tests"
	roToken   = "read-only-token-for-tests"
	b11Token  = "logical-path-policy-token"
)

func start(t *testing.T) (*Server, string) {
	t.Helper()
	s := New(Options{
		RootToken:     rootToken,
		ReadOnlyToken: roToken,
		Mounts:        []Mount{{Path: "kv", Version: 2}, {Path: "legacy", Version: 1}, {Path: "team/kv", Version: 2}},
		Tokens:        map[string][]Rule{b11Token: {{Path: "kv/app/*", Capabilities: []string{"create", "read", "update"}}}},
	})
	addr, err := s.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, addr
}

type reply struct {
	status int
	body   map[string]any
}

func do(t *testing.T, addr, method, path, token, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("X-Vault-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := reply{status: resp.StatusCode}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r.body); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, raw, err)
		}
	}
	return r
}

// field walks a decoded JSON object by keys.
func field(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func TestHTTPAPI(t *testing.T) {
	s, addr := start(t)
	// Steps run in order; each builds on the state the previous ones left.
	steps := []struct {
		name       string
		method     string
		path       string
		token      string
		body       string
		wantStatus int
		// want maps a space-separated key path in the response body to its
		// expected value (JSON numbers decode as float64).
		want map[string]any
	}{
		{name: "health needs no token", method: "GET", path: "/v1/sys/health", wantStatus: 200,
			want: map[string]any{"initialized": true, "sealed": false, "standby": false}},
		{name: "missing token", method: "GET", path: "/v1/kv/data/app/db", wantStatus: 403,
			want: map[string]any{"errors": []any{"permission denied"}}},
		{name: "wrong token", method: "GET", path: "/v1/kv/data/app/db", token: "nope", wantStatus: 403,
			want: map[string]any{"errors": []any{"permission denied"}}},
		{name: "mount lookup kv v2", method: "GET", path: "/v1/sys/internal/ui/mounts/kv/app/db", token: rootToken, wantStatus: 200,
			want: map[string]any{"data path": "kv/", "data type": "kv", "data options version": "2"}},
		{name: "mount lookup kv v1", method: "GET", path: "/v1/sys/internal/ui/mounts/legacy/app/db", token: roToken, wantStatus: 200,
			want: map[string]any{"data path": "legacy/", "data options version": "1"}},
		{name: "mount lookup longest prefix", method: "GET", path: "/v1/sys/internal/ui/mounts/team/kv/x", token: rootToken, wantStatus: 200,
			want: map[string]any{"data path": "team/kv/"}},
		{name: "mount lookup unknown mount", method: "GET", path: "/v1/sys/internal/ui/mounts/nope/x", token: rootToken, wantStatus: 403,
			want: map[string]any{"errors": []any{`preflight capability check returned 403, please ensure client's policies grant access to path "nope/x/"`}}},
		{name: "mount lookup without access below mount", method: "GET", path: "/v1/sys/internal/ui/mounts/legacy/x", token: b11Token, wantStatus: 403},
		{name: "mount lookup with access below mount", method: "GET", path: "/v1/sys/internal/ui/mounts/kv/app/db", token: b11Token, wantStatus: 200},
		{name: "sys/mounts", method: "GET", path: "/v1/sys/mounts", token: rootToken, wantStatus: 200,
			want: map[string]any{"data kv/ options version": "2", "data legacy/ options version": "1", "data kv/ type": "kv"}},
		{name: "sys/mounts denied", method: "GET", path: "/v1/sys/mounts", token: b11Token, wantStatus: 403},
		{name: "read absent", method: "GET", path: "/v1/kv/data/app/db", token: rootToken, wantStatus: 404,
			want: map[string]any{"errors": []any{}}},
		{name: "metadata absent", method: "GET", path: "/v1/kv/metadata/app/db", token: rootToken, wantStatus: 404,
			want: map[string]any{"errors": []any{}}},
		{name: "write denied to read-only", method: "POST", path: "/v1/kv/data/app/db", token: roToken, body: `{"data":{"p":"x"}}`, wantStatus: 403,
			want: map[string]any{"errors": []any{"permission denied"}}},
		{name: "write denied to logical-path policy", method: "POST", path: "/v1/kv/data/app/db", token: b11Token, body: `{"data":{"p":"x"}}`, wantStatus: 403},
		{name: "read denied to logical-path policy", method: "GET", path: "/v1/kv/data/app/db", token: b11Token, wantStatus: 403},
		{name: "write without data", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"options":{"cas":0}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"no data provided"}}},
		{name: "write bad JSON", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":`, wantStatus: 400},
		{name: "create with cas 0", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":{"p":"one"},"options":{"cas":0}}`, wantStatus: 200,
			want: map[string]any{"data version": 1.0, "data destroyed": false, "data deletion_time": ""}},
		{name: "cas 0 again", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":{"p":"two"},"options":{"cas":0}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"check-and-set parameter did not match the current version"}}},
		{name: "cas 1 with PUT", method: "PUT", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":{"p":"two"},"options":{"cas":1}}`, wantStatus: 200,
			want: map[string]any{"data version": 2.0}},
		{name: "stale cas", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":{"p":"x"},"options":{"cas":1}}`, wantStatus: 400},
		{name: "no cas", method: "POST", path: "/v1/kv/data/app/db", token: rootToken, body: `{"data":{"p":"three"}}`, wantStatus: 200,
			want: map[string]any{"data version": 3.0}},
		{name: "read latest", method: "GET", path: "/v1/kv/data/app/db", token: roToken, wantStatus: 200,
			want: map[string]any{"data data p": "three", "data metadata version": 3.0, "lease_duration": 0.0}},
		{name: "read version 1", method: "GET", path: "/v1/kv/data/app/db?version=1", token: rootToken, wantStatus: 200,
			want: map[string]any{"data data p": "one", "data metadata version": 1.0}},
		{name: "read missing version", method: "GET", path: "/v1/kv/data/app/db?version=9", token: rootToken, wantStatus: 404},
		{name: "metadata", method: "GET", path: "/v1/kv/metadata/app/db", token: rootToken, wantStatus: 200,
			want: map[string]any{"data current_version": 3.0, "data versions 1 destroyed": false, "data versions 3 deletion_time": "", "data delete_version_after": "0s"}},
		{name: "v2 path without data/", method: "GET", path: "/v1/kv/app/db", token: rootToken, wantStatus: 404,
			want: map[string]any{"data": nil, "warnings": []any{"Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv get' for this operation."}}},
		{name: "v2 write without data/", method: "PUT", path: "/v1/kv/app/db", token: rootToken, body: `{"p":"x"}`, wantStatus: 404,
			want: map[string]any{"errors": nil, "warnings": []any{"Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv put' for this operation."}}},
		{name: "v1 read absent", method: "GET", path: "/v1/legacy/app/db", token: rootToken, wantStatus: 404,
			want: map[string]any{"errors": []any{}}},
		{name: "v1 write denied", method: "POST", path: "/v1/legacy/app/db", token: roToken, body: `{"p":"x"}`, wantStatus: 403},
		{name: "v1 write", method: "POST", path: "/v1/legacy/app/db", token: rootToken, body: `{"p":"v1"}`, wantStatus: 204},
		{name: "v1 read", method: "GET", path: "/v1/legacy/app/db", token: roToken, wantStatus: 200,
			want: map[string]any{"data p": "v1", "lease_duration": 2764800.0}},
		{name: "v1 write empty", method: "POST", path: "/v1/legacy/app/db", token: rootToken, body: `{}`, wantStatus: 400},
		{name: "unknown mount as root", method: "GET", path: "/v1/nope/x", token: rootToken, wantStatus: 404},
		{name: "unknown mount as read-only", method: "GET", path: "/v1/nope/x", token: b11Token, wantStatus: 403},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			r := do(t, addr, st.method, st.path, st.token, st.body)
			if r.status != st.wantStatus {
				t.Fatalf("%s %s: status %d, want %d (body %v)", st.method, st.path, r.status, st.wantStatus, r.body)
			}
			for k, want := range st.want {
				got := field(r.body, strings.Fields(k)...)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("%s (-want +got):\n%s", k, diff)
				}
			}
		})
	}
	if got := s.Versions("kv", "app/db"); got != 3 {
		t.Errorf("Versions = %d, want 3", got)
	}
	if diff := cmp.Diff(map[string]string{"p": "three"}, s.Data("kv", "app/db")); diff != "" {
		t.Errorf("Data (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"p": "v1"}, s.Data("legacy", "app/db")); diff != "" {
		t.Errorf("Data v1 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"app/db"}, s.Paths("kv")); diff != "" {
		t.Errorf("Paths (-want +got):\n%s", diff)
	}
}

func TestDeleteLatest(t *testing.T) {
	s, addr := start(t)
	if s.DeleteLatest("kv", "x") {
		t.Fatal("DeleteLatest of an absent key reported a deletion")
	}
	do(t, addr, "POST", "/v1/kv/data/x", rootToken, `{"data":{"p":"1"}}`)
	if !s.DeleteLatest("kv", "x") {
		t.Fatal("DeleteLatest reported nothing to delete")
	}
	r := do(t, addr, "GET", "/v1/kv/data/x", rootToken, "")
	if r.status != 404 {
		t.Fatalf("status %d, want 404", r.status)
	}
	if field(r.body, "data", "data") != nil || field(r.body, "data", "metadata", "deletion_time") == "" {
		t.Errorf("body %v: want data null and a deletion_time", r.body)
	}
	if s.Data("kv", "x") != nil {
		t.Error("Data of a deleted version is not nil")
	}
	if s.Versions("kv", "x") != 1 {
		t.Error("deleting changed the version count")
	}
}

// TestConcurrentCAS: of many simultaneous cas=0 writes exactly one wins.
func TestConcurrentCAS(t *testing.T) {
	s, addr := start(t)
	const writers = 50
	statuses := make([]int, writers)
	var wg sync.WaitGroup
	begin := make(chan struct{})
	for i := 0; i < writers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-begin
			req, _ := http.NewRequest("POST", addr+"/v1/kv/data/race", strings.NewReader(`{"data":{"w":"x"},"options":{"cas":0}}`))
			req.Header.Set("X-Vault-Token", rootToken)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
			statuses[i] = resp.StatusCode
		}(i)
	}
	close(begin)
	wg.Wait()
	won := 0
	for _, st := range statuses {
		switch st {
		case 200:
			won++
		case 400:
		default:
			t.Errorf("unexpected status %d", st)
		}
	}
	if won != 1 || s.Versions("kv", "race") != 1 {
		t.Errorf("%d writes won, %d versions; want 1 and 1", won, s.Versions("kv", "race"))
	}
}

func TestPolicyMatching(t *testing.T) {
	p := &principal{rules: []Rule{
		{Path: "kv/data/app/*", Capabilities: []string{"read"}},
		{Path: "kv/data/app/db", Capabilities: []string{"create"}},
		{Path: "kv/data/*", Capabilities: []string{"update"}},
	}}
	tests := []struct {
		name string
		path string
		c    capability
		want bool
	}{
		{name: "exact beats glob", path: "kv/data/app/db", c: capCreate, want: true},
		{name: "exact hides glob caps", path: "kv/data/app/db", c: capRead, want: false},
		{name: "longer glob wins", path: "kv/data/app/other", c: capRead, want: true},
		{name: "shorter glob hidden", path: "kv/data/app/other", c: capUpdate, want: false},
		{name: "shorter glob applies", path: "kv/data/x", c: capUpdate, want: true},
		{name: "no match", path: "kv/metadata/app/db", c: capRead, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.can(tt.path, tt.c); got != tt.want {
				t.Errorf("can(%q, %s) = %v, want %v", tt.path, tt.c, got, tt.want)
			}
		})
	}
}

func TestStartAndClose(t *testing.T) {
	tests := []struct {
		name    string
		addr    string
		wantErr string
	}{
		{name: "all interfaces refused", addr: "0.0.0.0:0", wantErr: "not a loopback"},
		{name: "bad address", addr: "nonsense", wantErr: "listen address"},
		{name: "localhost", addr: "localhost:0"},
		{name: "ipv4 loopback", addr: "127.0.0.1:0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Options{Addr: tt.addr})
			t.Cleanup(func() { _ = s.Close() })
			addr, err := s.Start(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Start error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := do(t, addr, "GET", "/v1/sys/health", "", ""); r.status != 200 {
				t.Errorf("health status %d", r.status)
			}
			if _, err := s.Start(context.Background()); err == nil {
				t.Error("second Start succeeded")
			}
		})
	}
}

func TestContextCancelCloses(t *testing.T) {
	s := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := s.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	cancel()
	select {
	case <-s.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("server not closed 10s after its context was cancelled")
	}
	if resp, err := http.Get(addr + "/v1/sys/health"); err == nil {
		resp.Body.Close()
		t.Error("server still answers after Close")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
