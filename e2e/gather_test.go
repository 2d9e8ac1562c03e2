package e2e

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// checkGather runs maasctl gather with the install's debug log and greps
// the archive: no database password, Vault token, cluster token or API key
// anywhere, while the objects, conditions, events and checkpoints are there.
func checkGather(t *testing.T, c *cluster, p *plane, debugLog string) run {
	t.Helper()
	archive := filepath.Join(c.dir, "support.tar.gz")
	r := c.maasctl(t, "gather", "--archive", archive, "--debug-log", debugLog)
	if r.exit != 0 {
		t.Fatalf("gather exit %d\n%s\n%s", r.exit, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, archive) {
		t.Errorf("gather output does not name the archive: %s", r.stdout)
	}
	files := untar(t, archive)
	pw := c.vault.Data(vaultMount, vaultPath)["password"]
	if pw == "" {
		t.Fatal("no database password in Vault: the grep would prove nothing")
	}
	keys := p.IssuedKeys()
	if len(keys) < 3 {
		t.Fatalf("only %d API keys were issued: the grep would prove little", len(keys))
	}
	secrets := map[string]string{"database password": pw, "Vault token": c.vaultToken, "cluster token": p.token}
	for i, k := range keys {
		secrets[fmt.Sprintf("API key #%d", i)] = k
	}
	for name, body := range files {
		for what, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s contains the %s", name, what)
			}
		}
	}
	for _, want := range []struct{ file, text string }{
		{"objects/redhat-ai-gateway-infra/secret/maas-db-config.yaml", "DB_CONNECTION_URL: '<redacted: "},
		{"objects/rhoai-maas-db/secret/maas-postgres-secret.yaml", "password: '<redacted: "},
		{"objects/_cluster/datasciencecluster.datasciencecluster.opendatahub.io/default-dsc.yaml", "modelsAsAService"},
		{"objects/models-as-a-service/maassubscription.maas.opendatahub.io/llama-coder-default.yaml", "tokenRateLimits"},
		{"conditions.txt", "Kuadrant"},
		{"maasctl/checkpoints.yaml", "verify/status"},
		{"verify.json", "MAAS-V001"},
		{"doctor.json", "findings"},
		{"README.txt", "scrubbed"},
	} {
		if !strings.Contains(files[want.file], want.text) {
			t.Errorf("archive file %s: want %q; have %d files", want.file, want.text, len(files))
		}
	}
	if _, ok := files["debug/"+filepath.Base(debugLog)]; !ok {
		t.Errorf("the debug log %s is not in the archive", filepath.Base(debugLog))
	}
	events := false
	for name := range files {
		events = events || strings.HasPrefix(name, "events/")
	}
	if !events {
		t.Error("no events in the archive")
	}
	if st, err := os.Stat(archive); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("archive mode: %v %v", st, err)
	}
	return r
}

// untar returns the files of a tar.gz by their path below the top folder.
func untar(t *testing.T, p string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(h.Name, "/")
		out[rest] = string(b)
	}
}
