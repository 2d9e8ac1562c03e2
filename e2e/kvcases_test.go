package e2e

// The Vault parts of cases B10 and N11 (../shared/cases/SECOND-SET.md)
// against the Vault-API stand-in (e2e/vaultserver: no Vault or OpenBao
// server builds from the module proxy, testenv/RECIPE.md §6), configured
// through Vault's HTTP API as an operator would, and the built maasctl.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/vault/api"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/maasctl/maasctl/e2e/vaultserver"
	"github.com/maasctl/maasctl/steps"
)

// kvCaseMounts are the mounts of case B10's trigger state plus the default
// kv/ mount.
var kvCaseMounts = []vaultserver.Mount{{Path: "kv", Version: 2}, {Path: "secret", Version: 2}, {Path: "legacy", Version: 1}}

// vaultAPI is a root client of the cluster's Vault-API server.
func vaultAPI(t *testing.T, c *cluster) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address, cfg.MaxRetries = c.vaultAddr, 0
	vc, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vc.SetToken(c.vaultToken)
	return vc
}

func vaultWrite(t *testing.T, vc *api.Client, path string, body map[string]any) {
	t.Helper()
	if _, err := vc.Logical().WriteWithContext(context.Background(), path, body); err != nil {
		t.Fatalf("vault write %s: %v", path, err)
	}
}

// frontVault puts a loopback proxy in front of the cluster's Vault-API
// server, letting intercept see (and answer, returning true) each request
// first; maasctl then talks to the proxy.
func frontVault(t *testing.T, c *cluster, intercept func(w http.ResponseWriter, r *http.Request) bool) {
	t.Helper()
	vs := c.vault
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if intercept(w, r) {
			return
		}
		vs.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	c.vaultAddr = ts.URL
}

// vaultSteps, for --only, are the steps that read or write the database
// password in Vault and the two Secrets made from it (preflight runs on
// every run). The Vault cases prove those steps; a full install (four
// operators through the real OLM, the real Kuadrant, the DSC and the
// models: about 60 CPU-seconds of the control plane) proves nothing more
// about them. TestInstallEndToEnd and TestLifecycle run the whole install.
const vaultSteps = "database/secret,dbsecret/maas-db-config"

func secretPassword(t *testing.T, c *cluster, ns, name string) (string, string) {
	t.Helper()
	s, err := c.clients.Kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", ns, name, err)
	}
	return string(s.Data["password"]), s.ResourceVersion
}

