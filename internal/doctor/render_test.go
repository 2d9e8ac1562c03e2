package doctor_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

var update = flag.Bool("update", false, "rewrite the golden files")

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

// TestFindingsRendering pins the text and JSON output of doctor for a
// deployment with several problems at once.
func TestFindingsRendering(t *testing.T) {
	r := healthy(t)
	edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency", "message": "[Gateway API provider (istio / envoy gateway)] is not installed"}))
	r.Remove(verify.SecretGVK, "redhat-ai-gateway-infra", "maas-db-config")
	edit(t, r, verify.EndpointSliceGVK, mns, "llama-coder-x1", func(o map[string]any) { unstructured.RemoveNestedField(o, "endpoints") })
	edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", conds(
		map[string]any{"type": "Programmed", "status": "True", "reason": "Programmed"},
		map[string]any{"type": "DNSReady", "status": "False", "reason": "NoDNSZones", "message": "no DNS zones"}))
	rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: r})
	if err != nil {
		t.Fatal(err)
	}
	var text, js bytes.Buffer
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	golden(t, "findings.golden.txt", text.Bytes())
	golden(t, "findings.golden.json", js.Bytes())
}
