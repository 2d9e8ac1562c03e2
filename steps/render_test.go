package steps

import (
	"fmt"
	"os"
	"path/filepath"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/inventory"
)

// update is -update, declared in secrets_test.go.

// renderDefault renders the default inventory (with a gateway hostname)
// offline.
func renderDefault(t *testing.T) []ManifestFile {
	t.Helper()
	inv := inventory.Default()
	inv.Gateway.Hostname = "maas.apps.openshift.example.com"
	f, err := OfflineFacts(inv)
	if err != nil {
		t.Fatal(err)
	}
	files, err := RenderManifests(inv, f)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRenderManifestsGolden: the GitOps rendering of the default inventory,
// file by file (testdata/render/*; go test -update rewrites them).
func TestRenderManifestsGolden(t *testing.T) {
	files := renderDefault(t)
	dir := filepath.Join("testdata", "render")
	if *update {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, mf := range files {
			if err := os.WriteFile(filepath.Join(dir, mf.Name), mf.Data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if len(entries) != len(files) {
		t.Errorf("%d golden files, %d rendered", len(entries), len(files))
	}
	for _, mf := range files {
		want, err := os.ReadFile(filepath.Join(dir, mf.Name))
		if err != nil {
			t.Errorf("%s: %v (run go test -update)", mf.Name, err)
			continue
		}
		if diff := cmp.Diff(string(want), string(mf.Data)); diff != "" {
			t.Errorf("%s differs (-golden +rendered):\n%s", mf.Name, diff)
		}
	}
}

// TestRenderManifestsNoSecretValues: no rendered file is a Secret with
// data, and the password-bearing Secrets are described instead.
func TestRenderManifestsNoSecretValues(t *testing.T) {
	inv := inventory.Default()
	inv.Gateway.Hostname = "maas.example.com"
	f, err := OfflineFacts(inv)
	if err != nil {
		t.Fatal(err)
	}
	files, err := RenderManifests(inv, f)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for i, mf := range files {
		all.Write(mf.Data)
		if mf.Name == "README.md" || mf.Name == "kustomization.yaml" {
			continue
		}
		if !strings.HasPrefix(mf.Name, fmt.Sprintf("%02d-", i+1)) {
			t.Errorf("file %d is %s: files must be numbered in order", i+1, mf.Name)
		}
		for _, doc := range strings.Split(string(mf.Data), "\n---\n") {
			if strings.Contains(doc, "\nkind: Secret\n") && (strings.Contains(doc, "\ndata:") || strings.Contains(doc, "\nstringData:")) {
				t.Errorf("%s renders a Secret with data", mf.Name)
			}
		}
	}
	for _, want := range []string{"Secret rhoai-maas-db/maas-postgres-secret", "Secret redhat-ai-gateway-infra/maas-db-config", "kv/cloudnativepg/maas-postgres"} {
		if !strings.Contains(all.String(), want) {
			t.Errorf("render does not describe %s", want)
		}
	}
	inv.Gateway.Hostname = ""
	if _, err := OfflineFacts(inv); err == nil || !strings.Contains(err.Error(), "gateway.hostname") {
		t.Errorf("without a host: %v, want an error naming gateway.hostname", err)
	}
}

// TestN01NoBundledCRDs: maasctl bundles no CRD at all, so none of the
// Gateway API CRDs OpenShift's ingress operator owns (case N01): every
// step's rendered objects are checked, kind by kind, and any CRD would be
// refused by kube.IsPlatformOwnedCRD before a request if it were of that
// group.
func TestN01NoBundledCRDs(t *testing.T) {
	files := renderDefault(t)
	if len(files) == 0 {
		t.Fatal("nothing rendered")
	}
	n := 0
	for _, mf := range files {
		if !strings.HasSuffix(mf.Name, ".yaml") {
			continue
		}
		for _, doc := range strings.Split(string(mf.Data), "\n---\n") {
			n++
			var o struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatalf("%s: %v", mf.Name, err)
			}
			if o.Kind == "CustomResourceDefinition" {
				t.Errorf("%s renders a CustomResourceDefinition: maasctl must not bundle CRDs (the operators and the platform own them)", mf.Name)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d manifests decoded", n)
	}
}

// TestRenderKustomizeBuild (issue 15, item 3): kustomize (sigs.k8s.io/
// kustomize/api, what kustomize build and Argo CD run) accepts the
// rendered tree, with and without ExternalSecrets; every resource has its
// file's sync wave (hooks aside), kinds an operator registers skip the dry
// run, and the ExternalSecrets read the inventory's Vault path.
func TestRenderKustomizeBuild(t *testing.T) {
	inv := inventory.Default()
	inv.Gateway.Hostname = "maas.example.com"
	f, err := OfflineFacts(inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []RenderOptions{{}, {Secrets: SecretsExternal, SecretStore: "corp-vault"}} {
		files, err := RenderManifestsWith(nil, inv, f, o)
		if err != nil {
			t.Fatal(err)
		}
		fs := filesys.MakeFsInMemory()
		for _, mf := range files {
			if err := fs.WriteFile("/tree/"+mf.Name, mf.Data); err != nil {
				t.Fatal(err)
			}
		}
		m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, "/tree")
		if err != nil {
			t.Fatalf("kustomize build (secrets %q): %v", o.Secrets, err)
		}
		var eso, hooks int
		for _, r := range m.Resources() {
			a := r.GetAnnotations()
			id := r.GetKind() + " " + r.GetNamespace() + "/" + r.GetName()
			if a[HookAnnotation] != "" {
				hooks++
				continue
			}
			if a[SyncWaveAnnotation] == "" {
				t.Errorf("%s has no sync wave", id)
			}
			if g := r.GetGvk().Group; (g == "postgresql.cnpg.io" || g == "kuadrant.io" || g == "maas.opendatahub.io") && a[SyncOptionsAnnotation] != "SkipDryRunOnMissingResource=true" {
				t.Errorf("%s (a kind an operator registers) does not skip the dry run: %v", id, a)
			}
			if r.GetKind() == "ExternalSecret" {
				eso++
				y, _ := r.AsYAML()
				if !strings.Contains(string(y), "key: cloudnativepg/maas-postgres") || !strings.Contains(string(y), "name: corp-vault") {
					t.Errorf("%s:\n%s", id, y)
				}
			}
			if m, _ := r.Map(); r.GetKind() == "Secret" && (m["data"] != nil || m["stringData"] != nil) {
				t.Errorf("%s: a Secret value is rendered", id)
			}
		}
		if want := map[string]int{"": 0, SecretsExternal: 3}[o.Secrets]; eso != want {
			t.Errorf("secrets %q: %d ExternalSecrets, want %d", o.Secrets, eso, want)
		}
		if hooks != 1 {
			t.Errorf("%d hook resources, want the Kuadrant restart Job", hooks)
		}
	}
	if err := (RenderOptions{Secrets: "sealed"}).Validate(); err == nil || !strings.Contains(err.Error(), "--secrets") {
		t.Errorf("bad --secrets: %v", err)
	}
}
