package vault

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/vault/api"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/maasctl/maasctl/e2e/vaultserver"
)

// ---- unit tests ----

func TestParseKeyPath(t *testing.T) {
	tests := []struct {
		in        string
		path, key string
		wantErr   string
	}{
		{in: "kv/data/lab/rhoai-deployer:token", path: "kv/data/lab/rhoai-deployer", key: "token"},
		{in: "kv/lab/a:b:c", path: "kv/lab/a:b", key: "c"},
		{in: "kv/lab/deployer", wantErr: "want PATH:KEY"},
		{in: "kv/lab/deployer:", wantErr: "non-empty path and key"},
		{in: ":token", wantErr: "non-empty path and key"},
		{in: "kv//x:token", wantErr: "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, k, err := ParseKeyPath(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || p != tt.path || k != tt.key {
				t.Errorf("ParseKeyPath = %q, %q, %v; want %q, %q", p, k, err, tt.path, tt.key)
			}
		})
	}
}

func TestLocationFor(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		version  int
		wantData string
		wantErr  string
	}{
		{name: "v2 logical", path: "kv/cloudnativepg/maas-postgres", version: 2, wantData: "kv/data/cloudnativepg/maas-postgres"},
		{name: "v2 data/", path: "kv/data/lab/rhoai-deployer", version: 2, wantData: "kv/data/lab/rhoai-deployer"},
		{name: "v1", path: "legacy/lab/rhoai-deployer", version: 1, wantData: "legacy/lab/rhoai-deployer"},
		{name: "bad version", path: "kv/x", version: 3, wantErr: "want 1 or 2"},
		{name: "mount only", path: "kv", version: 2, wantErr: "names the mount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loc, err := LocationFor(tt.path, tt.version)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || loc.DataPath() != tt.wantData {
				t.Errorf("LocationFor = %+v (%v), data path %q, want %q", loc, err, loc.DataPath(), tt.wantData)
			}
		})
	}
}

