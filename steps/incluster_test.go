package steps

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
)

func TestGuessResource(t *testing.T) {
	for kind, want := range map[string]string{"Gateway": "gateways", "GatewayClass": "gatewayclasses", "AuthPolicy": "authpolicies",
		"Kuadrant": "kuadrants", "DSCInitialization": "dscinitializations", "Key": "keys"} {
		if got := guessResource(schema.GroupVersionKind{Kind: kind}); got != want {
			t.Errorf("%s: %s, want %s", kind, got, want)
		}
	}
}

// TestRBACRules: implied accesses are dropped (a named get under an
// unnamed one, a namespaced list under a cluster-wide one), the rest is
// one rule per resource with sorted verbs.
func TestRBACRules(t *testing.T) {
	cluster, byNS := RBACRules([]Access{
		{"get", "", "namespaces", "", "a"}, {"patch", "", "namespaces", "", "a"}, {"get", "", "namespaces", "", ""},
		{"list", "apps", "deployments", "ns1", ""}, {"list", "apps", "deployments", "", ""},
		{"watch", "apps", "deployments", "ns1", ""}, {"get", "apps", "deployments", "ns1", ""},
	})
	wantCluster := []map[string]any{
		{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "verbs": []any{"list"}},
		{"apiGroups": []any{""}, "resources": []any{"namespaces"}, "verbs": []any{"get"}},
		{"apiGroups": []any{""}, "resources": []any{"namespaces"}, "verbs": []any{"patch"}, "resourceNames": []any{"a"}},
	}
	if d := cmp.Diff(wantCluster, cluster); d != "" {
		t.Errorf("cluster rules (-want +got):\n%s", d)
	}
	wantNS := map[string][]map[string]any{"ns1": {{"apiGroups": []any{"apps"}, "resources": []any{"deployments"}, "verbs": []any{"get", "watch"}}}}
	if d := cmp.Diff(wantNS, byNS); d != "" {
		t.Errorf("namespaced rules (-want +got):\n%s", d)
	}
}

// TestRenderInCluster: the in-cluster files hold no Vault token
// or password and the Job runs install with the rendered inventory.
func TestRenderInCluster(t *testing.T) {
	inv := inventory.Default()
	inv.Gateway.Hostname = "maas.apps.example.com"
	f, err := OfflineFacts(inv)
	if err != nil {
		t.Fatal(err)
	}
	files, err := RenderInCluster(inv, f, InClusterOptions{Image: "example.com/maasctl:1"})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fl := range files {
		names = append(names, fl.Name)
	}
	if d := cmp.Diff([]string{"00-namespaces.yaml", "01-rbac.yaml", "02-job.yaml", "README.md"}, names); d != "" {
		t.Errorf("files (-want +got):\n%s", d)
	}
	for _, fl := range files {
		for _, bad := range []string{"VAULT_TOKEN", "password:", "secretKeyRef", "\"*\""} {
			if strings.Contains(string(fl.Data), bad) {
				t.Errorf("%s contains %q", fl.Name, bad)
			}
		}
	}
	if job := string(files[2].Data); !strings.Contains(job, "example.com/maasctl:1") || !strings.Contains(job, "/etc/maasctl/inventory.yaml") || !strings.Contains(job, "serviceAccountName: maasctl-installer") {
		t.Errorf("job:\n%s", job)
	}
}
