package assets

import (
	"testing"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// components34 are the DataScienceCluster v2 spec.components of the RHOAI
// 3.4 bundle (shared/crds/opendatahub/rhoai-3.4).
var components34 = []string{
	"aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator",
	"mlflowoperator", "modelregistry", "ray", "sparkoperator", "trainer", "trainingoperator",
	"trustyai", "workbenches",
}

func TestRenderKServeLayout(t *testing.T) {
	tests := []struct {
		name  string
		facts Facts
		check func(t *testing.T, r Rendered)
	}{
		{
			name:  "3.4 enables MaaS under kserve and writes no 3.5-only component",
			facts: Facts{Host: "maas.apps.example.com", Release: release.Release{Version: release.RHOAI34, Components: components34}},
			check: func(t *testing.T, r Rendered) {
				comps := r["rhoai/dsc"][0].Object["spec"].(map[string]any)["components"].(map[string]any)
				ks := comps["kserve"].(map[string]any)
				if ks["modelsAsService"].(map[string]any)["managementState"] != "Managed" {
					t.Errorf("kserve.modelsAsService not Managed: %v", ks)
				}
				for _, c := range []string{"aigateway", "ogx", "mcplifecycleoperator"} {
					if _, ok := comps[c]; ok {
						t.Errorf("component %s is not in the 3.4 schema but was rendered", c)
					}
				}
				if len(comps) != len(components34) {
					t.Errorf("rendered %d components, want %d", len(comps), len(components34))
				}
			},
		},
		{
			name:  "3.4 external models are maas.opendatahub.io ExternalModels without a provider",
			facts: Facts{Host: "maas.apps.example.com", Release: release.Release{Version: release.RHOAI34}},
			check: func(t *testing.T, r Rendered) {
				if n := len(r["models/provider"]); n != 0 {
					t.Errorf("%d ExternalProviders rendered for 3.4, want none", n)
				}
				em := r["models/model"][0]
				if em.GetAPIVersion() != "maas.opendatahub.io/v1alpha1" || em.GetKind() != "ExternalModel" {
					t.Fatalf("first model object is %s %s", em.GetAPIVersion(), em.GetKind())
				}
				spec := em.Object["spec"].(map[string]any)
				if spec["credentialRef"].(map[string]any)["name"] != "llama-coder-api-key" || spec["endpoint"] == "" {
					t.Errorf("legacy ExternalModel spec %v", spec)
				}
			},
		},
		{
			name:  "3.5 never writes a legacy ExternalModel",
			facts: Facts{Host: "maas.apps.example.com"},
			check: func(t *testing.T, r Rendered) {
				for _, o := range r["models/model"] {
					if o.GetKind() == "ExternalModel" && o.GetAPIVersion() != "inference.opendatahub.io/v1alpha1" {
						t.Errorf("3.5 rendered %s %s", o.GetAPIVersion(), o.GetKind())
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Render(inventory.Default(), tt.facts)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, r)
		})
	}
}
