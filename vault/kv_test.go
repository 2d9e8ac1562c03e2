package vault

// KV semantics of cases B10 and N11 against the Vault stand-in on loopback
// through the real hashicorp/vault/api client. These tests use only the
// API that existed before the fix (EnsureSecret, ReadSecret), so they can
// be run against the old code to see them fail; kvwrite_test.go tests the
// new API.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"

	"github.com/maasctl/maasctl/e2e/vaultserver"
)

// kvServer is a stand-in with a KV v2 mount "kv" and a KV v1 mount
// "legacy", its own fake clock, and a root client.
type kvServer struct {
	srv   *vaultserver.Server
	addr  string
	root  *api.Client
	token string
	clock *vaultserver.FakeClock
}

func newKVServer(t *testing.T) *kvServer {
	t.Helper()
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")
	k := &kvServer{token: "hvs.root-" + mustPassword(t), clock: vaultserver.NewFakeClock(time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC))}
	k.srv = vaultserver.New(vaultserver.Options{RootToken: k.token, Now: k.clock.Now,
		Mounts: []vaultserver.Mount{{Path: "kv", Version: 2}, {Path: "legacy", Version: 1}}})
	addr, err := k.srv.Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.srv.Close() })
	k.addr = addr
	k.root = k.api(t, addr)
	return k
}

func (k *kvServer) api(t *testing.T, addr string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.MaxRetries = addr, 0
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(k.token)
	return c
}

