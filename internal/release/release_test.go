package release

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/maasctl/maasctl/inventory"
)

// crdFile reads one upstream CRD of the shared CRD tree ($MAASCTL_CRDS,
// else ../../../shared/crds).
func crdFile(t *testing.T, rel string) *unstructured.Unstructured {
	t.Helper()
	dir := os.Getenv("MAASCTL_CRDS")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "shared", "crds")
	}
	b, err := os.ReadFile(filepath.Join(dir, rel))
	if err != nil {
		t.Skipf("shared CRDs not available: %v", err)
	}
	m := map[string]any{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestFromCRD(t *testing.T) {
	tests := []struct {
		dir        string
		version    string
		kserve     bool
		has, lacks string
	}{
		{"rhoai-3.3", RHOAI33, true, "kserve", "sparkoperator"},
		{"rhoai-3.4", RHOAI34, true, "sparkoperator", "aigateway"},
		{"rhoai-3.5", RHOAI35, false, "aigateway", ""},
	}
	for _, tt := range tests {
		t.Run(tt.dir, func(t *testing.T) {
			crd := crdFile(t, filepath.Join("opendatahub", tt.dir, "datasciencecluster.opendatahub.io_datascienceclusters.yaml"))
			l, ok := FromCRD(crd)
			if !ok {
				t.Fatal("no layout read from the CRD")
			}
			if l.Version != tt.version || l.KServeMaaS() != tt.kserve {
				t.Errorf("layout %s kserve=%v, want %s kserve=%v", l.Version, l.KServeMaaS(), tt.version, tt.kserve)
			}
			if !slices.Contains(l.Components, tt.has) || (tt.lacks != "" && slices.Contains(l.Components, tt.lacks)) {
				t.Errorf("components %v: want %s, not %q", l.Components, tt.has, tt.lacks)
			}
			// The table used before the CRD is served matches the bundle.
			if want := components[tt.version]; !slices.Equal(l.Components, want) {
				t.Errorf("components[%s] = %v, the bundle's CRD has %v", tt.version, want, l.Components)
			}
		})
	}
	if _, ok := FromCRD(&unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{}}}); ok {
		t.Error("a CRD without a v2 schema gave a layout")
	}
}

func TestVersionOf(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"stable-3.4", "3.4"}, {"stable-3.5", "3.5"}, {"3.4.4", "3.4"}, {"v3.5.0", "3.5"}, {"fast", ""}, {"", ""},
	} {
		t.Run(tt.in, func(t *testing.T) {
			if got := VersionOf(tt.in); got != tt.want {
				t.Errorf("VersionOf(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPlaces(t *testing.T) {
	inv := inventory.Default()
	tests := []struct {
		name       string
		l          Release
		field, api string
		dbNS       []string
		crd        string
	}{
		{"3.5", New(RHOAI35, "t"), "spec.components.aigateway.modelsAsAService", "redhat-ai-gateway-infra",
			[]string{"redhat-ods-applications", "redhat-ai-gateway-infra"}, "externalmodels.inference.opendatahub.io"},
		{"3.4", New(RHOAI34, "t"), "spec.components.kserve.modelsAsService", "redhat-ods-applications",
			[]string{"redhat-ods-applications"}, "externalmodels.maas.opendatahub.io"},
		{"unknown newer release", New("3.7", "t"), "spec.components.aigateway.modelsAsAService", "redhat-ai-gateway-infra",
			[]string{"redhat-ods-applications", "redhat-ai-gateway-infra"}, "externalproviders.inference.opendatahub.io"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.l.MaaSField(); got != tt.field {
				t.Errorf("MaaSField %s, want %s", got, tt.field)
			}
			if got := tt.l.MaaSAPINamespace(inv); got != tt.api {
				t.Errorf("MaaSAPINamespace %s, want %s", got, tt.api)
			}
			if got := tt.l.DBConfigNamespaces(inv); !slices.Equal(got, tt.dbNS) {
				t.Errorf("DBConfigNamespaces %v, want %v", got, tt.dbNS)
			}
			if !slices.Contains(tt.l.MaaSCRDs(), tt.crd) {
				t.Errorf("MaaSCRDs %v lacks %s", tt.l.MaaSCRDs(), tt.crd)
			}
		})
	}
	if un := New(RHOAI34, "t").Unserved(inv); !slices.Equal(un, []string{"aigateway", "mcplifecycleoperator", "ogx"}) {
		t.Errorf("Unserved on 3.4 = %v", un)
	}
	if un := New(RHOAI35, "t").Unserved(inv); len(un) != 0 {
		t.Errorf("Unserved on 3.5 = %v, want none", un)
	}
}

// TestZeroValueIsTheDefaultRelease: verify, doctor and gather fall back to
// Release{} when the cluster cannot be read; it must place everything as
// RHOAI 3.5 with the inventory's names, as the release they replaced did.
func TestZeroValueIsTheDefaultRelease(t *testing.T) {
	inv := inventory.Default()
	var zero Release
	if zero.KServeMaaS() || zero.ExternalModelGVK() != ExternalModelGVK || zero.MaaSCondition() != "ModelsAsAServiceReady" {
		t.Errorf("zero value is not the 3.5 layout: kserve=%v gvk=%v cond=%s", zero.KServeMaaS(), zero.ExternalModelGVK(), zero.MaaSCondition())
	}
	if got := zero.DSC(inv); got != inv.RHOAI.DSCName {
		t.Errorf("DSC = %q, want rhoai.dscName %q", got, inv.RHOAI.DSCName)
	}
	if got := zero.DBConfigNamespace(inv); got != inv.DBConfig.Namespace {
		t.Errorf("DBConfigNamespace = %q, want dbConfig.namespace %q", got, inv.DBConfig.Namespace)
	}
	d := zero.WithDefaults()
	if d.Version != RHOAI35 || !slices.Equal(d.Components, components[RHOAI35]) {
		t.Errorf("WithDefaults = %+v, want 3.5 with its bundle components", d)
	}
	if !zero.Serves("anything") {
		t.Error("a release with no known components must serve every inventory component (nothing left out)")
	}
	legacy := Release{Version: RHOAI34, DSCName: "adopted"}
	if legacy.DSC(inv) != "adopted" || legacy.DBConfigNamespace(inv) != inv.RHOAI.ApplicationsNamespace ||
		legacy.MaaSAPINamespace(inv) != inv.RHOAI.ApplicationsNamespace || legacy.ExternalModelGVK() != LegacyExternalModelGVK {
		t.Errorf("3.4 places: dsc=%s dbconfig=%s api=%s gvk=%v", legacy.DSC(inv), legacy.DBConfigNamespace(inv), legacy.MaaSAPINamespace(inv), legacy.ExternalModelGVK())
	}
	if New(RHOAI34, "t").Serves("aigateway") {
		t.Error("the 3.4 bundle serves aigateway; its DSC schema has no such component")
	}
}
