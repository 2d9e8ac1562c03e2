// Package release is the one description of an RHOAI release that maasctl
// installs for, verifies and diagnoses: where the DataScienceCluster
// switches MaaS on, which components its schema has, where maas-api runs,
// which API group external models use and what the release's MaaS
// controller writes. It reads no cluster: steps detects the release
// (steps.DetectRelease), assets renders for it, verify, doctor and gather
// read by it.
//
// 3.5 enables MaaS with spec.components.aigateway.modelsAsAService, reports
// condition ModelsAsAServiceReady, publishes external models as
// inference.opendatahub.io ExternalProvider and ExternalModel and runs
// maas-api in rhoai.maasAPINamespace (redhat-ai-gateway-infra). 3.3 and 3.4
// enable it with spec.components.kserve.modelsAsService, report
// ModelsAsServiceReady, use the maas.opendatahub.io ExternalModel and run
// maas-api in the applications namespace (reference/DEPLOYMENT.md
// "Upgrades", rh-aiservices-bu/rhoai-maas-guide troubleshooting issue 2,
// shared/crds/opendatahub/rhoai-3.x).
package release

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
)

// RHOAI minor releases whose DataScienceCluster layout maasctl knows.
const (
	RHOAI33 = "3.3"
	RHOAI34 = "3.4"
	RHOAI35 = "3.5"
)

// DSCCRD is the DataScienceCluster CRD; its v2 schema tells which MaaS
// switch the installed RHOAI operator reads.
const DSCCRD = "datascienceclusters.datasciencecluster.opendatahub.io"

// External-model kinds: ExternalModelGVK (with ExternalProvider) on 3.5,
// LegacyExternalModelGVK, one per model and no provider, on 3.3 and 3.4
// (shared/crds/opendatahub/rhoai-3.4, case B16).
var (
	ExternalModelGVK       = schema.GroupVersionKind{Group: "inference.opendatahub.io", Version: "v1alpha1", Kind: "ExternalModel"}
	LegacyExternalModelGVK = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "ExternalModel"}
)

// Release is one RHOAI release as maasctl sees it. The zero value is RHOAI
// 3.5 with every component served and the inventory's names.
type Release struct {
	// Version is the minor release, "3.3", "3.4" or "3.5"; "" is 3.5.
	Version string
	// Source says how Version was found, for messages: the DSC CRD schema,
	// the rhods-operator CSV, the inventory channel or the default.
	Source string
	// Components are the spec.components keys of DataScienceCluster v2,
	// sorted; nil means not known (rendering then writes every component).
	Components []string
	// DSCName is the live DataScienceCluster: the operator allows one and
	// maasctl adopts it under any name (case B05); "" is rhoai.dscName.
	DSCName string
}

// components are the DataScienceCluster v2 spec.components of each
// release's bundle (shared/crds/opendatahub/rhoai-<version>), used until the
// cluster serves the CRD.
var components = map[string][]string{
	RHOAI33: {"aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mlflowoperator", "modelregistry", "ray", "trainer", "trainingoperator", "trustyai", "workbenches"},
	RHOAI34: {"aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mlflowoperator", "modelregistry", "ray", "sparkoperator", "trainer", "trainingoperator", "trustyai", "workbenches"},
	RHOAI35: {"aigateway", "aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mcplifecycleoperator", "mlflowoperator", "modelregistry", "ogx", "ray", "sparkoperator", "trainer", "trainingoperator", "trustyai", "workbenches"},
}

// New returns a known release (3.3, 3.4 or 3.5) with that release's
// bundle components; an unknown version gets the 3.5 components.
func New(version, source string) Release {
	comps, ok := components[version]
	if !ok {
		comps = components[RHOAI35]
	}
	return Release{Version: version, Source: source, Components: slices.Clone(comps)}
}

// WithDefaults fills what the zero value leaves implicit: Version 3.5 and
// that release's components.
func (r Release) WithDefaults() Release {
	if r.Version == "" {
		r.Version = RHOAI35
	}
	if r.Components == nil {
		r.Components = New(r.Version, "").Components
	}
	return r
}

// KServeMaaS reports whether MaaS is switched on under kserve (3.3, 3.4),
// with the maas.opendatahub.io ExternalModel and no ExternalProvider.
func (r Release) KServeMaaS() bool { return Minor(r.Version) < 5 }

// MaaSField is the DSC field path that switches MaaS on.
func (r Release) MaaSField() string {
	if r.KServeMaaS() {
		return "spec.components.kserve.modelsAsService"
	}
	return "spec.components.aigateway.modelsAsAService"
}

// MaaSCondition is the DSC status condition that reports MaaS itself.
func (r Release) MaaSCondition() string {
	if r.KServeMaaS() {
		return "ModelsAsServiceReady"
	}
	return "ModelsAsAServiceReady"
}

// ExternalModelGVK is the release's external-model kind.
func (r Release) ExternalModelGVK() schema.GroupVersionKind {
	if r.KServeMaaS() {
		return LegacyExternalModelGVK
	}
	return ExternalModelGVK
}

// DSC is the name of the DataScienceCluster: the live one when known,
// else rhoai.dscName.
func (r Release) DSC(inv *inventory.Inventory) string {
	if r.DSCName != "" {
		return r.DSCName
	}
	return inv.RHOAI.DSCName
}