// TestB10VaultKVVersionsAndCAS: the case's five tests. The trigger state is
// built through the API: secret/ (KV v2) with cas_required on the mount,
// legacy/ (KV v1), secret/maas/db at version 3 soft-deleted.
//
// Test 2 (a soft-deleted version 3 written as version 4 with cas=3) needs
// an explicit choice to replace a deleted password (case N11); maasctl's
// install never makes it, so here the run refuses naming version 3 and
// check-and-set 3 (never cas=0), and the vault package's
// TestReplaceDeletedOnCASRequiredMount shows the write itself.
//
// Second variants: KV v1 with no value (the case has one), the warning-only
// 404 also on `maasctl preflight`, and the advised data/ path working.
func TestB10VaultKVVersionsAndCAS(t *testing.T) {
	parallel(t)
	t.Run("logical path on a fresh cas_required mount", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{vault: vaultserver.Options{Mounts: kvCaseMounts}})
		vc := vaultAPI(t, c)
		vaultWrite(t, vc, "secret/config", map[string]any{"cas_required": true})
		r := c.install(t, "--only", vaultSteps, "--set", "database.vaultPath=secret/maas/db")
		mustSucceed(t, r)
		if n := c.vault.Versions("secret", "maas/db"); n != 1 {
			t.Errorf("Vault holds %d versions of secret/maas/db, want 1", n)
		}
		s, err := vc.Logical().Read("secret/data/maas/db")
		if err != nil || s == nil {
			t.Fatalf("GET secret/data/maas/db: %v", err)
		}
		inner, _ := s.Data["data"].(map[string]any)
		pw, _ := inner["password"].(string)
		got, _ := secretPassword(t, c, "rhoai-maas-db", "maas-postgres-secret")
		if pw == "" || got != pw {
			t.Errorf("secret/data/maas/db holds a password: %v; the cluster Secret has the same: %v", pw != "", got == pw)
		}
		assertNoSecret(t, c, pw, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	})

	t.Run("a concurrent writer wins the check-and-set", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{vault: vaultserver.Options{Mounts: kvCaseMounts}})
		vc := vaultAPI(t, c)
		vaultWrite(t, vc, "secret/config", map[string]any{"cas_required": true})
		const winner = "Winner0fTheCheckAndSetRace0123456789abcd"
		var once sync.Once
		frontVault(t, c, func(w http.ResponseWriter, r *http.Request) bool {
			if r.Method == http.MethodPut || r.Method == http.MethodPost {
				if r.URL.Path == "/v1/secret/data/maas/db" {
					// Between maasctl's read (absent) and its cas=0 write.
					once.Do(func() {
						vaultWrite(t, vc, "secret/data/maas/db", map[string]any{"data": map[string]any{"username": "maas", "password": winner}, "options": map[string]any{"cas": 0}})
					})
				}
			}
			return false
		})
		r := c.install(t, "--only", vaultSteps, "--set", "database.vaultPath=secret/maas/db")
		mustSucceed(t, r)
		mustContain(t, "database/secret progress", progress(r, "database/secret"), "lost a check-and-set race on secret/maas/db", "discarded the password it generated")
		if n, d := c.vault.Versions("secret", "maas/db"), c.vault.Data("secret", "maas/db"); n != 1 || d["password"] != winner {
			t.Errorf("Vault holds %d versions (the winner's value: %v), want only the winner's version 1", n, d["password"] == winner)
		}
		if got, _ := secretPassword(t, c, "rhoai-maas-db", "maas-postgres-secret"); got != winner {
			t.Errorf("the cluster Secret does not hold the winner's password: two passwords")
		}
	})

	// The refusals stop in preflight, before any write: one cluster serves
	// them all, each on its own Vault path.
	t.Run("refusals", func(t *testing.T) {
		c := newCaseCluster(t, caseOptions{noSim: true, vault: vaultserver.Options{Mounts: kvCaseMounts}})
		vc := vaultAPI(t, c)
		vaultWrite(t, vc, "secret/config", map[string]any{"cas_required": true})
		for i, pw := range []string{"first-version-value", "second-version-value", "third-version-value"} {
			vaultWrite(t, vc, "secret/data/maas/db", map[string]any{"data": map[string]any{"password": pw}, "options": map[string]any{"cas": i}})
		}
		vaultWrite(t, vc, "secret/delete/maas/db", map[string]any{"versions": []int{3}})
		vaultWrite(t, vc, "legacy/maas/db", map[string]any{"password": "legacy-value-kept"})

		t.Run("soft-deleted version 3", func(t *testing.T) {
			r := c.install(t, "--set", "database.vaultPath=secret/maas/db")
			mustFail(t, r)
			mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), "secret/maas/db", "latest version 3 was deleted", "check-and-set 3",
				"vault kv undelete -mount=secret -versions=3 maas/db")
			if strings.Contains(r.stdout+r.stderr, "cas=0") {
				t.Error("the output mentions cas=0, which fails after a soft delete")
			}
			if n := c.vault.Versions("secret", "maas/db"); n != 3 {
				t.Errorf("Vault holds %d versions, want 3", n)
			}
			assertNothingWritten(t, c)
		})

		for _, tt := range []struct{ name, path string }{
			{"KV v1 with a value", "legacy/maas/db"},
			{"KV v1 without a value", "legacy/maas/other"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				r := c.install(t, "--set", "database.vaultPath="+tt.path)
				mustFail(t, r)
				mustContain(t, "preflight failure", failure(r, steps.PreflightStepID), tt.path, "KV v1", "no write protection", "database.vaultAllowUnprotectedKVv1")
				if d := c.vault.Data("legacy", "maas/db"); d["password"] != "legacy-value-kept" {
					t.Error("the KV v1 value changed")
				}
				if p := c.vault.Paths("legacy"); len(p) != 1 {
					t.Errorf("KV v1 keys %v, want only maas/db", p)
				}
				assertNothingWritten(t, c)
			})
		}

		t.Run("KV v1 allowed: preflight says there is no write protection", func(t *testing.T) {
			r := c.maasctl(t, "preflight", "--set", "database.vaultPath=legacy/maas/db", "--set", "database.vaultAllowUnprotectedKVv1=true")
			mustContain(t, "preflight output", r.stdout+r.stderr, "KV v1", "no write protection")
			mustContain(t, "preflight output", r.stdout+r.stderr, "legacy/maas/db")
			if strings.Contains(r.stdout+r.stderr, "nothing was written. Use a KV v2 mount") {
				t.Error("preflight still refuses KV v1 with the allowance set")
			}
		})

		t.Run("404 with only warnings", func(t *testing.T) {
			// A Vault without the KV preflight lookup: maasctl takes the
			// mount for KV v1, as the vault CLI does; the KV v2 mount's
			// warning-only 404 must fail the run with the warning and the
			// data/ path.
			saved := c.vaultAddr
			t.Cleanup(func() { c.vaultAddr = saved })
			frontVault(t, c, func(w http.ResponseWriter, r *http.Request) bool {
				if strings.HasPrefix(r.URL.Path, "/v1/sys/internal/ui/mounts/") {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(`{"errors":[]}`))
					return true
				}
				return false
			})
			vaultWrite(t, vc, "kv/data/maas/db", map[string]any{"data": map[string]any{"password": "kv2-value"}})
			for _, cmd := range [][]string{{"install", "-o", "json"}, {"preflight"}} {
				r := c.maasctl(t, append(cmd, "--set", "database.vaultPath=kv/maas/db")...)
				mustFail(t, r)
				mustContain(t, strings.Join(cmd, " ")+" output", r.stdout+r.stderr, "404", "Invalid path for a versioned K/V secrets engine", "kv/data/maas/db")
				if strings.Contains(r.stdout+r.stderr, "kv2-value") {
					t.Error("the stored value appears in the output")
				}
			}
			assertNothingWritten(t, c)
			// The advised path works through the same Vault.
			r := c.maasctl(t, "preflight", "--set", "database.vaultPath=kv/data/maas/db")
			if strings.Contains(r.stdout+r.stderr, "Invalid path for a versioned K/V") {
				t.Errorf("the data/ path still gets the warning:\n%s", r.stdout)
			}
		})
	})
}