// TestPolicyHCLParsesBack: what Policy.HCL prints is what a Vault policy
// parser reads (vaultserver parses with the HCL library Vault uses).
func TestPolicyHCLParsesBack(t *testing.T) {
	p := Policy{Header: "header\n\nsecond paragraph", Rules: []PolicyRule{
		{Path: "kv/data/cloudnativepg/maas-postgres", Capabilities: []string{"create", "read"}, Comment: "db"},
		{Path: `odd/"quoted"\path`, Capabilities: []string{"read"}},
		{Path: "auth/token/renew-self", Capabilities: []string{"update"}},
	}}
	rules, err := vaultserver.ParsePolicy(p.HCL())
	if err != nil {
		t.Fatalf("ParsePolicy:\n%s\n%v", p.HCL(), err)
	}
	var got []PolicyRule
	for _, r := range rules {
		got = append(got, PolicyRule{Path: r.Path, Capabilities: r.Capabilities})
	}
	want := []PolicyRule{
		{Path: "kv/data/cloudnativepg/maas-postgres", Capabilities: []string{"create", "read"}},
		{Path: `odd/"quoted"\path`, Capabilities: []string{"read"}},
		{Path: "auth/token/renew-self", Capabilities: []string{"update"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s\n%s", diff, p.HCL())
	}
	if !strings.HasPrefix(p.HCL(), "# header\n#\n# second paragraph\n") {
		t.Errorf("header not rendered as comments:\n%s", p.HCL())
	}
}

func TestNewClientAuthConfig(t *testing.T) {
	tests := []struct {
		name    string
		auth    AuthOptions
		env     map[string]string
		wantErr string
		source  string
	}{
		{name: "unknown method", auth: AuthOptions{Method: "ldap"}, wantErr: `unknown auth method "ldap"`},
		{name: "kubernetes without role", auth: AuthOptions{Method: AuthKubernetes}, wantErr: "needs a role"},
		{name: "approle without role ID", auth: AuthOptions{Method: AuthAppRole}, env: map[string]string{EnvSecretID: "s"}, wantErr: "set VAULT_ROLE_ID"},
		{name: "approle without secret ID", auth: AuthOptions{Method: AuthAppRole}, env: map[string]string{EnvRoleID: "r"}, wantErr: "set VAULT_SECRET_ID"},
		{name: "approle from env", auth: AuthOptions{Method: AuthAppRole}, env: map[string]string{EnvRoleID: "r", EnvSecretID: "s"},
			source: "AppRole login at auth/approle"},
		{name: "kubernetes other mount", auth: AuthOptions{Method: AuthKubernetes, Role: "maasctl", MountPath: "/k8s-prod/"},
			source: "Kubernetes login at auth/k8s-prod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearVaultEnv(t)
			t.Setenv(EnvRoleID, "")
			t.Setenv(EnvSecretID, "")
			t.Setenv(api.EnvVaultAddress, "http://127.0.0.1:1")
			t.Setenv(api.EnvVaultToken, "hvs.must-not-be-sent")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := NewClient(Options{Auth: tt.auth})
			if tt.wantErr != "" {
				if !errors.Is(err, ErrLoginConfig) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want ErrLoginConfig with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.TokenSource() != tt.source || c.API().Token() != "" {
				t.Errorf("source %q (want %q); token set before login: %v", c.TokenSource(), tt.source, c.API().Token() != "")
			}
		})
	}
}

// ---- integration tests against vaultserver (or a real Vault) ----

// enableAppRole enables AppRole at a fresh path, with a role whose token
// carries a policy of rules, and returns the mount, role ID and secret ID.
func (b *backend) enableAppRole(t *testing.T, rules []vaultserver.Rule, roleParams map[string]any) (mount, roleID, secretID string) {
	t.Helper()
	ctx := context.Background()
	mount = "approle-" + strings.ToLower(mustPassword(t)[:8])
	if err := b.root.Sys().EnableAuthWithOptionsWithContext(ctx, mount, &api.EnableAuthOptions{Type: "approle"}); err != nil {
		t.Fatalf("enable approle: %v", err)
	}
	t.Cleanup(func() { _ = b.root.Sys().DisableAuthWithContext(context.Background(), mount) })
	policy := b.policyWith(t, rules)
	params := map[string]any{"token_policies": policy}
	for k, v := range roleParams {
		params[k] = v
	}
	if _, err := b.root.Logical().WriteWithContext(ctx, "auth/"+mount+"/role/maasctl", params); err != nil {
		t.Fatalf("create role: %v", err)
	}
	s, err := b.root.Logical().ReadWithContext(ctx, "auth/"+mount+"/role/maasctl/role-id")
	if err != nil || s == nil {
		t.Fatalf("read role ID: %v", err)
	}
	roleID, _ = s.Data["role_id"].(string)
	s, err = b.root.Logical().WriteWithContext(ctx, "auth/"+mount+"/role/maasctl/secret-id", nil)
	if err != nil || s == nil {
		t.Fatalf("issue secret ID: %v", err)
	}
	secretID, _ = s.Data["secret_id"].(string)
	return mount, roleID, secretID
}

// policyWith writes an ACL policy of rules and returns its name.
func (b *backend) policyWith(t *testing.T, rules []vaultserver.Rule) string {
	t.Helper()
	name := "maasctl-test-" + strings.ToLower(mustPassword(t)[:10])
	var p Policy
	for _, r := range rules {
		p.Rules = append(p.Rules, PolicyRule{Path: r.Path, Capabilities: r.Capabilities})
	}
	if err := b.root.Sys().PutPolicyWithContext(context.Background(), name, p.HCL()); err != nil {
		t.Fatalf("write policy %s: %v", name, err)
	}
	t.Cleanup(func() { _ = b.root.Sys().DeletePolicyWithContext(context.Background(), name) })
	return name
}

func (b *backend) kvRules() []vaultserver.Rule {
	return []vaultserver.Rule{{Path: b.kv2Mount + "/data/" + b.prefix + "/*", Capabilities: []string{"create", "read"}}}
}

func TestAppRoleLogin(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	mount, roleID, secretID := b.enableAppRole(t, b.kvRules(), nil)
	dir := t.TempDir()
	roleFile, secretFile := filepath.Join(dir, "role-id"), filepath.Join(dir, "secret-id")
	if err := os.WriteFile(roleFile, []byte(roleID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte(secretID+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		auth AuthOptions
	}{
		{name: "environment", env: map[string]string{EnvRoleID: roleID, EnvSecretID: secretID}, auth: AuthOptions{Method: AuthAppRole, MountPath: mount}},
		{name: "files", auth: AuthOptions{Method: AuthAppRole, MountPath: mount, RoleIDFile: roleFile, SecretIDFile: secretFile}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(EnvRoleID, "")
			t.Setenv(EnvSecretID, "")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := NewClient(Options{Address: b.addr, Auth: tt.auth})
			if err != nil {
				t.Fatal(err)
			}
			var g passwordGenerator
			logical := b.kv2Mount + "/" + b.secretPath(t)
			if _, created, err := c.EnsureSecret(ctx, logical, g.generate); err != nil || !created {
				t.Fatalf("EnsureSecret after AppRole login: created=%v err=%v", created, err)
			}
			info, err := c.LookupSelf(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.Logins() != 1 || info.TTL <= 0 || !strings.Contains(info.String(), "AppRole login at auth/"+mount) {
				t.Errorf("logins %d, info %s", c.Logins(), info)
			}
			assertNoSecret(t, info.String(), roleID, secretID, c.API().Token())
		})
	}

	t.Run("wrong secret ID", func(t *testing.T) {
		wrong := "wrong-" + mustPassword(t)
		c, err := NewClient(Options{Address: b.addr, Auth: AuthOptions{Method: AuthAppRole, MountPath: mount, RoleID: roleID, SecretID: wrong}})
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = c.ReadSecret(ctx, b.kv2Mount+"/"+b.secretPath(t))
		t.Logf("error: %v", err)
		var le *LoginError
		if !errors.As(err, &le) || !errors.Is(err, ErrLoginFailed) {
			t.Fatalf("error %v (%T), want a *LoginError", err, err)
		}
		for _, want := range []string{"auth/" + mount, "invalid role or secret ID"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q", want)
			}
		}
		assertNoSecret(t, err.Error(), wrong, roleID)
	})
}

// clockServer is a vaultserver whose clock the test moves.
type clockServer struct {
	srv   *vaultserver.Server
	addr  string
	root  string
	clock *vaultserver.FakeClock
	api   *api.Client
}

func newClockServer(t *testing.T, opts vaultserver.Options) *clockServer {
	t.Helper()
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")
	cs := &clockServer{root: "hvs.root-" + mustPassword(t), clock: vaultserver.NewFakeClock(time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC))}
	opts.RootToken, opts.Now = cs.root, cs.clock.Now
	cs.srv = vaultserver.New(opts)
	addr, err := cs.srv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.srv.Close() })
	cs.addr = addr
	cfg := api.DefaultConfig()
	cfg.Address, cfg.MaxRetries = addr, 0
	cs.api, err = api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs.api.SetToken(cs.root)
	return cs
}