// client is the Client under test for addr (the server, or a proxy).
func (k *kvServer) client(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := NewClient(Options{Address: addr, Token: k.token})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// write stores data through the API as an operator would.
func (k *kvServer) write(t *testing.T, path string, body map[string]any) {
	t.Helper()
	if _, err := k.root.Logical().WriteWithContext(context.Background(), path, body); err != nil {
		t.Fatalf("write %s: %v", path, err)
	}
}

// writeV2 writes version data of kv/<path> with cas.
func (k *kvServer) writeV2(t *testing.T, path, password string, cas int) {
	t.Helper()
	k.write(t, "kv/data/"+path, map[string]any{"data": map[string]any{"password": password}, "options": map[string]any{"cas": cas}})
}

// proxy serves the stand-in on another loopback port, letting intercept
// answer a request first (it returns true when it did).
func (k *kvServer) proxy(t *testing.T, intercept func(w http.ResponseWriter, r *http.Request) bool) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if intercept != nil && intercept(w, r) {
			return
		}
		k.srv.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

// noMountLookup answers the KV preflight lookup with 404, as a Vault
// without sys/internal/ui/mounts does; the vault CLI and Resolve then take
// the mount for KV v1.
func noMountLookup(w http.ResponseWriter, r *http.Request) bool {
	if strings.HasPrefix(r.URL.Path, "/v1/sys/internal/ui/mounts/") {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"errors":[]}`))
		return true
	}
	return false
}

// TestKVv1RefusedWithoutOptIn is case B10 test 4: on a KV v1 mount there is
// no check-and-set, so create-only cannot be promised; without the explicit
// allowance the write is refused and the stored value stays as it is, with
// an existing value (the case) and with none (second variant).
func TestKVv1RefusedWithoutOptIn(t *testing.T) {
	for _, existing := range []bool{true, false} {
		name := map[bool]string{true: "existing value", false: "absent"}[existing]
		t.Run(name, func(t *testing.T) {
			k := newKVServer(t)
			if existing {
				k.write(t, "legacy/maas/db", map[string]any{"password": "old-value-kept"})
			}
			var g passwordGenerator
			_, _, err := k.client(t, k.addr).EnsureSecret(testContext(t), "legacy/maas/db", g.generate)
			t.Logf("error: %v", err)
			if err == nil {
				t.Fatal("EnsureSecret on a KV v1 mount succeeded without the KV v1 allowance")
			}
			mustContainAll(t, err.Error(), "legacy/maas/db", "KV v1", "no write protection", "check-and-set", "database.vaultAllowUnprotectedKVv1", "nothing was written")
			if n := g.calls.Load(); n != 0 {
				t.Errorf("generate called %d times, want 0", n)
			}
			want := map[string]string(nil)
			if existing {
				want = map[string]string{"password": "old-value-kept"}
			}
			if got := k.srv.Data("legacy", "maas/db"); !equalMaps(got, want) {
				t.Errorf("stored value changed: %v keys, want %v", keys(got), keys(want))
			}
		})
	}
}

// TestDeletedLatestIsNotMissing is case N11 in the vault package: the
// latest KV v2 version is soft-deleted (DELETE /v1/kv/data/...), expired by
// delete_version_after (hashicorp/vault#7644), or destroyed. ReadSecret and
// EnsureSecret must not take that for "no secret": an error names the
// path, the version and the ways out, and nothing is generated or written.
func TestDeletedLatestIsNotMissing(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, k *kvServer)
		// want are substrings of the error; unwanted must not appear.
		want, unwanted []string
	}{
		{name: "soft-deleted", setup: func(t *testing.T, k *kvServer) {
			k.writeV2(t, "cloudnativepg/maas-postgres", "v1-in-the-database", 0)
			k.writeV2(t, "cloudnativepg/maas-postgres", "v2-deleted", 1)
			if _, err := k.root.Logical().DeleteWithContext(context.Background(), "kv/data/cloudnativepg/maas-postgres"); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"latest version 2 was deleted at 2026-07-01T10:00:00Z", "vault kv undelete -mount=kv -versions=2 cloudnativepg/maas-postgres", "rotate the password on purpose", "check-and-set 2"}},
		{name: "delete_version_after passed", setup: func(t *testing.T, k *kvServer) {
			k.write(t, "kv/metadata/cloudnativepg/maas-postgres", map[string]any{"delete_version_after": "1h"})
			k.writeV2(t, "cloudnativepg/maas-postgres", "v1-expired", 0)
			k.clock.Advance(time.Hour)
		}, want: []string{"latest version 1 was deleted at 2026-07-01T11:00:00Z", "vault kv undelete -mount=kv -versions=1", "rotate the password on purpose"}},
		{name: "destroyed", setup: func(t *testing.T, k *kvServer) {
			k.writeV2(t, "cloudnativepg/maas-postgres", "v1-in-the-database", 0)
			k.writeV2(t, "cloudnativepg/maas-postgres", "v2-destroyed", 1)
			k.write(t, "kv/destroy/cloudnativepg/maas-postgres", map[string]any{"versions": []int{2}})
		}, want: []string{"latest version 2 was destroyed", "cannot be undeleted", "rotate the password on purpose"}, unwanted: []string{"vault kv undelete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newKVServer(t)
			tt.setup(t, k)
			before := k.srv.Versions("kv", "cloudnativepg/maas-postgres")
			c := k.client(t, k.addr)
			ctx := testContext(t)

			_, found, rerr := c.ReadSecret(ctx, "kv/cloudnativepg/maas-postgres")
			var g passwordGenerator
			_, created, eerr := c.EnsureSecret(ctx, "kv/cloudnativepg/maas-postgres", g.generate)
			for op, err := range map[string]error{"ReadSecret": rerr, "EnsureSecret": eerr} {
				t.Logf("%s: %v", op, err)
				if err == nil {
					t.Fatalf("%s succeeded (found=%v created=%v) on a deleted latest version", op, found, created)
				}
				mustContainAll(t, err.Error(), append([]string{"kv/cloudnativepg/maas-postgres", "not a missing password"}, tt.want...)...)
				for _, u := range append([]string{"metadata delete"}, tt.unwanted...) {
					if strings.Contains(err.Error(), u) {
						t.Errorf("%s error advises %q", op, u)
					}
				}
				assertNoSecret(t, err.Error(), append(g.secrets(), "v1-in-the-database", "v2-deleted", "v1-expired", k.token)...)
			}
			if n := g.calls.Load(); n != 0 {
				t.Errorf("generate called %d times, want 0", n)
			}
			if after := k.srv.Versions("kv", "cloudnativepg/maas-postgres"); after != before {
				t.Errorf("Vault holds %d versions, had %d: nothing may be written", after, before)
			}
		})
	}
}

// TestWarningOnly404 is case B10 test 5: a KV v2 mount addressed without
// data/ answers 404 with no error and only a warning. Resolve takes the
// mount for KV v1 when the mount lookup answers 404 (as the vault CLI
// does); the read must then fail with Vault's warning and the data/ path,
// never return "no data" or empty data.
func TestWarningOnly404(t *testing.T) {
	k := newKVServer(t)
	k.writeV2(t, "maas/db", "stored", 0)
	addr := k.proxy(t, noMountLookup)
	c := k.client(t, addr)
	ctx := testContext(t)

	for _, path := range []string{"kv/maas/db", "kv/maas/absent"} {
		var g passwordGenerator
		data, created, err := c.EnsureSecret(ctx, path, g.generate)
		t.Logf("EnsureSecret %s: %v", path, err)
		if err == nil {
			t.Fatalf("EnsureSecret %s succeeded (keys %v, created=%v) on a 404 with only warnings", path, keys(data), created)
		}
		dataPath := "kv/data/" + strings.TrimPrefix(path, "kv/")
		mustContainAll(t, err.Error(), "404", "Invalid path for a versioned K/V secrets engine", "'vault kv get'", dataPath, "sys/internal/ui/mounts")
		assertNoSecret(t, err.Error(), "stored", k.token)
		_, found, err := c.ReadSecret(ctx, path)
		if err == nil {
			t.Fatalf("ReadSecret %s: found=%v and no error on a 404 with only warnings", path, found)
		}
		if n := g.calls.Load(); n != 0 {
			t.Errorf("generate called %d times, want 0", n)
		}
	}
	if n := k.srv.Versions("kv", "maas/absent"); n != 0 {
		t.Errorf("%d versions written at kv/maas/absent, want 0", n)
	}
	// The advice works: the data/ path reaches the secret.
	data, created, err := c.EnsureSecret(ctx, "kv/data/maas/db", (&passwordGenerator{}).generate)
	if err != nil || created || data["password"] != "stored" {
		t.Errorf("EnsureSecret kv/data/maas/db through the same Vault: created=%v err=%v, want the stored secret", created, err)
	}
}

// TestCASRequired: with cas_required on the mount (case B10's trigger
// state) or on one key's metadata written before its first version (second
// variant), a create without cas fails in Vault; EnsureSecret always sends
// cas and creates version 1 exactly once.
func TestCASRequired(t *testing.T) {
	for _, where := range []string{"mount config", "key metadata"} {
		t.Run(where, func(t *testing.T) {
			k := newKVServer(t)
			if where == "mount config" {
				k.write(t, "kv/config", map[string]any{"cas_required": true})
			} else {
				k.write(t, "kv/metadata/maas/db", map[string]any{"cas_required": true})
			}
			_, err := k.root.Logical().WriteWithContext(context.Background(), "kv/data/maas/db", map[string]any{"data": map[string]any{"password": "x"}})
			if err == nil || !strings.Contains(err.Error(), "check-and-set parameter required for this call") {
				t.Fatalf("a write without cas: %v, want Vault's check-and-set required error", err)
			}
			var g passwordGenerator
			c := k.client(t, k.addr)
			first, created, err := c.EnsureSecret(testContext(t), "kv/maas/db", g.generate)
			if err != nil || !created {
				t.Fatalf("EnsureSecret: created=%v err=%v", created, err)
			}
			second, created, err := c.EnsureSecret(testContext(t), "kv/data/maas/db", g.generate)
			if err != nil || created || !equalMaps(first, second) {
				t.Fatalf("second EnsureSecret: created=%v err=%v same=%v", created, err, equalMaps(first, second))
			}
			if n := k.srv.Versions("kv", "maas/db"); n != 1 {
				t.Errorf("%d versions, want 1", n)
			}
		})
	}
}

func mustContainAll(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("message lacks %q:\n%s", sub, s)
		}
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
