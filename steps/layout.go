package steps

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
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

// Layout is the RHOAI release layout maasctl writes for: where MaaS is
// switched on in the DataScienceCluster, which components the DSC schema
// has, where maas-api runs and which API group external models use.
//
// 3.5 enables MaaS with spec.components.aigateway.modelsAsAService and
// publishes external models as inference.opendatahub.io ExternalProvider and
// ExternalModel; maas-api runs in redhat-ai-gateway-infra. 3.3 and 3.4 enable
// it with spec.components.kserve.modelsAsService, use the
// maas.opendatahub.io ExternalModel and run maas-api in the applications
// namespace (reference/DEPLOYMENT.md "Upgrades", rh-aiservices-bu/rhoai-maas-guide
// troubleshooting issue 2, shared/crds/opendatahub/rhoai-3.x).
type Layout struct {
	// Version is the minor release, e.g. "3.4".
	Version string
	// Source says how Version was found, for messages: the DSC CRD schema,
	// the rhods-operator CSV, the inventory channel or the default.
	Source string
	// Components are the spec.components keys of DataScienceCluster v2,
	// sorted.
	Components []string
}

// releaseComponents are the DataScienceCluster v2 spec.components of each
// release's bundle (shared/crds/opendatahub/rhoai-<version>), used until the
// cluster serves the CRD.
var releaseComponents = map[string][]string{
	RHOAI33: {"aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mlflowoperator", "modelregistry", "ray", "trainer", "trainingoperator", "trustyai", "workbenches"},
	RHOAI34: {"aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mlflowoperator", "modelregistry", "ray", "sparkoperator", "trainer", "trainingoperator", "trustyai", "workbenches"},
	RHOAI35: {"aigateway", "aipipelines", "dashboard", "feastoperator", "kserve", "kueue", "llamastackoperator", "mcplifecycleoperator", "mlflowoperator", "modelregistry", "ogx", "ray", "sparkoperator", "trainer", "trainingoperator", "trustyai", "workbenches"},
}

// NewLayout returns the layout of a known release (3.3, 3.4 or 3.5) with
// that release's components; an unknown version gets the 3.5 components.
func NewLayout(version, source string) Layout {
	comps, ok := releaseComponents[version]
	if !ok {
		comps = releaseComponents[RHOAI35]
	}
	return Layout{Version: version, Source: source, Components: slices.Clone(comps)}
}

// KServeMaaS reports whether MaaS is switched on under kserve (3.3, 3.4).
func (l Layout) KServeMaaS() bool { return minorOf(l.Version) < 5 }

// MaaSField is the DSC field path that switches MaaS on.
func (l Layout) MaaSField() string {
	if l.KServeMaaS() {
		return "spec.components.kserve.modelsAsService"
	}
	return "spec.components.aigateway.modelsAsAService"
}

// MaaSCondition is the DSC status condition that reports MaaS itself.
func (l Layout) MaaSCondition() string {
	if l.KServeMaaS() {
		return "ModelsAsServiceReady"
	}
	return "ModelsAsAServiceReady"
}

// MaaSAPINamespace is where the RHOAI operator runs maas-api: the
// applications namespace on 3.3/3.4, rhoai.maasAPINamespace on 3.5.
func (l Layout) MaaSAPINamespace(inv *inventory.Inventory) string {
	if l.KServeMaaS() {
		return inv.RHOAI.ApplicationsNamespace
	}
	return inv.RHOAI.MaaSAPINamespace
}

