package vaultserver

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authnv1 "k8s.io/api/authentication/v1"
)

func TestParsePolicy(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    []Rule
		wantErr string
	}{
		{name: "one stanza", text: `path "kv/data/app" { capabilities = ["create", "read"] }`,
			want: []Rule{{Path: "kv/data/app", Capabilities: []string{"create", "read"}}}},
		{name: "comments and several stanzas", text: "# c\npath \"a/*\" {\n  capabilities = [\"read\"]\n}\n// c2\npath \"b\" { capabilities = [\"update\"] }\n",
			want: []Rule{{Path: "a/*", Capabilities: []string{"read"}}, {Path: "b", Capabilities: []string{"update"}}}},
		{name: "same path merged", text: `path "a" { capabilities = ["read"] }` + "\n" + `path "a" { capabilities = ["list"] }`,
			want: []Rule{{Path: "a", Capabilities: []string{"read", "list"}}}},
		{name: "legacy policy field", text: `path "a" { policy = "write" }`,
			want: []Rule{{Path: "a", Capabilities: []string{"create", "read", "update", "delete", "list"}}}},
		{name: "plus segment", text: `path "kv/data/+/db" { capabilities = ["read"] }`,
			want: []Rule{{Path: "kv/data/+/db", Capabilities: []string{"read"}}}},
		{name: "empty policy", text: "", want: []Rule{}},
		{name: "syntax error", text: `path "a" { capabilities = ["read" }`, wantErr: "failed to parse policy"},
		{name: "unknown capability", text: `path "a" { capabilities = ["write"] }`, wantErr: `invalid capability "write"`},
		{name: "unknown top-level key", text: `paths "a" { capabilities = ["read"] }`, wantErr: `invalid key "paths"`},
		{name: "unsupported constraint", text: `path "a" { capabilities = ["read"] allowed_parameters = { "x" = [] } }`, wantErr: "not supported by vaultserver"},
		{name: "glob in the middle", text: `path "a/*/b" { capabilities = ["read"] }`, wantErr: "may only be the last character"},
		{name: "bad legacy policy", text: `path "a" { policy = "all" }`, wantErr: `invalid policy "all"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePolicy(tt.text)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParsePolicy error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("rules (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPriorityMatching follows the examples of Vault's "Priority matching"
// section (https://developer.hashicorp.com/vault/docs/concepts/policies#priority-matching).
func TestPriorityMatching(t *testing.T) {
	tests := []struct {
		name   string
		p1, p2 string // p1 must have the lower priority
	}{
		{name: "wildcard earlier loses", p1: "secret/*", p2: "secret/a"},
		{name: "plus earlier loses", p1: "secret/+/x", p2: "secret/a/+"},
		{name: "glob end loses", p1: "secret/a/*", p2: "secret/a/+"},
		{name: "more plus loses", p1: "secret/+/+/x", p2: "secret/+/b/x"},
		{name: "shorter loses", p1: "secret/a*", p2: "secret/ab*"},
		{name: "lexicographically smaller loses", p1: "secret/a/b", p2: "secret/a/c"},
		{name: "exact beats glob", p1: "kv/data/app/*", p2: "kv/data/app/db"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !lowerPriority(tt.p1, tt.p2) || lowerPriority(tt.p2, tt.p1) {
				t.Errorf("want %q < %q in priority", tt.p1, tt.p2)
			}
		})
	}
}

func TestCapabilitiesWithPlusAndDeny(t *testing.T) {
	p := &principal{rules: []Rule{
		{Path: "kv/data/+/db", Capabilities: []string{"read"}},
		{Path: "kv/data/team/db", Capabilities: []string{"create"}},
		{Path: "kv/data/team/db", Capabilities: []string{"update"}}, // another policy, same path: merged
		{Path: "kv/data/secret/*", Capabilities: []string{"deny"}},
		{Path: "kv/data/secret/*", Capabilities: []string{"read"}},
	}}
	tests := []struct {
		path string
		want []string
	}{
		{path: "kv/data/app/db", want: []string{"read"}},
		{path: "kv/data/app/x/db", want: []string{"deny"}},
		{path: "kv/data/team/db", want: []string{"create", "update"}},
		{path: "kv/data/secret/db", want: []string{"deny"}},
		{path: "kv/data/other", want: []string{"deny"}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, p.capabilities(tt.path)); diff != "" {
				t.Errorf("capabilities (-want +got):\n%s", diff)
			}
		})
	}
	if !p.hasMountAccess("kv") || p.hasMountAccess("legacy") {
		t.Error("mount access: want kv yes, legacy no")
	}
}

// call is one request of a table test against a running server.
type call struct {
	name       string
	method     string
	path       string
	token      string
	body       string
	wantStatus int
	want       map[string]any // space-separated key path -> value
}

func runCalls(t *testing.T, addr string, calls []call) {
	t.Helper()
	for _, st := range calls {
		t.Run(st.name, func(t *testing.T) {
			r := do(t, addr, st.method, st.path, st.token, st.body)
			if r.status != st.wantStatus {
				t.Fatalf("%s %s: status %d, want %d (body %v)", st.method, st.path, r.status, st.wantStatus, r.body)
			}
			for k, want := range st.want {
				if diff := cmp.Diff(want, field(r.body, strings.Fields(k)...)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", k, diff)
				}
			}
		})
	}
}

func startClock(t *testing.T, opts Options) (*Server, string, *FakeClock) {
	t.Helper()
	clock := NewFakeClock(time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC))
	opts.Now = clock.Now
	if opts.RootToken == "" {
		opts.RootToken = rootToken
	}
	s := New(opts)
	addr, err := s.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, addr, clock
}

// TestTokenLifecycle: a token from auth/token/create with a policy written
// through sys/policies/acl; lookup-self, renew-self (capped at the
// explicit max TTL with Vault's warning), expiry by the server's clock.
func TestTokenLifecycle(t *testing.T) {
	s, addr, clock := startClock(t, Options{})
	runCalls(t, addr, []call{
		{name: "write policy", method: "PUT", path: "/v1/sys/policies/acl/app", token: rootToken,
			body: `{"policy":"path \"kv/data/app/*\" { capabilities = [\"read\", \"create\"] }"}`, wantStatus: 204},
		{name: "bad policy refused", method: "PUT", path: "/v1/sys/policies/acl/bad", token: rootToken,
			body: `{"policy":"path \"a\" { capabilities = [\"fly\"] }"}`, wantStatus: 400},
		{name: "read policy", method: "GET", path: "/v1/sys/policies/acl/app", token: rootToken, wantStatus: 200,
			want: map[string]any{"data name": "app"}},
	})
	r := do(t, addr, "POST", "/v1/auth/token/create", rootToken, `{"policies":["app"],"ttl":"1h","explicit_max_ttl":"90m","display_name":"ci"}`)
	if r.status != 200 {
		t.Fatalf("create: %d %v", r.status, r.body)
	}
	tok, _ := field(r.body, "auth", "client_token").(string)
	if !strings.HasPrefix(tok, "hvs.") || field(r.body, "auth", "lease_duration") != 3600.0 || field(r.body, "auth", "renewable") != true {
		t.Fatalf("create answered %v", r.body)
	}
	if diff := cmp.Diff([]any{"app", "default"}, field(r.body, "auth", "policies")); diff != "" {
		t.Errorf("policies (-want +got):\n%s", diff)
	}
	runCalls(t, addr, []call{
		{name: "lookup-self", method: "GET", path: "/v1/auth/token/lookup-self", token: tok, wantStatus: 200,
			want: map[string]any{"data ttl": 3600.0, "data display_name": "token-ci", "data explicit_max_ttl": 5400.0,
				"data expire_time": "2026-07-01T11:00:00Z", "data renewable": true, "data id": tok}},
		{name: "policy applies", method: "POST", path: "/v1/kv/data/app/db", token: tok, body: `{"data":{"p":"x"}}`, wantStatus: 200},
		{name: "outside the policy", method: "GET", path: "/v1/kv/data/other", token: tok, wantStatus: 403},
		{name: "capabilities-self", method: "POST", path: "/v1/sys/capabilities-self", token: tok, body: `{"paths":["kv/data/app/db"]}`, wantStatus: 200,
			want: map[string]any{"data capabilities": []any{"create", "read"}, "data kv/data/app/db": []any{"create", "read"}}},
	})
	clock.Advance(50 * time.Minute)
	runCalls(t, addr, []call{
		{name: "renew within max", method: "PUT", path: "/v1/auth/token/renew-self", token: tok, body: `{"increment":"30m"}`, wantStatus: 200,
			want: map[string]any{"auth lease_duration": 1800.0, "warnings": nil}},
	})
	clock.Advance(20 * time.Minute)
	runCalls(t, addr, []call{
		{name: "renew capped at max TTL", method: "PUT", path: "/v1/auth/token/renew-self", token: tok, body: `{}`, wantStatus: 200,
			want: map[string]any{"auth lease_duration": 1200.0,
				"warnings": []any{`TTL of "1h0m0s" exceeded the effective max_ttl of "20m0s"; TTL value is capped accordingly`}}},
	})
	if n := s.Counts()["renew-self"]; n != 2 {
		t.Errorf("renew-self count %d, want 2", n)
	}
	clock.Advance(20 * time.Minute)
	runCalls(t, addr, []call{
		{name: "expired token refused", method: "GET", path: "/v1/auth/token/lookup-self", token: tok, wantStatus: 403,
			want: map[string]any{"errors": []any{"permission denied"}}},
		{name: "root never expires", method: "GET", path: "/v1/auth/token/lookup-self", token: rootToken, wantStatus: 200,
			want: map[string]any{"data ttl": 0.0, "data expire_time": nil}},
	})

	// Tokens built in Go: without the default policy renew-self is denied
	// by the ACL; with it, a non-renewable token gets Vault's 400.
	bare, err := s.CreateToken(TokenOptions{Policies: []string{"app"}, NoDefaultPolicy: true, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := s.CreateToken(TokenOptions{TTL: time.Hour, NotRenewable: true})
	if err != nil {
		t.Fatal(err)
	}
	runCalls(t, addr, []call{
		{name: "no default policy", method: "POST", path: "/v1/auth/token/renew-self", token: bare, wantStatus: 403},
		{name: "not renewable", method: "POST", path: "/v1/auth/token/renew-self", token: fixed, wantStatus: 400,
			want: map[string]any{"errors": []any{"lease is not renewable"}}},
		{name: "revoke-self", method: "POST", path: "/v1/auth/token/revoke-self", token: fixed, wantStatus: 204},
		{name: "revoked token refused", method: "GET", path: "/v1/auth/token/lookup-self", token: fixed, wantStatus: 403},
	})
	if _, err := s.CreateToken(TokenOptions{Policies: []string{"nope"}}); err == nil {
		t.Error("CreateToken with an unknown policy succeeded")
	}
	if !s.RevokeToken(bare) || s.RevokeToken("unknown") {
		t.Error("RevokeToken: want true for a known token, false for an unknown one")
	}
	if r := do(t, addr, "GET", "/v1/auth/token/lookup-self", bare, ""); r.status != 403 {
		t.Errorf("revoked token: status %d, want 403", r.status)
	}
}

// TestAppRole: enable the method, create a role, read its role ID, issue
// a secret ID, log in; wrong and expired secret IDs get Vault's 400.
func TestAppRole(t *testing.T) {
	s, addr, clock := startClock(t, Options{Policies: map[string]string{"app": `path "kv/data/app/*" { capabilities = ["read"] }`}})
	runCalls(t, addr, []call{
		{name: "enable", method: "POST", path: "/v1/sys/auth/ci", token: rootToken, body: `{"type":"approle"}`, wantStatus: 204},
		{name: "enable twice", method: "POST", path: "/v1/sys/auth/ci", token: rootToken, body: `{"type":"approle"}`, wantStatus: 400},
		{name: "enable unknown type", method: "POST", path: "/v1/sys/auth/x", token: rootToken, body: `{"type":"ldap"}`, wantStatus: 400},
		{name: "list auth", method: "GET", path: "/v1/sys/auth", token: rootToken, wantStatus: 200,
			want: map[string]any{"data ci/ type": "approle", "data token/ type": "token"}},
		{name: "create role", method: "POST", path: "/v1/auth/ci/role/deployer", token: rootToken,
			body: `{"token_policies":"app","token_ttl":"20m","token_max_ttl":"30m","secret_id_ttl":"1h"}`, wantStatus: 204},
		{name: "read role", method: "GET", path: "/v1/auth/ci/role/deployer", token: rootToken, wantStatus: 200,
			want: map[string]any{"data token_ttl": 1200.0, "data token_policies": []any{"app"}}},
	})
	roleID, _ := field(do(t, addr, "GET", "/v1/auth/ci/role/deployer/role-id", rootToken, "").body, "data", "role_id").(string)
	secretID, _ := field(do(t, addr, "POST", "/v1/auth/ci/role/deployer/secret-id", rootToken, "").body, "data", "secret_id").(string)
	if roleID == "" || secretID == "" {
		t.Fatal("no role ID or secret ID")
	}
	login := fmt.Sprintf(`{"role_id":%q,"secret_id":%q}`, roleID, secretID)
	r := do(t, addr, "POST", "/v1/auth/ci/login", "", login)
	if r.status != 200 || field(r.body, "auth", "lease_duration") != 1200.0 {
		t.Fatalf("login: %d %v", r.status, r.body)
	}
	tok, _ := field(r.body, "auth", "client_token").(string)
	runCalls(t, addr, []call{
		{name: "token works", method: "GET", path: "/v1/auth/token/lookup-self", token: tok, wantStatus: 200,
			want: map[string]any{"data path": "auth/ci/login", "data policies": []any{"app", "default"}}},
		{name: "wrong secret ID", method: "POST", path: "/v1/auth/ci/login", body: fmt.Sprintf(`{"role_id":%q,"secret_id":"nope"}`, roleID), wantStatus: 400,
			want: map[string]any{"errors": []any{"invalid role or secret ID"}}},
		{name: "wrong role ID", method: "POST", path: "/v1/auth/ci/login", body: fmt.Sprintf(`{"role_id":"nope","secret_id":%q}`, secretID), wantStatus: 400},
		{name: "role management needs a token", method: "GET", path: "/v1/auth/ci/role/deployer/role-id", token: tok, wantStatus: 403},
	})
	clock.Advance(15 * time.Minute)
	runCalls(t, addr, []call{
		{name: "renew capped by the role's max TTL", method: "PUT", path: "/v1/auth/token/renew-self", token: tok, wantStatus: 200,
			want: map[string]any{"auth lease_duration": 900.0}},
	})
	clock.Advance(time.Hour)
	runCalls(t, addr, []call{
		{name: "token expired", method: "GET", path: "/v1/auth/token/lookup-self", token: tok, wantStatus: 403},
		{name: "secret ID expired", method: "POST", path: "/v1/auth/ci/login", body: login, wantStatus: 400},
	})
	if got := s.Counts(); got["login:ci"] != 1 || got["login-failed:ci"] != 3 {
		t.Errorf("counts %v, want 1 login and 3 failures", got)
	}
}

// fakeTokenReview is a kube-apiserver TokenReview endpoint that knows one
// token per service account; the real one is used in e2e/vault_test.go.
func fakeTokenReview(t *testing.T, reviewer string, tokens map[string]string) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/apis/authentication.k8s.io/v1/tokenreviews" || r.Header.Get("Authorization") != "Bearer "+reviewer {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var tr authnv1.TokenReview
		_ = json.NewDecoder(r.Body).Decode(&tr)
		if user, ok := tokens[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: user, UID: "uid-1"}, Audiences: tr.Spec.Audiences}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(tr)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestKubernetesLogin(t *testing.T) {
	kube := fakeTokenReview(t, "reviewer-jwt", map[string]string{
		"jwt-deployer": "system:serviceaccount:maasctl:deployer",
		"jwt-other":    "system:serviceaccount:default:other",
	})
	s, addr, _ := startClock(t, Options{AuthMounts: map[string]string{"kubernetes": "kubernetes"}, TokenReviewClient: kube.Client(),
		Policies: map[string]string{"app": `path "kv/data/app/*" { capabilities = ["read"] }`}})
	cfg, _ := json.Marshal(map[string]string{"kubernetes_host": kube.URL, "token_reviewer_jwt": "reviewer-jwt"})
	runCalls(t, addr, []call{
		{name: "login before config", method: "POST", path: "/v1/auth/kubernetes/login", body: `{"role":"maasctl","jwt":"jwt-deployer"}`, wantStatus: 400},
		{name: "config", method: "POST", path: "/v1/auth/kubernetes/config", token: rootToken, body: string(cfg), wantStatus: 204},
		{name: "config read hides the reviewer JWT", method: "GET", path: "/v1/auth/kubernetes/config", token: rootToken, wantStatus: 200,
			want: map[string]any{"data kubernetes_host": kube.URL, "data token_reviewer_jwt": nil}},
		{name: "role", method: "POST", path: "/v1/auth/kubernetes/role/maasctl", token: rootToken,
			body: `{"bound_service_account_names":["deployer"],"bound_service_account_namespaces":["maasctl"],"token_policies":["app"],"token_ttl":600}`, wantStatus: 204},
		{name: "role without bindings", method: "POST", path: "/v1/auth/kubernetes/role/bad", token: rootToken, body: `{}`, wantStatus: 400},
		{name: "unknown role", method: "POST", path: "/v1/auth/kubernetes/login", body: `{"role":"nope","jwt":"jwt-deployer"}`, wantStatus: 400,
			want: map[string]any{"errors": []any{`invalid role name "nope"`}}},
		{name: "invalid JWT", method: "POST", path: "/v1/auth/kubernetes/login", body: `{"role":"maasctl","jwt":"forged"}`, wantStatus: 403,
			want: map[string]any{"errors": []any{"permission denied"}}},
		{name: "service account not bound", method: "POST", path: "/v1/auth/kubernetes/login", body: `{"role":"maasctl","jwt":"jwt-other"}`, wantStatus: 403,
			want: map[string]any{"errors": []any{"service account name not authorized"}}},
		{name: "login", method: "POST", path: "/v1/auth/kubernetes/login", body: `{"role":"maasctl","jwt":"jwt-deployer"}`, wantStatus: 200,
			want: map[string]any{"auth lease_duration": 600.0, "auth metadata service_account_name": "deployer", "auth policies": []any{"app", "default"}}},
	})
	if errs := s.LoginErrors(); len(errs) != 1 || !strings.Contains(errs[0], "not authenticated") {
		t.Errorf("LoginErrors = %q, want the one TokenReview refusal", errs)
	}
}

func TestMountsAPI(t *testing.T) {
	s, addr, _ := startClock(t, Options{Policies: map[string]string{"reader": `path "sys/mounts/*" { capabilities = ["read"] }`}})
	reader, err := s.CreateToken(TokenOptions{Policies: []string{"reader"}})
	if err != nil {
		t.Fatal(err)
	}
	runCalls(t, addr, []call{
		{name: "enable kv v1", method: "POST", path: "/v1/sys/mounts/legacy", token: rootToken, body: `{"type":"kv","options":{"version":"1"}}`, wantStatus: 204},
		{name: "enable kv-v2", method: "POST", path: "/v1/sys/mounts/team/kv", token: rootToken, body: `{"type":"kv-v2"}`, wantStatus: 204},
		{name: "enable twice", method: "POST", path: "/v1/sys/mounts/legacy", token: rootToken, body: `{"type":"kv"}`, wantStatus: 400},
		{name: "enable another engine", method: "POST", path: "/v1/sys/mounts/pki", token: rootToken, body: `{"type":"pki"}`, wantStatus: 400},
		{name: "enable denied", method: "POST", path: "/v1/sys/mounts/x", token: reader, body: `{"type":"kv"}`, wantStatus: 403},
		{name: "mount detail", method: "GET", path: "/v1/sys/mounts/team/kv", token: reader, wantStatus: 200,
			want: map[string]any{"data type": "kv", "data options version": "2"}},
		{name: "mount detail of nothing", method: "GET", path: "/v1/sys/mounts/none", token: rootToken, wantStatus: 400},
		{name: "lookup finds the nested mount", method: "GET", path: "/v1/sys/internal/ui/mounts/team/kv/app/db", token: rootToken, wantStatus: 200,
			want: map[string]any{"data path": "team/kv/"}},
		{name: "write to the new v1 mount", method: "POST", path: "/v1/legacy/app", token: rootToken, body: `{"a":"b"}`, wantStatus: 204},
		{name: "disable", method: "DELETE", path: "/v1/sys/mounts/legacy", token: rootToken, wantStatus: 204},
		{name: "gone", method: "GET", path: "/v1/legacy/app", token: rootToken, wantStatus: 404},
	})
	if got := s.Paths("team/kv"); len(got) != 0 || !slices.Equal(s.Paths("legacy"), nil) {
		t.Errorf("paths %v / %v, want none", got, s.Paths("legacy"))
	}
}
