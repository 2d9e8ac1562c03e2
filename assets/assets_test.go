package assets

import (
	"flag"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/maasctl/maasctl/inventory"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestRenderDefaultGolden(t *testing.T) {
	r, err := Render(inventory.Default(), Facts{Host: "maas.apps.openshift.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 0, len(r))
	for id := range r {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var sb strings.Builder
	for _, id := range ids {
		b, err := YAML(r[id])
		if err != nil {
			t.Fatal(err)
		}
		sb.WriteString("# step " + id + "\n" + string(b) + "---\n")
	}
	golden := filepath.Join("testdata", "default.golden.yaml")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./assets -update)", err)
	}
	if diff := cmp.Diff(string(want), sb.String()); diff != "" {
		t.Errorf("rendering differs from %s (-want +got):\n%s", golden, diff)
	}
}

func TestRenderProperties(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*inventory.Inventory)
		check func(t *testing.T, r Rendered)
	}{
		{
			name: "every object carries the managed-by label, but the Authorino Service and Deployment whose labels its operator sets",
			check: func(t *testing.T, r Rendered) {
				for id, objs := range r {
					for _, o := range objs {
						if o.GetKind() == "Service" && o.GetName() == "authorino-authorino-authorization" ||
							o.GetKind() == "Deployment" && o.GetName() == "authorino" && o.GetNamespace() == "kuadrant-system" {
							if _, ok := o.GetLabels()[ManagedByLabel]; ok {
								t.Errorf("%s: %s %s carries %s: authorino-operator removes it again", id, o.GetKind(), o.GetName(), ManagedByLabel)
							}
							continue
						}
						if o.GetLabels()[ManagedByLabel] != ManagedByValue {
							t.Errorf("%s: %s %s lacks %s", id, o.GetKind(), o.GetName(), ManagedByLabel)
						}
					}
				}
			},
		},
		{
			name: "the 3.5 DSC enables MaaS under aigateway, never kserve.modelsAsService",
			check: func(t *testing.T, r Rendered) {
				dsc := r["rhoai/dsc"][0].Object
				comps := dsc["spec"].(map[string]any)["components"].(map[string]any)
				ag := comps["aigateway"].(map[string]any)
				if ag["modelsAsAService"].(map[string]any)["managementState"] != "Managed" {
					t.Errorf("aigateway.modelsAsAService not Managed: %v", ag)
				}
				if _, ok := comps["kserve"].(map[string]any)["modelsAsService"]; ok {
					t.Errorf("kserve.modelsAsService must not be written for 3.5")
				}
				if comps["workbenches"].(map[string]any)["managementState"] != "Removed" {
					t.Errorf("workbenches should be Removed")
				}
			},
		},
		{
			name: "no issuer means no Certificate",
			edit: func(inv *inventory.Inventory) { inv.Gateway.CertIssuer = "" },
			check: func(t *testing.T, r Rendered) {
				if n := len(r["platform/certificate"]); n != 0 {
					t.Errorf("got %d objects, want none", n)
				}
			},
		},
		{
			name: "route off",
			edit: func(inv *inventory.Inventory) { inv.Gateway.CreateRoute = false },
			check: func(t *testing.T, r Rendered) {
				if n := len(r["platform/route"]); n != 0 {
					t.Errorf("got %d objects, want none", n)
				}
			},
		},
		{
			name: "the certificate names only the MaaS host",
			check: func(t *testing.T, r Rendered) {
				spec := r["platform/certificate"][0].Object["spec"].(map[string]any)
				names := spec["dnsNames"].([]any)
				if len(names) != 1 || names[0] != "maas.apps.openshift.example.com" {
					t.Errorf("dnsNames = %v", names)
				}
			},
		},
		{
			name: "one provider per namespace and name even with two models",
			edit: func(inv *inventory.Inventory) {
				m := inv.ExternalModels[0]
				m.Name = "second"
				inv.ExternalModels = append(inv.ExternalModels, m)
			},
			check: func(t *testing.T, r Rendered) {
				if n := len(r["models/provider"]); n != 1 {
					t.Errorf("got %d providers, want 1", n)
				}
				if n := len(r["models/model"]); n != 4 {
					t.Errorf("got %d model objects, want 4", n)
				}
			},
		},
		{
			// 1,000 models on one provider key made models/prepare apply
			// the same Secret 1,000 times (issue 16 bench, 2026-12-05).
			name: "no step renders an object twice when models share a namespace, provider and key Secret",
			edit: func(inv *inventory.Inventory) {
				for _, n := range []string{"second", "third"} {
					m := inv.ExternalModels[0]
					m.Name = n
					inv.ExternalModels = append(inv.ExternalModels, m)
				}
			},
			check: func(t *testing.T, r Rendered) {
				for id, objs := range r {
					seen := map[string]bool{}
					for _, o := range objs {
						k := o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
						if seen[k] {
							t.Errorf("%s renders %s twice", id, k)
						}
						seen[k] = true
					}
				}
				var secrets int
				for _, o := range r["models/prepare"] {
					if o.GetKind() == "Secret" {
						secrets++
					}
				}
				if secrets != 1 {
					t.Errorf("models/prepare labels %d Secrets, want the 1 the models share", secrets)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := inventory.Default()
			if tt.edit != nil {
				tt.edit(inv)
			}
			r, err := Render(inv, Facts{Host: "maas.apps.openshift.example.com"})
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}
