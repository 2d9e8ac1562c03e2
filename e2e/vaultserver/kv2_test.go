package vaultserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

type kvStep struct {
	name       string
	method     string
	path       string
	body       string
	wantStatus int
	want       map[string]any
	// advance moves the fake clock before the request.
	advance time.Duration
}

func runSteps(t *testing.T, addr string, steps []kvStep, clock *FakeClock) {
	t.Helper()
	for _, st := range steps {
		if st.advance > 0 {
			clock.Advance(st.advance)
		}
		r := do(t, addr, st.method, st.path, rootToken, st.body)
		if r.status != st.wantStatus {
			t.Fatalf("%s: %s %s: status %d, want %d (body %v)", st.name, st.method, st.path, r.status, st.wantStatus, r.body)
		}
		for k, want := range st.want {
			got := field(r.body, strings.Fields(k)...)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%s: %s (-want +got):\n%s", st.name, k, diff)
			}
		}
	}
}

func startKV(t *testing.T) (*Server, string, *FakeClock) {
	t.Helper()
	clock := NewFakeClock(time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC))
	s := New(Options{RootToken: rootToken, Now: clock.Now,
		Mounts: []Mount{{Path: "secret", Version: 2}, {Path: "legacy", Version: 1}}})
	addr, err := s.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, addr, clock
}

