package testenv

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Bundle is one operator version of the file-based catalogs the local
// control plane serves with `opm serve`. Package, channel and CSV names are
// those of the real Red Hat catalogs (../shared/crds/SOURCES.md names the
// CSVs the CRDs come from).
type Bundle struct {
	Package string
	Channel string
	CSV     string
	Version string
	// Replaces is the CSV of the same channel this one upgrades
	// (olm.channel entries[].replaces; "" for the channel's first).
	Replaces string
	// SkipRange is the semver range of installed versions this bundle
	// upgrades directly, from any channel (olm.channel entries[].skipRange
	// and the CSV's olm.skipRange annotation; "" for none).
	SkipRange   string
	DisplayName string
	Provider    string
	// CRDs are globs under the CRD folder: the CRDs the bundle inlines and
	// its CSV owns (the InstallPlan creates them).
	CRDs []string
	// ModuleFiles are files under the Go module cache (paths relative to
	// it, module@version first) whose objects the bundle inlines too:
	// CRDs (owned by the CSV, as CRDs) and ClusterRoles.
	ModuleFiles []string
	// Deployment is the name of the operator Deployment of the CSV's
	// install strategy.
	Deployment string
	// PodLabels label the operator pods (and select them).
	PodLabels map[string]string
	// Env is the env of the operator container (name/value pairs, in
	// order), as the upstream bundle's Deployment sets it.
	Env []EnvVar
	// MoreDeployments are further Deployments of the CSV's install
	// strategy (RHCL's Authorino and Limitador operators).
	MoreDeployments []BundleDeployment
	// InstallModes maps OLM install mode types to whether the CSV supports
	// them (spec.installModes).
	InstallModes map[string]bool
}

// EnvVar is one container env entry; FieldPath, when set, is a
// valueFrom.fieldRef (Value is then ignored).
type EnvVar struct{ Name, Value, FieldPath string }

// BundleDeployment is one more Deployment of a CSV's install strategy.
type BundleDeployment struct {
	Name      string
	PodLabels map[string]string
	Env       []EnvVar
}

// Catalog names: the CatalogSources of openshift-marketplace the fixture
// defines, each served by one `opm serve`.
const (
	CatalogRedHat    = "redhat-operators"
	CatalogCertified = "certified-operators"
	// CatalogNamespace holds the fixture's CatalogSources (the global
	// catalog namespace of the catalog operator, as on OpenShift).
	CatalogNamespace = "openshift-marketplace"
)

// RHOAIBundleVersions maps the RHOAI minor releases the catalog offers
// (channel stable-<minor>) to their CSV version.
var RHOAIBundleVersions = map[string]string{"3.3": "3.3.5", "3.4": "3.4.4", "3.5": "3.5.0"}

