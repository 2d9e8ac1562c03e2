package verify

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// golden compares got with testdata/name, rewriting it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run go test -update to accept):\n%s", name, got)
	}
}

// TestReportRendering pins the text and JSON rendering of a report with a
// control-plane failure, a data-path failure and skipped checks.
func TestReportRendering(t *testing.T) {
	r := healthyReader(t)
	edit(t, r, KuadrantGVK, "kuadrant-system", "kuadrant", setConditions(map[string]any{
		"type": "Ready", "status": "False", "reason": "MissingDependency",
		"message": "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"}))
	edit(t, r, MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(o.Object, []any{map[string]any{"name": "developers"}}, "spec", "subjects", "groups")
	})
	s, err := Snapshot(context.Background(), r, inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	d := &dataPath{s: s, base: "https://maas.apps.openshift.example.com"}
	chat := newCheck(CodeChat, d.base+"/v1/chat/completions model=qwen35-9b-coder")
	rep := &Report{Endpoint: d.base, Checks: append(LiveChecks(s),
		newCheck(CodeHealth, d.base+"/maas-api/health").pass("HTTP 200"),
		chat.failDiag("HTTP 403 in 8ms: <empty body>", d.explain(Classify(Response{Status: 403}), Response{Status: 403}, "llama-coder-default", "qwen35-9b-coder")),
		newCheck(CodeQuota429, d.base).skip("not requested (--probe-quota)"),
	)}
	rep.Passed = len(rep.Failed()) == 0
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.golden.txt", text.Bytes())
	golden(t, "report.golden.json", js.Bytes())
}

func TestResolveEndpoint(t *testing.T) {
	tests := []struct {
		name, explicit, route, hostname, want string
		err                                   bool
	}{
		{name: "explicit wins", explicit: "https://127.0.0.1:8443/", route: "maas.apps.example.com", want: "https://127.0.0.1:8443"},
		{name: "route host", route: "maas.apps.example.com", want: "https://maas.apps.example.com"},
		{name: "gateway hostname without a route", hostname: "maas.lab.example.com", want: "https://maas.lab.example.com"},
		{name: "nothing known", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inv := inventory.Default()
			inv.Gateway.Hostname = tc.hostname
			s := &State{Inv: inv}
			if tc.route != "" {
				s.Route = &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"host": tc.route}}}
			}
			got, err := ResolveEndpoint(s, tc.explicit)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("ResolveEndpoint = %q, %v; want %q (error %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
