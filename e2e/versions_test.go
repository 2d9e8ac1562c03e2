package e2e

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// TestInstallRHOAIVersions installs against the RHOAI 3.3, 3.4 and 3.5 CRD
// sets (the simulated operator serves the release's DataScienceCluster CRD
// and honours only its MaaS switch). maasctl must read the layout, write the
// release's MaaS field and nothing the server prunes, put maas-db-config
// where that release's maas-api reads it, and use the release's
// external-model API group (case B16). A second run changes nothing.
func TestInstallRHOAIVersions(t *testing.T) {
	parallel(t)
	for _, tt := range []struct {
		version    string
		maasField  []string
		otherField []string
		apiNS      string
		modelGroup string
		otherGroup string
	}{
		{"3.3", []string{"kserve", "modelsAsService"}, []string{"aigateway"}, "redhat-ods-applications", "maas.opendatahub.io", "inference.opendatahub.io"},
		{"3.4", []string{"kserve", "modelsAsService"}, []string{"aigateway"}, "redhat-ods-applications", "maas.opendatahub.io", "inference.opendatahub.io"},
		{"3.5", []string{"aigateway", "modelsAsAService"}, []string{"kserve", "modelsAsService"}, "redhat-ai-gateway-infra", "inference.opendatahub.io", "maas.opendatahub.io"},
	} {
		t.Run("RHOAI "+tt.version, func(t *testing.T) {
			if tt.version == "3.4" {
				fullOnly(t, "the RHOAI 3.4 install (3.3, with the same DSC shape, and 3.5 run)")
			}
			c := newCaseCluster(t, caseOptions{rhoai: tt.version})
			channel := "operators[rhoai].channel=stable-" + tt.version
			r := c.install(t, "--set", channel)
			// Every step succeeds, verify/status included: it reads
			// the release's DSC condition, maas-api namespace and
			// ExternalModel kind.
			mustSucceed(t, r)
			mustContain(t, "verify/status progress", progress(r, "verify/status"), "MAAS-V001", "MAAS-V004")
			mustContain(t, "rhoai/dsc progress", progress(r, "rhoai/dsc"), "MaaS enabled through spec.components."+strings.Join(tt.maasField, "."))

			dsc := get(t, c, "datasciencecluster.opendatahub.io/v2", "DataScienceCluster", "", "default-dsc")
			comps, _, _ := unstructured.NestedMap(dsc.Object, "spec", "components")
			if s, _, _ := unstructured.NestedString(comps, append(tt.maasField, "managementState")...); s != "Managed" {
				t.Errorf("spec.components.%s.managementState = %q, want Managed", strings.Join(tt.maasField, "."), s)
			}
			// The other release's switch is absent, or at most the schema's
			// default (3.5 defaults kserve.modelsAsService to Removed).
			if s, _, _ := unstructured.NestedString(comps, append(tt.otherField, "managementState")...); s == "Managed" {
				t.Errorf("spec.components.%s is Managed on RHOAI %s", strings.Join(tt.otherField, "."), tt.version)
			}
			// Nothing maasctl sent was pruned: the live spec holds all of it.
			l := release.New(tt.version, "test")
			rendered, err := assets.Render(inventory.Default(), assets.Facts{Host: appsHost, Release: l})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"spec": rendered["rhoai/dsc"][0].Object["spec"]}
			if p, ok := steps.Contains(dsc.Object, want); !ok {
				t.Errorf("live DSC lacks %s of what maasctl applied (pruned by the server?)", p)
			}
			if !c.exists(t, "apps/v1", "Deployment", tt.apiNS, "maas-api") {
				t.Errorf("no maas-api in %s", tt.apiNS)
			}
			if !c.exists(t, "v1", "Secret", tt.apiNS, "maas-db-config") {
				t.Errorf("no maas-db-config in %s, where maas-api of RHOAI %s reads it", tt.apiNS, tt.version)
			}
			em := schema.GroupVersionKind{Group: tt.modelGroup, Version: "v1alpha1", Kind: "ExternalModel"}
			if n := len(c.list(t, em, "llm-coding-assistant")); n != 1 {
				t.Errorf("%d %s ExternalModels, want 1", n, tt.modelGroup)
			}
			for _, k := range []string{"ExternalModel", "ExternalProvider"} {
				other := schema.GroupVersionKind{Group: tt.otherGroup, Version: "v1alpha1", Kind: k}
				if n := len(c.list(t, other, "")); n != 0 {
					t.Errorf("%d %s %ss were created on RHOAI %s, want none", n, tt.otherGroup, k, tt.version)
				}
			}
			ref := get(t, c, "maas.opendatahub.io/v1alpha1", "MaaSModelRef", "llm-coding-assistant", "qwen35-9b-coder")
			if p, _, _ := unstructured.NestedString(ref.Object, "status", "phase"); p != "Ready" {
				t.Errorf("MaaSModelRef phase %q, want Ready", p)
			}

			again := c.install(t, "--set", channel)
			mustSucceed(t, again)
			if done := stepsWith(again.events, steps.EventDone); len(done) > 0 {
				t.Errorf("second run re-applied %v, want every step unchanged", done)
			}
			// verify and doctor on their own read the same layout.
			v := c.maasctl(t, "verify", "--live-only", "--set", channel)
			if v.exit != 0 {
				t.Errorf("maasctl verify --live-only on RHOAI %s: exit %d\n%s\n%s", tt.version, v.exit, v.stdout, v.stderr)
			}
			mustContain(t, "verify output", v.stdout, "Deployment "+tt.apiNS+"/maas-api")
		})
	}
}