// CatalogBundles returns the bundles of each generated catalog, by
// CatalogSource name. rhods-operator has one channel per RHOAI minor
// (RHOAIBundleVersions; default stable-3.5); every other package has the one
// channel of maasctl's inventory defaults.
func CatalogBundles() map[string][]Bundle {
	allNS := map[string]bool{"OwnNamespace": false, "SingleNamespace": false, "MultiNamespace": false, "AllNamespaces": true}
	var rhods []Bundle
	for _, minor := range []string{"3.3", "3.4", "3.5"} {
		v := RHOAIBundleVersions[minor]
		skip := ""
		if minor != "3.3" {
			// rhods-operator bundles carry olm.skipRange from the oldest
			// supported release, so a Subscription moved to a newer
			// stable-<minor> channel upgrades the installed CSV.
			skip = ">=3.3.0 <" + v
		}
		rhods = append(rhods, Bundle{
			Package: "rhods-operator", Channel: "stable-" + minor,
			CSV: "rhods-operator." + v, Version: v, SkipRange: skip,
			DisplayName: "Red Hat OpenShift AI", Provider: "Red Hat",
			CRDs:       []string{"opendatahub/rhoai-" + minor + "/*.yaml"},
			Deployment: "rhods-operator",
			PodLabels:  map[string]string{"name": "rhods-operator"},
			// rhods-operator bundles declare AllNamespaces only.
			InstallModes: allNS,
		})
	}
	return map[string][]Bundle{
		CatalogCertified: {{
			Package: "cloudnative-pg", Channel: "stable-v1",
			CSV: "cloudnative-pg.v1.30.0", Version: "1.30.0",
			DisplayName: "CloudNativePG", Provider: "EDB",
			CRDs:       []string{"cnpg/*.yaml"},
			Deployment: "cnpg-controller-manager",
			PodLabels:  map[string]string{"app.kubernetes.io/name": "cloudnative-pg"},
			InstallModes: map[string]bool{
				"OwnNamespace": true, "SingleNamespace": true, "MultiNamespace": false, "AllNamespaces": true,
			},
		}},
		CatalogRedHat: append([]Bundle{
			// RHCL 1.4.0, the release whose Wasm shim skips Authorino
			// (case N04), and 1.4.1, which replaces it and is the head of
			// stable-1.4: a Subscription without startingCSV gets 1.4.1,
			// one pinned to rhcl-operator.v1.4.0 gets a plan for 1.4.0.
			rhclBundle("1.4.0", ""),
			rhclBundle("1.4.1", "rhcl-operator.v1.4.0"),
			{
				Package: "leader-worker-set", Channel: "stable-v1.0",
				CSV: "leader-worker-set.v1.0.0", Version: "1.0.0",
				DisplayName: "Red Hat build of Leader Worker Set", Provider: "Red Hat",
				CRDs:       []string{"lws-operator/*.yaml"},
				Deployment: "openshift-lws-operator",
				PodLabels:  map[string]string{"name": "openshift-lws-operator"},
				// openshift/lws-operator bundle: OwnNamespace and
				// SingleNamespace only.
				InstallModes: map[string]bool{
					"OwnNamespace": true, "SingleNamespace": true, "MultiNamespace": false, "AllNamespaces": false,
				},
			},
		}, rhods...),
	}
}