// TestKV2SoftDeleteAndCAS is case B10's trigger state built through the API
// (cas_required on the mount, version 3 soft-deleted) and what Vault
// answers in it: a soft-deleted latest version reads as 404 with data null
// and its deletion_time, current_version stays 3, cas=0 and a missing cas
// fail with Vault's two messages, cas=3 writes version 4.
func TestKV2SoftDeleteAndCAS(t *testing.T) {
	s, addr, clock := startKV(t)
	runSteps(t, addr, []kvStep{
		{name: "config cas_required", method: "POST", path: "/v1/secret/config", body: `{"cas_required":true}`, wantStatus: 204},
		{name: "read config", method: "GET", path: "/v1/secret/config", wantStatus: 200,
			want: map[string]any{"data cas_required": true, "data delete_version_after": "0s", "data max_versions": 0.0}},
		{name: "write without cas", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p1"}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"check-and-set parameter required for this call"}}},
		{name: "options without cas", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p1"},"options":{}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"check-and-set parameter required for this call"}}},
		{name: "v1", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p1"},"options":{"cas":0}}`, wantStatus: 200,
			want: map[string]any{"data version": 1.0}},
		{name: "v2", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p2"},"options":{"cas":1}}`, wantStatus: 200},
		{name: "v3", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p3"},"options":{"cas":"2"}}`, wantStatus: 200,
			want: map[string]any{"data version": 3.0}},
		{name: "soft delete latest", method: "DELETE", path: "/v1/secret/data/maas/db", wantStatus: 204, advance: time.Second},
		{name: "read deleted latest", method: "GET", path: "/v1/secret/data/maas/db", wantStatus: 404,
			want: map[string]any{"data data": nil, "data metadata version": 3.0, "data metadata destroyed": false,
				"data metadata deletion_time": "2026-07-01T10:00:01Z", "errors": nil}},
		{name: "older version still readable", method: "GET", path: "/v1/secret/data/maas/db?version=2", wantStatus: 200,
			want: map[string]any{"data data password": "p2"}},
		{name: "metadata keeps current_version", method: "GET", path: "/v1/secret/metadata/maas/db", wantStatus: 200,
			want: map[string]any{"data current_version": 3.0, "data versions 3 deletion_time": "2026-07-01T10:00:01Z", "data versions 2 deletion_time": ""}},
		{name: "cas 0 after soft delete", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"x"},"options":{"cas":0}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"check-and-set parameter did not match the current version"}}},
		{name: "undelete", method: "POST", path: "/v1/secret/undelete/maas/db", body: `{"versions":[3]}`, wantStatus: 204},
		{name: "read undeleted", method: "GET", path: "/v1/secret/data/maas/db", wantStatus: 200,
			want: map[string]any{"data data password": "p3", "data metadata deletion_time": ""}},
		{name: "delete versions", method: "POST", path: "/v1/secret/delete/maas/db", body: `{"versions":[3, 9]}`, wantStatus: 204},
		{name: "delete without versions", method: "POST", path: "/v1/secret/delete/maas/db", body: `{}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"no version number provided"}}},
		{name: "cas 3 over the deleted version", method: "POST", path: "/v1/secret/data/maas/db", body: `{"data":{"password":"p4"},"options":{"cas":3}}`, wantStatus: 200,
			want: map[string]any{"data version": 4.0}},
		{name: "destroy 4", method: "PUT", path: "/v1/secret/destroy/maas/db", body: `{"versions":[4]}`, wantStatus: 204},
		{name: "read destroyed", method: "GET", path: "/v1/secret/data/maas/db", wantStatus: 404,
			want: map[string]any{"data data": nil, "data metadata destroyed": true, "data metadata version": 4.0}},
		{name: "undelete cannot restore destroyed", method: "POST", path: "/v1/secret/undelete/maas/db", body: `{"versions":"4"}`, wantStatus: 204},
		{name: "still destroyed", method: "GET", path: "/v1/secret/data/maas/db", wantStatus: 404,
			want: map[string]any{"data data": nil, "data metadata destroyed": true}},
	}, clock)
	if n := s.Versions("secret", "maas/db"); n != 4 {
		t.Errorf("Versions = %d, want 4", n)
	}
	if d := s.Data("secret", "maas/db"); d != nil {
		t.Errorf("Data of a destroyed latest version = %v, want nil", d)
	}
}

// TestKV2KeyMetadata: cas_required and delete_version_after set on one
// key's metadata (before its first version), custom_metadata, and a
// version that expires by delete_version_after reading exactly like a soft
// delete (hashicorp/vault#7644). KV v1 ignores options.cas and stores the
// body as it is (hashicorp/vault#19368).
func TestKV2KeyMetadata(t *testing.T) {
	s, addr, clock := startKV(t)
	runSteps(t, addr, []kvStep{
		{name: "metadata before any version", method: "POST", path: "/v1/secret/metadata/app/db",
			body: `{"cas_required":true,"delete_version_after":"1h","custom_metadata":{"owner":"maas"}}`, wantStatus: 204},
		{name: "read metadata", method: "GET", path: "/v1/secret/metadata/app/db", wantStatus: 200,
			want: map[string]any{"data current_version": 0.0, "data cas_required": true, "data delete_version_after": "1h0m0s",
				"data custom_metadata owner": "maas"}},
		{name: "data of a key without versions", method: "GET", path: "/v1/secret/data/app/db", wantStatus: 404,
			want: map[string]any{"errors": []any{}}},
		{name: "write without cas", method: "PUT", path: "/v1/secret/data/app/db", body: `{"data":{"password":"p1"}}`, wantStatus: 400,
			want: map[string]any{"errors": []any{"check-and-set parameter required for this call"}}},
		{name: "cas 0 on metadata without versions", method: "PUT", path: "/v1/secret/data/app/db", body: `{"data":{"password":"p1"},"options":{"cas":0}}`, wantStatus: 200,
			want: map[string]any{"data version": 1.0, "data deletion_time": "2026-07-01T11:00:00Z", "data custom_metadata owner": "maas"}},
		{name: "readable before deletion_time", method: "GET", path: "/v1/secret/data/app/db", wantStatus: 200, advance: 59 * time.Minute,
			want: map[string]any{"data data password": "p1"}},
		{name: "gone at deletion_time", method: "GET", path: "/v1/secret/data/app/db", wantStatus: 404, advance: time.Minute,
			want: map[string]any{"data data": nil, "data metadata deletion_time": "2026-07-01T11:00:00Z", "data metadata version": 1.0}},
		{name: "mount limit caps the key's", method: "POST", path: "/v1/secret/config", body: `{"delete_version_after":"600"}`, wantStatus: 204},
		{name: "write 2", method: "PUT", path: "/v1/secret/data/app/db", body: `{"data":{"password":"p2"},"options":{"cas":1}}`, wantStatus: 200,
			want: map[string]any{"data version": 2.0, "data deletion_time": "2026-07-01T11:10:00Z"}},
		{name: "partial metadata update", method: "POST", path: "/v1/secret/metadata/app/db", body: `{"max_versions":5}`, wantStatus: 204},
		{name: "other fields kept", method: "GET", path: "/v1/secret/metadata/app/db", wantStatus: 200,
			want: map[string]any{"data cas_required": true, "data max_versions": 5.0, "data delete_version_after": "1h0m0s"}},
		{name: "v1 ignores cas", method: "POST", path: "/v1/legacy/app/db", body: `{"password":"a"}`, wantStatus: 204},
		{name: "v1 overwrite with cas 0", method: "POST", path: "/v1/legacy/app/db", body: `{"password":"b","options":{"cas":0}}`, wantStatus: 204},
		{name: "v1 read", method: "GET", path: "/v1/legacy/app/db", wantStatus: 200, want: map[string]any{"data password": "b"}},
	}, clock)
	if d := s.Data("secret", "app/db"); d["password"] != "p2" {
		t.Errorf("Data = %v, want password p2", d)
	}
}
