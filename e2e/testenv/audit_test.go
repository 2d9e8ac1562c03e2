package testenv

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestAuditSummaryCounts checks the counting on a hand-written log: only
// ResponseComplete and Panic events count, the program is the User-Agent
// before its first "/", subresources and non-resource URLs are named, and
// a torn last line is skipped.
func TestAuditSummaryCounts(t *testing.T) {
	log := strings.Join([]string{
		`{"kind":"Event","stage":"ResponseComplete","verb":"update","requestURI":"/apis/operators.coreos.com/v1alpha1/namespaces/a/clusterserviceversions/x/status","userAgent":"olm/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"clusterserviceversions","subresource":"status"},"responseStatus":{"code":200}}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"update","requestURI":"/apis/operators.coreos.com/v1alpha1/namespaces/b/clusterserviceversions/x/status","userAgent":"olm/v0.0.0 (linux/amd64) kubernetes/$Format","objectRef":{"resource":"clusterserviceversions","subresource":"status"},"responseStatus":{"code":409}}`,
		`{"kind":"Event","stage":"ResponseStarted","verb":"watch","requestURI":"/api/v1/pods?watch=true","userAgent":"kwok","objectRef":{"resource":"pods"},"responseStatus":{"code":200}}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"watch","requestURI":"/api/v1/pods?watch=true","userAgent":"kwok","objectRef":{"resource":"pods"},"responseStatus":{"code":200}}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"get","requestURI":"/readyz?verbose","userAgent":"curl/8.0","responseStatus":{"code":500}}`,
		`{"kind":"Event","stage":"Panic","verb":"get","requestURI":"/readyz","userAgent":"curl/8.1","responseStatus":{"code":500}}`,
		`{"kind":"Event","stage":"ResponseComplete","verb":"get","requ`,
	}, "\n")
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := AuditSummary(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []AuditCount{
		{Program: "curl", Verb: "get", Resource: "/readyz", Code: map[int]int{500: 2}, N: 2},
		{Program: "olm", Verb: "update", Resource: "clusterserviceversions/status", Code: map[int]int{200: 1, 409: 1}, N: 2},
		{Program: "kwok", Verb: "watch", Resource: "pods", Code: map[int]int{200: 1}, N: 1},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("AuditSummary (-want +got):\n%s", d)
	}
	byProgram := AuditByProgram(got)
	if d := cmp.Diff([]AuditCount{{Program: "curl", N: 2}, {Program: "olm", N: 2}, {Program: "kwok", N: 1}}, byProgram); d != "" {
		t.Errorf("AuditByProgram (-want +got):\n%s", d)
	}
	if _, err := AuditSummary(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("AuditSummary of a missing file: no error")
	}
}

// TestAuditLogOfRealAPIServer starts a bare control plane with AuditLog and
// checks that a request of a client with its own User-Agent is in the
// summary, and that a control plane without it has no audit log.
func TestAuditLogOfRealAPIServer(t *testing.T) {
	t.Parallel()
	bin := requireBinaries(t, Etcd, KubeAPIServer)
	for _, on := range []bool{true, false} {
		env, err := Start(t.Context(), Options{BinDir: bin, NoControllers: true, NoFixture: true, AuditLog: on})
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
		t.Cleanup(func() { _ = env.Stop() })
		if !on {
			if p := env.AuditLog(); p != "" && os.Getenv(EnvAudit) != "1" {
				t.Errorf("AuditLog() = %q without Options.AuditLog", p)
			}
			continue
		}
		cfg := env.RESTConfig()
		cfg.UserAgent = "audit-probe/v1"
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "default", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cs.CoreV1().Namespaces().Get(t.Context(), "absent", metav1.GetOptions{}); err == nil {
			t.Fatal("namespace absent exists")
		}
		path := env.AuditLog()
		if path == "" {
			t.Fatal("AuditLog() is empty with Options.AuditLog")
		}
		// The log backend blocks by default (--audit-log-mode=blocking),
		// but the ResponseComplete event is written after the answer went
		// out: wait for it a moment.
		var counts []AuditCount
		var probe AuditCount
		deadline := time.Now().Add(10 * time.Second)
		for {
			if counts, err = AuditSummary(path); err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(counts, func(c AuditCount) bool {
				return c.Program == "audit-probe" && c.Verb == "get" && c.Resource == "namespaces"
			}); i >= 0 {
				probe = counts[i]
			}
			if probe.N >= 4 || time.Now().After(deadline) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if probe.N != 4 || probe.Code[200] != 3 || probe.Code[404] != 1 {
			t.Errorf("audit-probe get namespaces = %+v, want 4 requests (3 × 200, 1 × 404); summary: %+v", probe, counts)
		}
		if by := AuditByProgram(counts); len(by) < 2 {
			t.Errorf("requests by program = %+v, want the API server's own beside the probe's", by)
		}
	}
}
