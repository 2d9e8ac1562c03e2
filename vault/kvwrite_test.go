package vault

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// competitor returns an intercept that, on the first write to apiPath,
// first stores competing data itself (through the stand-in, as another
// writer would) and then lets the intercepted write go on: the write loses
// the check-and-set race between its read and its write.
func (k *kvServer) competitor(t *testing.T, apiPath string, write func()) func(http.ResponseWriter, *http.Request) bool {
	var once sync.Once
	return func(w http.ResponseWriter, r *http.Request) bool {
		if (r.Method == http.MethodPut || r.Method == http.MethodPost) && r.URL.Path == "/v1/"+apiPath {
			once.Do(write)
		}
		return false
	}
}

// TestEnsureLostRace is case B10 test 3: another writer stores the secret
// between EnsureSecretWith's read and its check-and-set write. The loss is
// reported (LostRace and a note), the winner's data is returned and kept,
// and exactly one version exists: never two passwords. Second variant: the
// race happens on an explicit replacement of a deleted latest version
// (cas = its number, on a cas_required mount), where someone else restored
// the secret meanwhile.
func TestEnsureLostRace(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		k := newKVServer(t)
		addr := k.proxy(t, k.competitor(t, "kv/data/maas/db", func() { k.writeV2(t, "maas/db", "winner", 0) }))
		var g passwordGenerator
		r, err := k.client(t, addr).EnsureSecretWith(testContext(t), "kv/maas/db", g.generate, WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !r.LostRace || r.Created || r.Data["password"] != "winner" || r.Version != 1 {
			t.Fatalf("LostRace=%v Created=%v version=%d winner's data=%v", r.LostRace, r.Created, r.Version, r.Data["password"] == "winner")
		}
		if len(r.Notes) != 1 {
			t.Fatalf("notes %q, want one", r.Notes)
		}
		mustContainAll(t, r.Notes[0], "lost a check-and-set race on kv/maas/db", "version 1", "cas=0", "discarded")
		assertNoSecret(t, r.Notes[0], append(g.secrets(), "winner")...)
		if n, d := k.srv.Versions("kv", "maas/db"), k.srv.Data("kv", "maas/db"); n != 1 || d["password"] != "winner" {
			t.Errorf("Vault holds %d versions (winner kept: %v), want 1 with the winner's data", n, d["password"] == "winner")
		}
	})
	t.Run("replacing a deleted version", func(t *testing.T) {
		k := newKVServer(t)
		k.write(t, "kv/config", map[string]any{"cas_required": true})
		k.writeV2(t, "maas/db", "v1", 0)
		k.writeV2(t, "maas/db", "v2", 1)
		k.writeV2(t, "maas/db", "v3", 2)
		k.write(t, "kv/delete/maas/db", map[string]any{"versions": []int{3}})
		addr := k.proxy(t, k.competitor(t, "kv/data/maas/db", func() { k.writeV2(t, "maas/db", "restored-by-someone", 3) }))
		var g passwordGenerator
		r, err := k.client(t, addr).EnsureSecretWith(testContext(t), "kv/maas/db", g.generate, WriteOptions{ReplaceDeleted: true})
		if err != nil {
			t.Fatal(err)
		}
		if !r.LostRace || r.Created || r.Data["password"] != "restored-by-someone" || r.Version != 4 {
			t.Fatalf("LostRace=%v Created=%v version=%d, want the other writer's version 4", r.LostRace, r.Created, r.Version)
		}
		mustContainAll(t, strings.Join(r.Notes, "\n"), "version 4", "(version 3)", "cas=3")
		if n := k.srv.Versions("kv", "maas/db"); n != 4 {
			t.Errorf("%d versions, want 4", n)
		}
	})
}

// TestReplaceDeletedOnCASRequiredMount is case B10 test 2: the trigger
// state (cas_required on the mount, version 3 soft-deleted) with the
// explicit choice to replace: the write uses cas=3, not cas=0, and becomes
// version 4. Without the choice it is a *DeletedError (N11).
func TestReplaceDeletedOnCASRequiredMount(t *testing.T) {
	k := newKVServer(t)
	k.write(t, "kv/config", map[string]any{"cas_required": true})
	for i, pw := range []string{"v1", "v2", "v3"} {
		k.writeV2(t, "maas/db", pw, i)
	}
	k.srv.DeleteLatest("kv", "maas/db")
	c := k.client(t, k.addr)
	ctx := testContext(t)

	st, err := c.Inspect(ctx, "kv/maas/db")
	if err != nil || st.Found || !st.Deleted || st.Destroyed || st.Version != 3 || st.DeletionTime.IsZero() {
		t.Fatalf("Inspect = %+v, %v; want version 3 deleted", st, err)
	}
	var g passwordGenerator
	_, err = c.EnsureSecretWith(ctx, "kv/maas/db", g.generate, WriteOptions{})
	var de *DeletedError
	if !errors.As(err, &de) || de.Version != 3 || !errors.Is(err, ErrSecretDeleted) {
		t.Fatalf("without ReplaceDeleted: %v, want a *DeletedError for version 3", err)
	}
	r, err := c.EnsureSecretWith(ctx, "kv/maas/db", g.generate, WriteOptions{ReplaceDeleted: true})
	if err != nil {
		t.Fatal(err)
	}
	if !r.Created || r.LostRace || r.Version != 4 || r.Data["password"] != g.secrets()[0] {
		t.Fatalf("Created=%v LostRace=%v Version=%d, want version 4 created from the generated data", r.Created, r.LostRace, r.Version)
	}
	if d := k.srv.Data("kv", "maas/db"); d["password"] != g.secrets()[0] {
		t.Error("Vault does not hold the generated password as the latest version")
	}
}