const kvPolicy = `path "kv/data/app/*" { capabilities = ["create", "read"] }`

// TestTokenExpiredMidRun is case B11's expiry: a token that worked, then
// passed its TTL by Vault's clock, is reported as expired (when, and how
// to log in again), not as a policy problem; a revoked one as invalid.
func TestTokenExpiredMidRun(t *testing.T) {
	cs := newClockServer(t, vaultserver.Options{Policies: map[string]string{"app": kvPolicy}})
	ctx := testContext(t)
	tok, err := cs.srv.CreateToken(vaultserver.TokenOptions{Policies: []string{"app"}, TTL: time.Hour, ExplicitMaxTTL: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(api.EnvVaultToken, tok)
	c, err := NewClient(Options{Address: cs.addr})
	if err != nil {
		t.Fatal(err)
	}
	var g passwordGenerator
	if _, _, err := c.EnsureSecret(ctx, "kv/app/db", g.generate); err != nil {
		t.Fatal(err)
	}
	if _, err := c.LookupSelf(ctx); err != nil { // learns the expiry, as KeepAlive does
		t.Fatal(err)
	}
	cs.clock.Advance(3 * time.Hour)

	_, _, err = c.ReadSecret(ctx, "kv/app/db")
	t.Logf("error: %v", err)
	var te *TokenError
	if !errors.As(err, &te) || !errors.Is(err, ErrTokenInvalid) || !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("error %v (%T), want a *TokenError", err, err)
	}
	for _, want := range []string{"Vault token from VAULT_TOKEN expired at 2026-07-01T11:00:00Z", "Vault's clock says 2026-07-01T13:00:00Z",
		"kv/app/db", "export the new token as VAULT_TOKEN"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q", want)
		}
	}
	assertNoSecret(t, err.Error(), append(g.secrets(), tok)...)

	revoked, err := cs.srv.CreateToken(vaultserver.TokenOptions{Policies: []string{"app"}, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rc, err := NewClient(Options{Address: cs.addr, Token: revoked})
	if err != nil {
		t.Fatal(err)
	}
	cs.srv.RevokeToken(revoked)
	_, _, err = rc.ReadSecret(ctx, "kv/app/db")
	if !errors.As(err, &te) || !te.ExpiredAt.IsZero() || !strings.Contains(err.Error(), "expired or was revoked") {
		t.Errorf("revoked token: error %v, want a *TokenError without an expiry", err)
	}

	// A valid token whose policy lacks the path is a policy problem.
	other, err := cs.srv.CreateToken(vaultserver.TokenOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	oc, err := NewClient(Options{Address: cs.addr, Token: other})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = oc.ReadSecret(ctx, "kv/app/db")
	var pe *PermissionError
	if !errors.As(err, &pe) || errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("policy denial: error %v, want a *PermissionError only", err)
	}
	if !strings.Contains(err.Error(), "the mount does not exist, or the token's policies grant nothing below it") {
		t.Errorf("mount lookup refusal with a valid token should blame the policy or the mount: %v", err)
	}
}

// TestAppRoleLogsInAgain: when the AppRole token expired (its max TTL
// passed while the run waited), the next request logs in again and works.
func TestAppRoleLogsInAgain(t *testing.T) {
	cs := newClockServer(t, vaultserver.Options{Policies: map[string]string{"app": kvPolicy}, AuthMounts: map[string]string{"approle": "approle"}})
	ctx := testContext(t)
	if _, err := cs.api.Logical().Write("auth/approle/role/maasctl", map[string]any{"token_policies": "app", "token_ttl": "10m", "token_max_ttl": "15m"}); err != nil {
		t.Fatal(err)
	}
	rid, _ := cs.api.Logical().Read("auth/approle/role/maasctl/role-id")
	sid, _ := cs.api.Logical().Write("auth/approle/role/maasctl/secret-id", nil)
	t.Setenv(EnvRoleID, rid.Data["role_id"].(string))
	t.Setenv(EnvSecretID, sid.Data["secret_id"].(string))
	c, err := NewClient(Options{Address: cs.addr, Auth: AuthOptions{Method: AuthAppRole}})
	if err != nil {
		t.Fatal(err)
	}
	var g passwordGenerator
	first, _, err := c.EnsureSecret(ctx, "kv/app/db", g.generate)
	if err != nil {
		t.Fatal(err)
	}
	cs.clock.Advance(time.Hour)
	got, found, err := c.ReadSecret(ctx, "kv/app/db")
	if err != nil || !found || !cmp.Equal(first, got) {
		t.Fatalf("ReadSecret after expiry: found=%v err=%v", found, err)
	}
	if c.Logins() != 2 || cs.srv.Counts()["login:approle"] != 2 {
		t.Errorf("logins: client %d, server %d; want 2", c.Logins(), cs.srv.Counts()["login:approle"])
	}

	// A secret ID that stopped working: the error says so and how to fix it.
	cs.clock.Advance(time.Hour)
	t.Setenv(EnvSecretID, "revoked-"+mustPassword(t))
	_, _, err = c.ReadSecret(ctx, "kv/app/db")
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrTokenInvalid) || !errors.Is(err, ErrLoginFailed) || !strings.Contains(err.Error(), "issue a new secret ID") {
		t.Errorf("error %v, want token invalid + login failed with a hint", err)
	}
}

// events collects KeepAlive events.
type events struct {
	mu  sync.Mutex
	evs []KeepAliveEvent
}

func (e *events) add(ev KeepAliveEvent) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *events) count(kind string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.Kind == kind {
			n++
		}
	}
	return n
}