// TestN11DeletedLatestVersion: kv/cloudnativepg/maas-postgres at version 2,
// version 2 soft-deleted, the basic-auth Secret and maas-db-config holding
// version 1's value (the first run installs only the steps that read Vault,
// vaultSteps): a re-run writes nothing to Vault, the Secret or maas-db-config
// and exits non-zero naming the key, the version and the ways out.
// Second variants of the trigger state on the same cluster: the latest
// version destroyed (undelete impossible), and a version expired by the
// key's delete_version_after (hashicorp/vault#7644).
//
// The case's last sentence (an explicit choice to start a new password,
// then proven on the database as in B08) is `maasctl database
// rotate-password`: TestB08N11RotateOverDeletedVersion (b08_test.go).
func TestN11DeletedLatestVersion(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	r := c.install(t, "--only", vaultSteps)
	mustSucceed(t, r)
	vc := vaultAPI(t, c)
	v1 := c.vault.Data(vaultMount, vaultPath)["password"]
	if v1 == "" {
		t.Fatal("no password in Vault after the install")
	}
	pw, secretRV := secretPassword(t, c, "rhoai-maas-db", "maas-postgres-secret")
	if pw != v1 {
		t.Fatal("the Secret does not hold Vault's version 1")
	}
	cfg, err := c.clients.Kube.CoreV1().Secrets("redhat-ai-gateway-infra").Get(context.Background(), "maas-db-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfgRV := cfg.ResourceVersion

	unchanged := func(t *testing.T, versions int) {
		t.Helper()
		if n := c.vault.Versions(vaultMount, vaultPath); n != versions {
			t.Errorf("Vault holds %d versions, want %d: nothing may be written", n, versions)
		}
		if _, rv := secretPassword(t, c, "rhoai-maas-db", "maas-postgres-secret"); rv != secretRV {
			t.Error("the basic-auth Secret was written")
		}
		cfg, err := c.clients.Kube.CoreV1().Secrets("redhat-ai-gateway-infra").Get(context.Background(), "maas-db-config", metav1.GetOptions{})
		if err != nil || cfg.ResourceVersion != cfgRV {
			t.Errorf("maas-db-config was written (or is gone: %v)", err)
		}
	}
	rerun := func(t *testing.T, want ...string) {
		t.Helper()
		r := c.install(t)
		mustFail(t, r)
		mustContain(t, "re-run output", r.stdout+r.stderr, append([]string{"kv/cloudnativepg/maas-postgres", "not a missing password"}, want...)...)
		assertNoSecret(t, c, v1, map[string]string{"stdout": r.stdout, "stderr": r.stderr})
	}

	t.Run("version 2 soft-deleted", func(t *testing.T) {
		vaultWrite(t, vc, "kv/data/cloudnativepg/maas-postgres", map[string]any{"data": map[string]any{"username": "maas", "password": "Version2NeverReachedTheDatabase0123456"}, "options": map[string]any{"cas": 1}})
		if _, err := vc.Logical().Delete("kv/data/cloudnativepg/maas-postgres"); err != nil {
			t.Fatal(err)
		}
		rerun(t, "latest version 2 was deleted", "vault kv undelete -mount=kv -versions=2 cloudnativepg/maas-postgres", "rotate the password on purpose")
		unchanged(t, 2)
	})
	t.Run("version 2 destroyed", func(t *testing.T) {
		vaultWrite(t, vc, "kv/destroy/cloudnativepg/maas-postgres", map[string]any{"versions": []int{2}})
		rerun(t, "latest version 2 was destroyed", "cannot be undeleted", "rotate the password on purpose")
		unchanged(t, 2)
	})
	t.Run("version 3 expired by delete_version_after", func(t *testing.T) {
		vaultWrite(t, vc, "kv/metadata/cloudnativepg/maas-postgres", map[string]any{"delete_version_after": "2s"})
		vaultWrite(t, vc, "kv/data/cloudnativepg/maas-postgres", map[string]any{"data": map[string]any{"username": "maas", "password": "Version3ExpiresOnItsOwn0123456789abcdef"}, "options": map[string]any{"cas": 2}})
		time.Sleep(2500 * time.Millisecond)
		rerun(t, "latest version 3 was deleted", "vault kv undelete -mount=kv -versions=3 cloudnativepg/maas-postgres")
		unchanged(t, 3)
	})
}
