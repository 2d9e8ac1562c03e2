package gather

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

const (
	dbPassword = "Zq8-unit-db-password-Xy"
	apiKey     = "sk-oai-UNITtestKEYabcdefghijklmnop"
	vaultTok   = "hvs.CAESIunitVaultTokenABCDEFGHIJ"
)

// fakeLogs serves one log per container; the kuadrant operator's is
// unreachable, like kwok's fake kubelet.
type fakeLogs struct{}

func (fakeLogs) Logs(_ context.Context, ns, pod, container string, tail int64) ([]byte, error) {
	if strings.HasPrefix(pod, "kuadrant") {
		return nil, errors.New("dial tcp 127.0.0.1:10250: connect: connection refused")
	}
	return []byte("level=info msg=\"connecting to postgresql://maas:" + dbPassword + "@maas-postgres-rw:5432/maas\"\nlevel=debug key validated Authorization: Bearer " + apiKey + "\n"), nil
}

func unpack(t *testing.T, p string) map[string]string {
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
		b, _ := io.ReadAll(tr)
		_, rest, _ := strings.Cut(h.Name, "/")
		out[rest] = string(b)
	}
}

func TestGatherRedacts(t *testing.T) {
	b, err := os.ReadFile("../verify/testdata/healthy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := verify.ParseObjects(b)
	if err != nil {
		t.Fatal(err)
	}
	extra, err := verify.ParseObjects([]byte(`
apiVersion: v1
kind: Secret
metadata:
  name: maas-postgres-secret
  namespace: rhoai-maas-db
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: '{"stringData":{"password":"` + dbPassword + `"}}'
stringData: {username: maas, password: "` + dbPassword + `"}
---
apiVersion: v1
kind: Pod
metadata: {name: maas-api-1, namespace: redhat-ai-gateway-infra}
spec:
  containers:
  - name: maas-api
    env:
    - {name: DB_PASSWORD, value: "` + dbPassword + `"}
    - {name: LOG_LEVEL, value: debug}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: maasctl-checkpoints, namespace: maasctl}
data: {platform.gateway: '{"step":"platform/gateway","result":"done"}'}
---
apiVersion: v1
kind: Event
metadata: {name: e1, namespace: llm-coding-assistant}
type: Warning
reason: BackOff
involvedObject: {kind: Pod, name: llama-coder-1}
message: "retrying with token=` + vaultTok + `"
lastTimestamp: "2026-11-30T07:00:00Z"
`))
	if err != nil {
		t.Fatal(err)
	}
	r := verify.NewStaticReader(verify.Identity{User: "admin"}, append(objs, extra...)...)
	r.NotServed[verify.CSVGVK.GroupKind()] = true
	dir := t.TempDir()
	debug := filepath.Join(dir, "maasctl.log")
	if err := os.WriteFile(debug, []byte(`{"msg":"vault login","X-Vault-Token":"`+vaultTok+`"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "g.tar.gz")
	res, err := Gather(context.Background(), Options{
		Inventory: inventory.Default(), Reader: r, Logs: fakeLogs{}, Output: out, DebugLogs: []string{debug},
		Now: func() time.Time { return time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("archive %v mode %v", err, st)
	}
	files := unpack(t, out)
	for name, body := range files {
		for _, s := range []string{dbPassword, apiKey, vaultTok, "dGVzdGVudi1sbGFtYS1jb2Rlci1rZXk", "unit-test-pw"} {
			if strings.Contains(body, s) {
				t.Errorf("%s contains secret %q", name, s)
			}
		}
	}
	for _, want := range []struct{ file, text string }{
		{"objects/redhat-ai-gateway-infra/secret/maas-db-config.yaml", "DB_CONNECTION_URL: '<redacted: "},
		{"objects/rhoai-maas-db/secret/maas-postgres-secret.yaml", "password: '<redacted: 23 bytes>'"},
		{"objects/redhat-ai-gateway-infra/pod/maas-api-1.yaml", "value: debug"},
		{"objects/_cluster/datasciencecluster.datasciencecluster.opendatahub.io/default-dsc.yaml", "phase: Ready"},
		{"conditions.txt", "Kuadrant"},
		{"events/llm-coding-assistant.txt", "BackOff"},
		{"logs/redhat-ai-gateway-infra/maas-api-1/maas-api.log", "postgresql://maas:<redacted>@"},
		{"maasctl/checkpoints.yaml", "platform/gateway"},
		{"verify.json", "MAAS-V001"},
		{"doctor.json", "findings"},
		{"debug/maasctl.log", "vault login"},
		{"errors.txt", "ClusterServiceVersion: not served"},
		{"errors.txt", "logs of openshift-operators/kuadrant-operator-controller-manager-abc"},
		{"README.txt", "scrubbed"},
	} {
		if !strings.Contains(files[want.file], want.text) {
			t.Errorf("%s: want %q in:\n%s", want.file, want.text, files[want.file])
		}
	}
	if strings.Contains(files["objects/rhoai-maas-db/secret/maas-postgres-secret.yaml"], lastApplied) {
		t.Error("last-applied annotation kept")
	}
	if len(res.Files) != len(files) || len(res.Problems) == 0 {
		t.Errorf("result lists %d files (archive %d), %d problems", len(res.Files), len(files), len(res.Problems))
	}
}

func TestScrub(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"api key", "key sk-oai-abcDEF123_-x end", "key sk-oai-<redacted> end"},
		{"bearer", "Authorization: Bearer eyJhbGciOi.abc", "Authorization: Bearer <redacted>"},
		{"db url", "postgresql://maas:p%40ss@h:5432/maas", "postgresql://maas:<redacted>@h:5432/maas"},
		{"vault token", "token hvs.ABCDEFGHIJKLMNOPQRSTUVWX", "token <redacted-vault-token>"},
		{"password field", `{"password":"hunter2hunter2"}`, `{"password":"<redacted>"}`},
		{"structural redaction kept", "api-key: <redacted: 5 bytes>", "api-key: <redacted: 5 bytes>"},
		{"unrelated words", "automountServiceAccountToken: true", "automountServiceAccountToken: true"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Scrub(tc.in); got != tc.want {
				t.Errorf("Scrub(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// TestReadmeIsNotScrubbed: the archive's README is maasctl's own fixed
// text; scrubbed like the collected files it read "bearer <redacted>".
func TestReadmeIsNotScrubbed(t *testing.T) {
	a := &archive{files: map[string][]byte{}, secrets: []string{"s3cret-value"}}
	r := readme(Options{ToolVersion: "v1", TailLines: 200}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	if Scrub(r) == r {
		t.Fatal("the README no longer contains words Scrub changes: this test proves nothing; drop it")
	}
	a.addOwn("README.txt", []byte(r))
	if got := string(a.files["README.txt"]); got != r || !strings.Contains(got, "bearer tokens") {
		t.Errorf("README changed:\n%s", got)
	}
}

// TestRedactCountsDecodedBytes: a Secret's data value is base64; its
// redacted size is that of the decoded value (40, not 42 for padding).
func TestRedactCountsDecodedBytes(t *testing.T) {
	for _, n := range []int{1, 2, 3, 40, 41} {
		v := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("x"), n))
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"},
			"data": map[string]any{"password": v}, "stringData": map[string]any{"token": strings.Repeat("y", n)}}}
		out := Redact(u)
		want := fmt.Sprintf("<redacted: %d bytes>", n)
		if got, _, _ := unstructured.NestedString(out.Object, "data", "password"); got != want {
			t.Errorf("data of %d bytes: %q, want %q", n, got, want)
		}
		if got, _, _ := unstructured.NestedString(out.Object, "stringData", "token"); got != want {
			t.Errorf("stringData of %d bytes: %q, want %q", n, got, want)
		}
	}
}