// rhclBundle is the rhcl-operator bundle of version v in channel
// stable-1.4, replacing CSV replaces.
func rhclBundle(v, replaces string) Bundle {
	return Bundle{
		Package: "rhcl-operator", Channel: "stable-1.4",
		CSV: "rhcl-operator.v" + v, Version: v, Replaces: replaces,
		DisplayName: "Red Hat Connectivity Link", Provider: "Red Hat",
		CRDs: []string{"kuadrant/*.yaml", "authorino/*.yaml"},
		// The CRDs the Kuadrant operator checks for at start besides its
		// own (AuthConfig, Limitador: it reports MissingDependency without
		// them) and the ClusterRoles the Authorino operator binds for each
		// Authorino, from the modules of the operators `make testenv`
		// builds (upstream they come with the authorino-operator and
		// limitador-operator bundles RHCL depends on; here one CSV runs
		// all three operators, which is how maasctl sees RHCL).
		ModuleFiles: []string{
			// RHCL's own CRDs beyond those of the CRD folder, which the
			// operator watches from its start.
			"github.com/kuadrant/kuadrant-operator@" + KuadrantOperatorVersion + "/bundle/manifests/kuadrant.io_dnspolicies.yaml",
			"github.com/kuadrant/kuadrant-operator@" + KuadrantOperatorVersion + "/bundle/manifests/kuadrant.io_tlspolicies.yaml",
			"github.com/kuadrant/authorino@" + AuthorinoVersion + "/install/crd/authorino.kuadrant.io_authconfigs.yaml",
			"github.com/kuadrant/limitador-operator@" + LimitadorOperatorVersion + "/bundle/manifests/limitador.kuadrant.io_limitadors.yaml",
			"github.com/kuadrant/authorino-operator@" + AuthorinoOperatorVersion + "/bundle/manifests/authorino-manager-role_rbac.authorization.k8s.io_v1_clusterrole.yaml",
			"github.com/kuadrant/authorino-operator@" + AuthorinoOperatorVersion + "/bundle/manifests/authorino-manager-k8s-auth-role_rbac.authorization.k8s.io_v1_clusterrole.yaml",
		},
		Deployment: "kuadrant-operator-controller-manager",
		// kuadrant-operator config/manager/manager.yaml (control-plane) and
		// the bundle's common label app=kuadrant.
		PodLabels: map[string]string{"app": "kuadrant", "control-plane": "controller-manager"},
		// kuadrant-operator v1.5.2 bundle/manifests/kuadrant-operator.clusterserviceversion.yaml.
		Env: []EnvVar{
			{Name: "EXTENSIONS_DIR", Value: "/extensions"},
			{Name: "EXTENSIONS_DESCRIPTOR_SERVICE_PORT", Value: "50051"},
			{Name: "RELATED_IMAGE_WASMSHIM", Value: "quay.io/kuadrant/wasm-shim:v0.14.1"},
			{Name: "RELATED_IMAGE_DEVELOPERPORTAL", Value: "quay.io/kuadrant/developer-portal-controller:v0.2.1"},
			{Name: "RELATED_IMAGE_CONSOLE_PLUGIN_LATEST", Value: "quay.io/kuadrant/console-plugin:v0.4.1"},
			{Name: "RELATED_IMAGE_CONSOLE_PLUGIN_PF5", Value: "quay.io/kuadrant/console-plugin:v0.1.5-2"},
			{Name: "OPERATOR_NAMESPACE", FieldPath: "metadata.namespace"},
		},
		MoreDeployments: []BundleDeployment{
			{
				// authorino-operator v0.21.0 bundle CSV.
				Name:      "authorino-operator",
				PodLabels: map[string]string{"control-plane": "authorino-operator"},
				Env:       []EnvVar{{Name: "RELATED_IMAGE_AUTHORINO", Value: "quay.io/kuadrant/authorino:v0.22.0"}},
			},
			{
				// limitador-operator v0.15.0 bundle CSV; its selector is only
				// control-plane=controller-manager upstream (a CSV of its
				// own there), here also app so it does not select the
				// Kuadrant operator's pods of the same CSV.
				Name:      "limitador-operator-controller-manager",
				PodLabels: map[string]string{"app": "limitador-operator", "control-plane": "controller-manager"},
				Env:       []EnvVar{{Name: "RELATED_IMAGE_LIMITADOR", Value: "quay.io/kuadrant/limitador:v2.1.0"}},
			},
		},
		InstallModes: map[string]bool{
			"OwnNamespace": false, "SingleNamespace": false, "MultiNamespace": false, "AllNamespaces": true,
		},
	}
}

// BundleCRDGlobs lists the CRD globs of every bundle of every catalog.
func BundleCRDGlobs() []string {
	var out []string
	cats := CatalogBundles()
	for _, name := range []string{CatalogRedHat, CatalogCertified} {
		for _, b := range cats[name] {
			out = append(out, b.CRDs...)
		}
	}
	return out
}

// PodReadyDelayAnnotation is the kwok pod-ready stage's delay annotation
// (sigs.k8s.io/kwok kustomize/stage/pod/general/pod-ready.yaml,
// delay.durationFrom). testenv's kwok stages honour it.
const PodReadyDelayAnnotation = "pod-ready.stage.kwok.x-k8s.io/delay"

// fbcObject is one object of a file-based catalog (operator-registry
// alpha/declcfg: schemas olm.package, olm.channel, olm.bundle). The
// declcfg types are not imported: they would bring operator-registry's
// whole dependency tree into the main module; `opm validate` checks what
// this writes (TestCatalogValidates).
type fbcObject map[string]any