// TestReplaceSecret: an explicit rotation writes version N+1 with cas=N on
// a cas_required mount; a stale N is a *CASConflictError naming both
// versions and writes nothing; KV v1 is refused without the allowance.
func TestReplaceSecret(t *testing.T) {
	k := newKVServer(t)
	k.write(t, "kv/config", map[string]any{"cas_required": true})
	k.writeV2(t, "maas/db", "one", 0)
	c := k.client(t, k.addr)
	ctx := testContext(t)

	v, err := c.ReplaceSecret(ctx, "kv/maas/db", 1, map[string]string{"password": "two-secret-value"}, WriteOptions{})
	if err != nil || v != 2 {
		t.Fatalf("ReplaceSecret with cas 1: version %d, %v; want 2", v, err)
	}
	_, err = c.ReplaceSecret(ctx, "kv/maas/db", 1, map[string]string{"password": "stale-secret-value"}, WriteOptions{})
	var ce *CASConflictError
	if !errors.As(err, &ce) || ce.Sent != 1 || ce.Current != 2 || !errors.Is(err, ErrCASConflict) {
		t.Fatalf("stale ReplaceSecret: %v, want a *CASConflictError sent 1, current 2", err)
	}
	mustContainAll(t, err.Error(), "kv/maas/db", "expected version 1", "version 2 now", "nothing was written")
	assertNoSecret(t, err.Error(), "stale-secret-value", "two-secret-value", k.token)
	if d := k.srv.Data("kv", "maas/db"); d["password"] != "two-secret-value" || k.srv.Versions("kv", "maas/db") != 2 {
		t.Error("the stale write changed Vault")
	}

	k.write(t, "legacy/maas/db", map[string]any{"password": "v1-value"})
	if _, err := c.ReplaceSecret(ctx, "legacy/maas/db", 0, map[string]string{"password": "new"}, WriteOptions{}); !errors.Is(err, ErrKVv1Unprotected) {
		t.Fatalf("ReplaceSecret on KV v1: %v, want ErrKVv1Unprotected", err)
	}
	if d := k.srv.Data("legacy", "maas/db"); d["password"] != "v1-value" {
		t.Error("the refused KV v1 write changed Vault")
	}
	if _, err := c.ReplaceSecret(ctx, "legacy/maas/db", 0, map[string]string{"password": "new"}, WriteOptions{AllowKVv1: true}); err != nil {
		t.Fatalf("ReplaceSecret on KV v1 with the allowance: %v", err)
	}
}

// TestWriteWarningOnly404: the write side of case B10 test 5. A KV v2
// mount taken for KV v1 answers the PUT with 404 and only a warning; the
// api client's KVv1.Put would say only "Code: 404. Errors:". The error
// quotes the warning ('vault kv put') and gives the data/ path, and
// scrubs the value that was sent.
func TestWriteWarningOnly404(t *testing.T) {
	k := newKVServer(t)
	addr := k.proxy(t, noMountLookup)
	_, err := k.client(t, addr).ReplaceSecret(testContext(t), "kv/maas/db", 0, map[string]string{"password": "sent-secret-value"}, WriteOptions{AllowKVv1: true})
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrInvalidPath) {
		t.Fatalf("error %v, want ErrInvalidPath", err)
	}
	mustContainAll(t, err.Error(), "404 to PUT /v1/kv/maas/db", "'vault kv put'", "kv/data/maas/db")
	assertNoSecret(t, err.Error(), "sent-secret-value", k.token)
	if n := k.srv.Versions("kv", "maas/db"); n != 0 {
		t.Errorf("%d versions written, want 0", n)
	}
}

// TestNon2xxWithWarnings: any non-2xx answer is an error, and the message
// carries Vault's warnings too. A fake on loopback answers 500 with an
// error and a warning, which no stand-in path produces.
func TestNon2xxWithWarnings(t *testing.T) {
	clearVaultEnv(t)
	t.Setenv("VAULT_MAX_RETRIES", "0")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasPrefix(r.URL.Path, "/v1/sys/internal/ui/mounts/") {
			_, _ = io.Copy(w, bytes.NewBufferString(`{"data":{"path":"kv/","type":"kv","options":{"version":"2"}}}`))
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.Copy(w, bytes.NewBufferString(`{"errors":["storage backend unavailable"],"warnings":["a warning from vault"]}`))
	}))
	defer ts.Close()
	c, err := NewClient(Options{Address: ts.URL, Token: "t-" + mustPassword(t)})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.ReadSecret(context.Background(), "kv/maas/db")
	if err == nil {
		t.Fatal("ReadSecret succeeded on a 500")
	}
	mustContainAll(t, err.Error(), "500", "storage backend unavailable", "a warning from vault")
}