// MaaSAPINamespace is where the RHOAI operator runs maas-api: the
// applications namespace on 3.3/3.4, rhoai.maasAPINamespace on 3.5.
func (r Release) MaaSAPINamespace(inv *inventory.Inventory) string {
	if r.KServeMaaS() {
		return inv.RHOAI.ApplicationsNamespace
	}
	return inv.RHOAI.MaaSAPINamespace
}

// DBConfigNamespace is where maas-api reads maas-db-config: the
// applications namespace on 3.3/3.4, dbConfig.namespace on 3.5.
func (r Release) DBConfigNamespace(inv *inventory.Inventory) string {
	if r.KServeMaaS() {
		return inv.RHOAI.ApplicationsNamespace
	}
	return inv.DBConfig.Namespace
}

// DBConfigNamespaces are the namespaces that must hold maas-db-config
// before MaaS is enabled (case B06): on 3.5 the applications namespace (the
// operator reads it there) and maas-api's own namespace; on 3.3/3.4 the
// applications namespace, where maas-api runs.
func (r Release) DBConfigNamespaces(inv *inventory.Inventory) []string {
	out := []string{inv.RHOAI.ApplicationsNamespace}
	if !r.KServeMaaS() {
		for _, ns := range []string{inv.DBConfig.Namespace, inv.RHOAI.MaaSAPINamespace} {
			if !slices.Contains(out, ns) {
				out = append(out, ns)
			}
		}
	}
	return out
}

// MaaSCRDs are the CRDs the RHOAI operator registers once MaaS is enabled
// (opendatahub-io/models-as-a-service deployment/base/maas-controller/crd):
// on 3.5 with the inference.opendatahub.io external-model kinds, on 3.3/3.4
// with the legacy maas.opendatahub.io ExternalModel.
func (r Release) MaaSCRDs() []string {
	out := []string{
		"maasmodelrefs.maas.opendatahub.io",
		"maasauthpolicies.maas.opendatahub.io",
		"maassubscriptions.maas.opendatahub.io",
	}
	if r.KServeMaaS() {
		return append(out, "externalmodels.maas.opendatahub.io")
	}
	return append(out, "externalproviders.inference.opendatahub.io", "externalmodels.inference.opendatahub.io")
}

// Serves reports whether the release's DSC schema has component c (every
// component when Components is nil).
func (r Release) Serves(c string) bool {
	return r.Components == nil || slices.Contains(r.Components, c)
}

// Unserved returns the inventory's DSC components that the release's schema
// does not define, sorted: rendering leaves them out and says so.
func (r Release) Unserved(inv *inventory.Inventory) []string {
	r = r.WithDefaults()
	var out []string
	for _, c := range append(slices.Clone(inv.RHOAI.ManagedComponents), inv.RHOAI.RemovedComponents...) {
		if !r.Serves(c) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// String names the release for messages: "RHOAI 3.4 (from CSV rhods-operator.3.4.4)".
func (r Release) String() string { return fmt.Sprintf("RHOAI %s (%s)", r.Version, r.Source) }

// FromCRD reads the release from the DataScienceCluster CRD's v2 schema:
// aigateway.modelsAsAService present means 3.5, kserve.modelsAsService
// without it 3.3/3.4 (3.4 added sparkoperator). ok is false when the CRD has
// no v2 schema with either.
func FromCRD(crd *unstructured.Unstructured) (Release, bool) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] != "v2" {
			continue
		}
		comps, found, _ := unstructured.NestedMap(vm, "schema", "openAPIV3Schema", "properties", "spec", "properties", "components", "properties")
		if !found {
			return Release{}, false
		}
		names := make([]string, 0, len(comps))
		for k := range comps {
			names = append(names, k)
		}
		sort.Strings(names)
		has := func(path ...string) bool {
			_, ok, _ := unstructured.NestedMap(comps, path...)
			return ok
		}
		switch {
		case has("aigateway", "properties", "modelsAsAService"):
			return Release{Version: RHOAI35, Source: "DataScienceCluster CRD schema", Components: names}, true
		case has("kserve", "properties", "modelsAsService"):
			v := RHOAI33
			if slices.Contains(names, "sparkoperator") {
				v = RHOAI34
			}
			return Release{Version: v, Source: "DataScienceCluster CRD schema", Components: names}, true
		}
		return Release{}, false
	}
	return Release{}, false
}

var minorRE = regexp.MustCompile(`(\d+)\.(\d+)`)

// VersionOf returns "major.minor" from a channel (stable-3.4) or a version
// (3.4.4, v3.5.0), or "" when there is none.
func VersionOf(s string) string {
	m := minorRE.FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		return ""
	}
	last := m[len(m)-1]
	return last[1] + "." + last[2]
}

// Minor returns the minor number of a 3.x version; "" is 5 (the default
// release), other majors count as newer than every 3.x (a later layout).
func Minor(v string) int {
	m := minorRE.FindStringSubmatch(v)
	if m == nil {
		return 5
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	switch {
	case major < 3:
		return 0
	case major > 3:
		return 1 << 20
	}
	return minor
}