// WriteCatalog writes catalog name (a key of CatalogBundles) as a
// file-based catalog dir/catalog.json: one olm.package per package
// (defaultChannel: the highest channel), one olm.channel per channel, one
// olm.bundle per bundle. No bundle names an image: its CSV and CRDs are
// inlined as olm.bundle.object properties (base64 JSON), so OLM installs it
// without an unpack Job (which never runs under kwok). podReadyDelay, when
// positive, annotates the operator pods with PodReadyDelayAnnotation: kwok
// then reports them Ready that long after they start, standing for an
// image pull, and the CSV stays Installing until then.
//
// Errors: an unknown catalog, a CRD glob matching nothing, an unreadable CRD.
func WriteCatalog(dir, crdDir, name string, podReadyDelay time.Duration) error {
	bundles, ok := CatalogBundles()[name]
	if !ok {
		return fmt.Errorf("catalog %q: not one of %s, %s", name, CatalogRedHat, CatalogCertified)
	}
	var objs []fbcObject
	byPkg := map[string][]Bundle{}
	var pkgs []string
	for _, b := range bundles {
		if _, seen := byPkg[b.Package]; !seen {
			pkgs = append(pkgs, b.Package)
		}
		byPkg[b.Package] = append(byPkg[b.Package], b)
	}
	for _, p := range pkgs {
		bs := byPkg[p]
		chans := map[string][]any{}
		var names []string
		for _, b := range bs {
			if _, seen := chans[b.Channel]; !seen {
				names = append(names, b.Channel)
			}
			entry := map[string]any{"name": b.CSV}
			if b.Replaces != "" {
				entry["replaces"] = b.Replaces
			}
			if b.SkipRange != "" {
				entry["skipRange"] = b.SkipRange
			}
			chans[b.Channel] = append(chans[b.Channel], entry)
		}
		sort.Strings(names)
		objs = append(objs, fbcObject{"schema": "olm.package", "name": p, "defaultChannel": names[len(names)-1]})
		for _, c := range names {
			objs = append(objs, fbcObject{"schema": "olm.channel", "package": p, "name": c, "entries": chans[c]})
		}
		for _, b := range bs {
			o, err := bundleObject(b, crdDir, podReadyDelay)
			if err != nil {
				return fmt.Errorf("catalog %s: %w", name, err)
			}
			objs = append(objs, o)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("catalog %s: %w", name, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, o := range objs {
		if err := enc.Encode(o); err != nil {
			return fmt.Errorf("catalog %s: %w", name, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "catalog.json"), buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("catalog %s: %w", name, err)
	}
	return nil
}

// bundleObject is b's olm.bundle: olm.package and olm.gvk properties, and
// the CRDs and CSV inlined as olm.bundle.object.
func bundleObject(b Bundle, crdDir string, podReadyDelay time.Duration) (fbcObject, error) {
	var crds []*unstructured.Unstructured
	for _, g := range b.CRDs {
		files, err := filepath.Glob(filepath.Join(crdDir, g))
		if err != nil || len(files) == 0 {
			return nil, fmt.Errorf("bundle %s: no CRD files match %s under %s (set %s)", b.CSV, g, crdDir, EnvCRDDir)
		}
		sort.Strings(files)
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", b.CSV, err)
			}
			objs, err := decodeObjects(data, f)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", b.CSV, err)
			}
			for _, o := range objs {
				unstructured.RemoveNestedField(o.Object, "status")
				crds = append(crds, o)
			}
		}
	}
	var others []*unstructured.Unstructured
	if len(b.ModuleFiles) > 0 {
		cache, err := goModCache(context.Background())
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", b.CSV, err)
		}
		for _, f := range b.ModuleFiles {
			p := filepath.Join(cache, f)
			data, err := os.ReadFile(p)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w: %w (make testenv downloads the module)", b.CSV, ErrNotBuilt, err)
			}
			objs, err := decodeObjects(data, p)
			if err != nil {
				return nil, fmt.Errorf("bundle %s: %w", b.CSV, err)
			}
			for _, o := range objs {
				unstructured.RemoveNestedField(o.Object, "status")
				unstructured.RemoveNestedField(o.Object, "metadata", "creationTimestamp")
				if o.GetKind() == "CustomResourceDefinition" {
					crds = append(crds, o)
				} else {
					others = append(others, o)
				}
			}
		}
	}
	props := []any{map[string]any{"type": "olm.package", "value": map[string]any{"packageName": b.Package, "version": b.Version}}}
	var owned []any
	for _, c := range crds {
		group, _, _ := unstructured.NestedString(c.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(c.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(c.Object, "spec", "versions")
		storage := ""
		for _, v := range versions {
			vm, _ := v.(map[string]any)
			name, _ := vm["name"].(string)
			if s, _ := vm["storage"].(bool); s {
				storage = name
			}
			if served, _ := vm["served"].(bool); served {
				props = append(props, map[string]any{"type": "olm.gvk", "value": map[string]any{"group": group, "kind": kind, "version": name}})
			}
		}
		owned = append(owned, map[string]any{"name": c.GetName(), "version": storage, "kind": kind, "displayName": kind})
	}
	csv := csvObject(b, owned, podReadyDelay)
	for _, o := range append(append(crds, others...), csv) {
		j, err := json.Marshal(o.Object)
		if err != nil {
			return nil, fmt.Errorf("bundle %s: %w", b.CSV, err)
		}
		props = append(props, map[string]any{"type": "olm.bundle.object", "value": map[string]any{"data": base64.StdEncoding.EncodeToString(j)}})
	}
	return fbcObject{"schema": "olm.bundle", "package": b.Package, "name": b.CSV, "properties": props}, nil
}

// csvObject is b's ClusterServiceVersion as its bundle ships it.
func csvObject(b Bundle, owned []any, podReadyDelay time.Duration) *unstructured.Unstructured {
	var modes []any
	for _, t := range []string{"OwnNamespace", "SingleNamespace", "MultiNamespace", "AllNamespaces"} {
		modes = append(modes, map[string]any{"type": t, "supported": b.InstallModes[t]})
	}
	deployments := []any{deploymentSpec(b, BundleDeployment{Name: b.Deployment, PodLabels: b.PodLabels, Env: b.Env}, podReadyDelay)}
	for _, d := range b.MoreDeployments {
		deployments = append(deployments, deploymentSpec(b, d, podReadyDelay))
	}
	annotations := map[string]any{"capabilities": "Seamless Upgrades", "operators.operatorframework.io/builder": "maasctl-testenv"}
	if b.SkipRange != "" {
		annotations["olm.skipRange"] = b.SkipRange
	}
	csv := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operators.coreos.com/v1alpha1",
		"kind":       "ClusterServiceVersion",
		"metadata": map[string]any{
			"name":        b.CSV,
			"annotations": annotations,
		},
		"spec": map[string]any{
			"displayName":  b.DisplayName,
			"version":      b.Version,
			"provider":     map[string]any{"name": b.Provider},
			"maturity":     "stable",
			"installModes": modes,
			"customresourcedefinitions": map[string]any{
				"owned": owned,
			},
			"install": map[string]any{
				"strategy": "deployment",
				"spec": map[string]any{
					"deployments": deployments,
				},
			},
		},
	}}
	if b.Replaces != "" {
		_ = unstructured.SetNestedField(csv.Object, b.Replaces, "spec", "replaces")
	}
	return csv
}