// DBConfigNamespaces are the namespaces that must hold maas-db-config
// before MaaS is enabled (case B06): on 3.5 the applications namespace (the
// operator reads it there) and maas-api's own namespace; on 3.3/3.4 the
// applications namespace, where maas-api runs.
func (l Layout) DBConfigNamespaces(inv *inventory.Inventory) []string {
	out := []string{inv.RHOAI.ApplicationsNamespace}
	if !l.KServeMaaS() {
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
func (l Layout) MaaSCRDs() []string {
	out := []string{
		"maasmodelrefs.maas.opendatahub.io",
		"maasauthpolicies.maas.opendatahub.io",
		"maassubscriptions.maas.opendatahub.io",
	}
	if l.KServeMaaS() {
		return append(out, "externalmodels.maas.opendatahub.io")
	}
	return append(out, "externalproviders.inference.opendatahub.io", "externalmodels.inference.opendatahub.io")
}

// Unserved returns the inventory's DSC components that the layout's schema
// does not define, sorted: rendering leaves them out and says so.
func (l Layout) Unserved(inv *inventory.Inventory) []string {
	var out []string
	for _, c := range append(slices.Clone(inv.RHOAI.ManagedComponents), inv.RHOAI.RemovedComponents...) {
		if !slices.Contains(l.Components, c) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

// Facts sets the layout part of rendering facts.
func (l Layout) Facts(f assets.Facts) assets.Facts {
	f.KServeMaaS = l.KServeMaaS()
	f.RHOAIVersion = l.Version
	f.DSCComponents = slices.Clone(l.Components)
	return f
}

// LayoutOf returns the layout rendering facts were made for.
func LayoutOf(f assets.Facts) Layout {
	v := f.RHOAIVersion
	if v == "" {
		v = RHOAI35
	}
	l := NewLayout(v, "rendering facts")
	if f.DSCComponents != nil {
		l.Components = slices.Clone(f.DSCComponents)
	}
	return l
}

// String names the layout for messages: "RHOAI 3.4 (from CSV rhods-operator.3.4.4)".
func (l Layout) String() string { return fmt.Sprintf("RHOAI %s (%s)", l.Version, l.Source) }

// DetectLayout reads which layout the cluster serves, in this order: the
// DataScienceCluster CRD's v2 schema (authoritative for the MaaS switch and
// the components), the version of the rhods-operator CSV the inventory's
// Subscription installed, the inventory's rhoai channel (stable-3.4 → 3.4),
// and finally 3.5. It only reads; a kind the cluster does not serve (no
// OLM) moves on to the next source.
func DetectLayout(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (Layout, error) {
	csvVersion, csvName, err := installedRHOAIVersion(ctx, c, inv)
	if err != nil {
		return Layout{}, err
	}
	crd, err := c.Dynamic.Resource(crdGVR).Get(ctx, DSCCRD, metav1.GetOptions{})
	switch {
	case err == nil:
		if l, ok := LayoutFromCRD(crd); ok {
			// The schema decides the layout; the CSV, when it agrees, names
			// the exact minor (3.3 and 3.4 share the kserve layout).
			if csvVersion != "" && (minorOf(csvVersion) < 5) == l.KServeMaaS() {
				l.Version = csvVersion
				l.Source = "DataScienceCluster CRD schema and CSV " + csvName
			}
			return l, nil
		}
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err):
	default:
		return Layout{}, fmt.Errorf("get CRD %s: %w", DSCCRD, err)
	}
	if csvVersion != "" {
		return NewLayout(csvVersion, "CSV "+csvName), nil
	}
	if op := inv.Operator("rhoai"); op != nil {
		if v := versionFromChannel(op.Channel); v != "" {
			return NewLayout(v, "channel "+op.Channel), nil
		}
	}
	return NewLayout(RHOAI35, "default"), nil
}

// installedRHOAIVersion returns the minor version and name of the CSV the
// inventory's rhods-operator Subscription installed, or "" when there is
// none (yet).
func installedRHOAIVersion(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (string, string, error) {
	v, name, err := installedRHOAICSV(ctx, c, inv)
	return versionFromChannel(v), name, err
}

// installedRHOAICSV returns the CSV the inventory's rhods-operator
// Subscription installed (status.installedCSV): its spec.version (3.4.4)
// and name, or "" when there is none (yet), OLM is not served or reading
// it is forbidden.
func installedRHOAICSV(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (string, string, error) {
	op := inv.Operator("rhoai")
	if op == nil {
		return "", "", nil
	}
	ri, _, err := c.Resource(subscriptionGVK, op.Namespace)
	if kube.IsNotServed(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	sub, err := ri.Get(ctx, op.Package, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get Subscription %s/%s: %w", op.Namespace, op.Package, err)
	}
	name, _, _ := unstructured.NestedString(sub.Object, "status", "installedCSV")
	if name == "" {
		return "", "", nil
	}
	cri, _, err := c.Resource(csvGVK, op.Namespace)
	if err != nil {
		return "", "", err
	}
	csv, err := cri.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) {
		return "", "", nil
	}
	if err != nil {
		return "", "", fmt.Errorf("get CSV %s/%s: %w", op.Namespace, name, err)
	}
	v, _, _ := unstructured.NestedString(csv.Object, "spec", "version")
	return v, name, nil
}

// VersionSkew is an RHOAI minor the cluster serves that is not the minor of
// the inventory's rhoai channel (case B04): writing the channel's layout
// would be pruned (3.4 CRD) or rejected (3.5 CEL rules), and changing the
// channel is an operator upgrade.
type VersionSkew struct {
	// Channel is operators[rhoai].channel; Want its minor (3.5).
	Channel, Want string
	// Have is the minor the cluster serves; HaveVersion the installed CSV's
	// spec.version (3.4.4) and CSV its namespace/name, both "" when the
	// minor comes from the DataScienceCluster CRD schema alone.
	Have, HaveVersion, CSV string
	// Source says where Have was read: "CSV ..." or the CRD.
	Source string
	// Namespace and Package are the rhoai Subscription's.
	Namespace, Package string
}

// Error names the detected version and its CSV, the field the inventory's
// channel expects, and both fixes: Problem, then Fix.
func (v *VersionSkew) Error() string { return v.Problem() + ": " + v.Fix() }

// Problem names the detected version and its CSV (or CRD) and the field
// the inventory's channel expects.
func (v *VersionSkew) Problem() string {
	want, have := NewLayout(v.Want, ""), NewLayout(v.Have, "")
	what, ver := "CSV "+v.CSV, v.Have
	if v.CSV == "" {
		what = v.Source
	} else if v.HaveVersion != "" {
		ver = v.HaveVersion
	}
	return fmt.Sprintf("RHOAI version skew: the cluster runs RHOAI operator version %s (%s; its DataScienceCluster switches MaaS with %s), but operators[rhoai].channel is %s, whose release expects %s",
		ver, what, have.MaaSField(), v.Channel, want.MaaSField())
}

// Fix says how to resolve the skew either way.
func (v *VersionSkew) Fix() string {
	if minorOf(v.Want) < minorOf(v.Have) {
		return fmt.Sprintf("set operators[rhoai].channel=stable-%s to install for the running release; OLM never downgrades an operator, so RHOAI %s needs an uninstall of %s first",
			v.Have, v.Want, v.Have)
	}
	return fmt.Sprintf("set operators[rhoai].channel=stable-%s to install for the running release, or upgrade the operator to %s first "+
		"(oc patch subscription %s -n %s --type merge -p '{\"spec\":{\"channel\":\"%s\"}}', wait until its CSV %s.%s.x is Succeeded) and re-run; "+
		"--ignore-preflight rhoai-version lets maasctl change the channel itself",
		v.Have, v.Want, v.Package, v.Namespace, v.Channel, v.Package, v.Want)
}

// DetectVersionSkew compares the RHOAI minor the cluster serves (the
// installed rhods-operator CSV's spec.version, else the DataScienceCluster
// CRD schema's layout) with the minor of operators[rhoai].channel. It
// returns nil when they agree, when the channel names no minor
// (stable-3.x) or when the cluster serves no RHOAI yet. It only reads.
//
// Only the CSV tells 3.3 from 3.4; from the CRD alone a skew is reported
// only when the MaaS switch differs (3.5 against 3.3/3.4).
func DetectVersionSkew(ctx context.Context, c *kube.Clients, inv *inventory.Inventory) (*VersionSkew, error) {
	op := inv.Operator("rhoai")
	if op == nil {
		return nil, nil
	}
	want := versionFromChannel(op.Channel)
	if want == "" {
		return nil, nil
	}
	skew := &VersionSkew{Channel: op.Channel, Want: want, Namespace: op.Namespace, Package: op.Package}
	full, name, err := installedRHOAICSV(ctx, c, inv)
	if err != nil {
		return nil, err
	}
	if have := versionFromChannel(full); have != "" {
		if have == want {
			return nil, nil
		}
		skew.Have, skew.HaveVersion, skew.CSV, skew.Source = have, full, op.Namespace+"/"+name, "CSV "+name
		return skew, nil
	}
	crd, err := c.Dynamic.Resource(crdGVR).Get(ctx, DSCCRD, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsForbidden(err) || kube.IsNotServed(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get CRD %s: %w", DSCCRD, err)
	}
	l, ok := LayoutFromCRD(crd)
	if !ok || l.KServeMaaS() == NewLayout(want, "").KServeMaaS() {
		return nil, nil
	}
	skew.Have, skew.Source = l.Version, "the DataScienceCluster CRD "+DSCCRD+" schema, no rhods-operator CSV of Subscription "+op.Namespace+"/"+op.Package
	return skew, nil
}

// LayoutFromCRD reads the layout from the DataScienceCluster CRD's v2
// schema: aigateway.modelsAsAService present means the 3.5 layout,
// kserve.modelsAsService without it the 3.3/3.4 layout (3.4 added
// sparkoperator). ok is false when the CRD has no v2 schema with either.
func LayoutFromCRD(crd *unstructured.Unstructured) (Layout, bool) {
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		vm, _ := v.(map[string]any)
		if vm["name"] != "v2" {
			continue
		}
		comps, found, _ := unstructured.NestedMap(vm, "schema", "openAPIV3Schema", "properties", "spec", "properties", "components", "properties")
		if !found {
			return Layout{}, false
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
			return Layout{Version: RHOAI35, Source: "DataScienceCluster CRD schema", Components: names}, true
		case has("kserve", "properties", "modelsAsService"):
			v := RHOAI33
			if slices.Contains(names, "sparkoperator") {
				v = RHOAI34
			}
			return Layout{Version: v, Source: "DataScienceCluster CRD schema", Components: names}, true
		}
		return Layout{}, false
	}
	return Layout{}, false
}

var minorRE = regexp.MustCompile(`(\d+)\.(\d+)`)

// versionFromChannel returns "major.minor" from a channel (stable-3.4) or a
// version (3.4.4, v3.5.0), or "" when there is none.
func versionFromChannel(s string) string {
	m := minorRE.FindAllStringSubmatch(s, -1)
	if len(m) == 0 {
		return ""
	}
	last := m[len(m)-1]
	return last[1] + "." + last[2]
}

// minorOf returns the minor number of a 3.x version; other majors count as
// newer than every 3.x (a later layout).
func minorOf(v string) int {
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