func (e *events) all() []KeepAliveEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]KeepAliveEvent(nil), e.evs...)
}

// waitFor polls cond until it holds or the deadline passes: KeepAlive runs
// on the wall clock, which the test cannot move.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// realClockServer runs vaultserver on the wall clock, for KeepAlive.
func realClockServer(t *testing.T, opts vaultserver.Options) (*vaultserver.Server, string, *api.Client) {
	t.Helper()
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")
	opts.RootToken = "hvs.root-" + mustPassword(t)
	srv := vaultserver.New(opts)
	addr, err := srv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	cfg := api.DefaultConfig()
	cfg.Address, cfg.MaxRetries = addr, 0
	root, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	root.SetToken(opts.RootToken)
	return srv, addr, root
}

func TestKeepAliveRenews(t *testing.T) {
	srv, addr, _ := realClockServer(t, vaultserver.Options{})
	tok, err := srv.CreateToken(vaultserver.TokenOptions{TTL: 3 * time.Second, ExplicitMaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(Options{Address: addr, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	var evs events
	stop := c.KeepAlive(context.Background(), evs.add)
	t.Cleanup(stop)
	// Past the initial 3 s TTL, the token lives on only through renewals.
	waitFor(t, 30*time.Second, "three renewals", func() bool { return srv.Counts()["renew-self"] >= 3 })
	if _, err := c.LookupSelf(testContext(t)); err != nil {
		t.Fatalf("token dead despite renewals: %v", err)
	}
	stop()
	if evs.count(KeepAliveRenewed) < 3 {
		t.Errorf("events %v, want >= 3 renewals", evs.all())
	}
	for _, ev := range evs.all() {
		assertNoSecret(t, ev.Message, tok)
	}
}

func TestKeepAliveAtMaxTTL(t *testing.T) {
	t.Run("token: warns that it will expire", func(t *testing.T) {
		srv, addr, _ := realClockServer(t, vaultserver.Options{})
		tok, err := srv.CreateToken(vaultserver.TokenOptions{TTL: 2 * time.Second, ExplicitMaxTTL: 3 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv(api.EnvVaultToken, tok)
		c, err := NewClient(Options{Address: addr})
		if err != nil {
			t.Fatal(err)
		}
		var evs events
		stop := c.KeepAlive(context.Background(), evs.add)
		t.Cleanup(stop)
		waitFor(t, 30*time.Second, "the expiring event", func() bool { return evs.count(KeepAliveExpiring) == 1 })
		msg := evs.all()[len(evs.all())-1].Message
		for _, want := range []string{"VAULT_TOKEN", "max TTL is reached", "vault login"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
	})
	t.Run("approle: logs in again", func(t *testing.T) {
		srv, addr, root := realClockServer(t, vaultserver.Options{AuthMounts: map[string]string{"approle": "approle"}})
		if _, err := root.Logical().Write("auth/approle/role/maasctl", map[string]any{"token_ttl": "2s", "token_max_ttl": "3s"}); err != nil {
			t.Fatal(err)
		}
		rid, _ := root.Logical().Read("auth/approle/role/maasctl/role-id")
		sid, _ := root.Logical().Write("auth/approle/role/maasctl/secret-id", nil)
		c, err := NewClient(Options{Address: addr, Auth: AuthOptions{Method: AuthAppRole, RoleID: rid.Data["role_id"].(string), SecretID: sid.Data["secret_id"].(string)}})
		if err != nil {
			t.Fatal(err)
		}
		var evs events
		stop := c.KeepAlive(context.Background(), evs.add)
		t.Cleanup(stop)
		waitFor(t, 30*time.Second, "two logins after the first", func() bool { return evs.count(KeepAliveLoggedIn) >= 2 })
		if n := srv.Counts()["login:approle"]; n < 3 {
			t.Errorf("server saw %d logins, want >= 3", n)
		}
	})
	t.Run("root: nothing to do", func(t *testing.T) {
		_, addr, root := realClockServer(t, vaultserver.Options{})
		c, err := NewClient(Options{Address: addr, Token: root.Token()})
		if err != nil {
			t.Fatal(err)
		}
		var evs events
		c.KeepAlive(context.Background(), evs.add)() // stop waits for the goroutine
		if len(evs.all()) != 0 {
			t.Errorf("events for a root token: %v", evs.all())
		}
	})
}

// TestTLSEnvironment: VAULT_CACERT, VAULT_CAPATH and VAULT_SKIP_VERIFY are
// honoured like the vault CLI does (through api.DefaultConfig).
func TestTLSEnvironment(t *testing.T) {
	root := "hvs.root-" + mustPassword(t)
	srv := httptest.NewUnstartedServer(vaultserver.New(vaultserver.Options{RootToken: root}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the "untrusted" case fails handshakes on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr error
	}{
		{name: "untrusted", wantErr: ErrUnreachable},
		{name: "VAULT_CACERT", env: map[string]string{api.EnvVaultCACert: caFile}},
		{name: "VAULT_CAPATH", env: map[string]string{api.EnvVaultCAPath: dir}},
		{name: "VAULT_SKIP_VERIFY", env: map[string]string{api.EnvVaultSkipVerify: "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearVaultEnv(t)
			t.Setenv(api.EnvVaultMaxRetries, "0")
			t.Setenv(api.EnvVaultAddress, srv.URL)
			t.Setenv(api.EnvVaultToken, root)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := NewClient(Options{})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = c.EnsureSecret(testContext(t), "kv/tls/"+strings.ReplaceAll(tt.name, " ", "-"), (&passwordGenerator{}).generate)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), "VAULT_CACERT") {
					t.Fatalf("error %v, want %v with a VAULT_CACERT hint", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKubernetesAuthFakeReview: the Kubernetes method reads the JWT from
// its file at each login. The real TokenReview is exercised in
// e2e/vault_test.go; here a stand-in API server answers.
func TestKubernetesAuthFakeReview(t *testing.T) {
	jwt := "eyJ-" + mustPassword(t)
	kube := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var tr authnv1.TokenReview
		_ = json.NewDecoder(r.Body).Decode(&tr)
		tr.Status.Authenticated = tr.Spec.Token == jwt
		tr.Status.User.Username = "system:serviceaccount:maasctl:deployer"
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(tr)
	}))
	t.Cleanup(kube.Close)
	cs := newClockServer(t, vaultserver.Options{Policies: map[string]string{"app": kvPolicy}, AuthMounts: map[string]string{"k8s": "kubernetes"},
		TokenReviewClient: kube.Client()})
	if _, err := cs.api.Logical().Write("auth/k8s/config", map[string]any{"kubernetes_host": kube.URL}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.api.Logical().Write("auth/k8s/role/maasctl", map[string]any{"bound_service_account_names": "deployer",
		"bound_service_account_namespaces": "maasctl", "token_policies": "app"}); err != nil {
		t.Fatal(err)
	}
	jwtFile := filepath.Join(t.TempDir(), "token")
	ctx := testContext(t)
	tests := []struct {
		name    string
		content string // "-": no file
		role    string
		wantErr error
	}{
		{name: "no JWT file", content: "-", role: "maasctl", wantErr: ErrLoginConfig},
		{name: "wrong JWT", content: "not-" + jwt, role: "maasctl", wantErr: ErrLoginFailed},
		{name: "wrong role", content: jwt, role: "other", wantErr: ErrLoginFailed},
		{name: "login", content: jwt + "\n", role: "maasctl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_ = os.Remove(jwtFile)
			if tt.content != "-" {
				if err := os.WriteFile(jwtFile, []byte(tt.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := NewClient(Options{Address: cs.addr, Auth: AuthOptions{Method: AuthKubernetes, MountPath: "k8s", Role: tt.role, JWTFile: jwtFile}})
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = c.EnsureSecret(ctx, "kv/app/k8s", (&passwordGenerator{}).generate)
			if tt.wantErr != nil {
				t.Logf("error: %v", err)
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), "auth/k8s") {
					t.Fatalf("error %v, want %v naming auth/k8s", err, tt.wantErr)
				}
				assertNoSecret(t, err.Error(), jwt)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestReadKey(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	logical := b.kv2Mount + "/" + b.secretPath(t)
	if _, err := b.root.KVv2(b.kv2Mount).Put(ctx, b.secretPath(t), map[string]any{"token": " eyJhbGciOi.x.y\n", "empty": ""}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, key, want, wantErr string
	}{
		{name: "trimmed", path: logical, key: "token", want: "eyJhbGciOi.x.y"},
		{name: "data/ path", path: b.kv2Mount + "/data/" + b.secretPath(t), key: "token", want: "eyJhbGciOi.x.y"},
		{name: "missing key lists keys", path: logical, key: "tokn", wantErr: `no key "tokn" (keys: empty, token)`},
		{name: "empty value", path: logical, key: "empty", wantErr: "is empty"},
		{name: "missing secret", path: logical + "-none", key: "token", wantErr: "does not exist"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.ReadKey(ctx, tt.path, tt.key)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want %q", err, tt.wantErr)
				}
				assertNoSecret(t, err.Error(), "eyJhbGciOi.x.y")
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("ReadKey = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestKeepAliveBogusToken (a new user's trial, session 42): a token
// Vault never issued is not a policy question: the keep-alive's warning
// says Vault does not accept the token, not to check "read" on
// auth/token/lookup-self.
func TestKeepAliveBogusToken(t *testing.T) {
	_, addr, _ := realClockServer(t, vaultserver.Options{})
	c, err := NewClient(Options{Address: addr, Token: "bogus"})
	if err != nil {
		t.Fatal(err)
	}
	var evs events
	stop := c.KeepAlive(context.Background(), evs.add)
	t.Cleanup(stop)
	waitFor(t, 10*time.Second, "the failed event", func() bool { return evs.count(KeepAliveFailed) == 1 })
	msg := evs.all()[len(evs.all())-1].Message
	if !strings.Contains(msg, "Vault does not accept it") || strings.Contains(msg, "allowed?") {
		t.Errorf("keep-alive warning %q: want 'Vault does not accept it', no policy question", msg)
	}
	assertNoSecret(t, msg, "bogus")
}