// deploymentSpec is one entry of a CSV's install strategy deployments.
func deploymentSpec(b Bundle, d BundleDeployment, podReadyDelay time.Duration) map[string]any {
	labels := map[string]any{}
	for k, v := range d.PodLabels {
		labels[k] = v
	}
	podMeta := map[string]any{"labels": labels}
	if podReadyDelay > 0 {
		podMeta["annotations"] = map[string]any{PodReadyDelayAnnotation: podReadyDelay.String()}
	}
	image := d.Name
	if d.Name == b.Deployment {
		image = b.Package
	}
	container := map[string]any{
		"name": "manager",
		// Never pulled: kwok runs no containers.
		"image": "registry.invalid/maasctl-testenv/" + image + ":v" + b.Version,
	}
	var env []any
	for _, e := range d.Env {
		if e.FieldPath != "" {
			env = append(env, map[string]any{"name": e.Name, "valueFrom": map[string]any{"fieldRef": map[string]any{"fieldPath": e.FieldPath}}})
			continue
		}
		env = append(env, map[string]any{"name": e.Name, "value": e.Value})
	}
	if env != nil {
		container["env"] = env
	}
	return map[string]any{
		"name": d.Name,
		"spec": map[string]any{
			"replicas": int64(1),
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": podMeta,
				"spec":     map[string]any{"containers": []any{container}},
			},
		},
	}
}

// catalogChannels lists "package/channel" of a catalog, sorted (for logs).
func catalogChannels(name string) string {
	var out []string
	for _, b := range CatalogBundles()[name] {
		out = append(out, b.Package+"/"+b.Channel)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
