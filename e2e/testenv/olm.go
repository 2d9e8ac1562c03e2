package testenv

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The real Operator Lifecycle Manager of the local control plane (issue 12):
// operator-framework/operator-lifecycle-manager's olm and catalog operators
// and operator-registry's `opm serve`, built by `make testenv` from the
// tools modules e2e/testenv/olm and e2e/testenv/opm.
//
// olm and catalog hard-code their health and metrics listeners (:8080, and
// :8443 with TLS), and two control planes run at once in the e2e tests, so
// each runs through netns-run (e2e/cmd/netns-run) in a network namespace of
// its own, which forwards only the kube-apiserver's port to the host's
// loopback; the opm servers run inside the catalog operator's namespace,
// where the CatalogSources' addresses (127.0.0.1:50051, :50052) point. What
// they start can reach nothing but the apiserver.
//
// OLM's package server (the packages.operators.coreos.com PackageManifest
// API) is not run: it is an aggregated API server, and kube-apiserver's
// aggregator dials an APIService's backend at its Service's ClusterIP (or,
// with --enable-aggregator-routing, its endpoint IPs; EndpointSlice
// validation refuses loopback addresses). In the host's network namespace
// either is a 10.x address, which the network rule of these tests forbids
// (REAL-COMPONENTS.md). maasctl's preflight reads PackageManifests only
// where the API is served, as on a cluster without the package server.

// Component names of OLM (see the other component names in testenv.go).
const (
	OLMOperator     = "olm"
	CatalogOperator = "catalog"
	Opm             = "opm"
	NetnsRun        = "netns-run"
)

// OLMVersion is the operator-lifecycle-manager module version whose CRDs
// (deploy/chart/crds) are read from the module cache; it matches the olm
// and catalog binaries `make testenv` builds (e2e/testenv/olm/go.mod).
const OLMVersion = "v0.46.0"

// OpenShiftAPIVersion is the github.com/openshift/api module version the
// olm tools module requires (e2e/testenv/olm/go.mod). OLM finds the
// config.openshift.io group served (the fixture's Ingress and
// ClusterVersion) and then watches Proxy and APIServer too, failing its
// start when they are not served; their CRDs come from this module.
const OpenShiftAPIVersion = "v0.0.0-20260204104751-e09e5a4ebcd0"

// openShiftConfigCRDs are the config.openshift.io CRDs OLM watches on
// OpenShift, under config/v1/zz_generated.crd-manifests of OpenShiftAPIVersion.
var openShiftConfigCRDs = []string{
	"0000_03_config-operator_01_proxies.crd.yaml",
	"0000_10_config-operator_01_apiservers-Default.crd.yaml",
}

// opmPorts are the ports, inside the catalog operator's network namespace,
// on which `opm serve` serves each catalog.
var opmPorts = map[string]int{CatalogRedHat: 50051, CatalogCertified: 50052}

// olmCRDDir returns the folder of OLM's CRDs in the module cache (wrapping
// ErrNotBuilt when the module is not there: `make testenv` downloads it).
func olmCRDDir(ctx context.Context) (string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "github.com", "operator-framework", "operator-lifecycle-manager@"+OLMVersion, "deploy", "chart", "crds")
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if len(files) == 0 {
		return "", fmt.Errorf("%w: OLM CRDs not in the module cache (%s)", ErrNotBuilt, dir)
	}
	return dir, nil
}

// OLMCRDFiles returns OLM's CRD files from the module cache, sorted, and
// the config.openshift.io CRDs OLM watches on OpenShift (Proxy, APIServer).
func OLMCRDFiles(ctx context.Context) ([]string, error) {
	dir, err := olmCRDDir(ctx)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	cache, err := goModCache(ctx)
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(cache, "github.com", "openshift", "api@"+OpenShiftAPIVersion, "config", "v1", "zz_generated.crd-manifests")
	for _, f := range openShiftConfigCRDs {
		p := filepath.Join(cfg, f)
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("%w: OpenShift config CRD %s not in the module cache", ErrNotBuilt, p)
		}
		files = append(files, p)
	}
	return files, nil
}

// catalogAddress is the CatalogSource spec.address of catalog name.
func catalogAddress(name string) string {
	return "127.0.0.1:" + strconv.Itoa(opmPorts[name])
}

// olmFixture returns objs with the OLM objects made for the real OLM: each
// CatalogSource of CatalogBundles in CatalogNamespace serves from its opm
// (spec.address; no image, which would make the catalog operator start a
// registry Pod), and the status of CatalogSources and OperatorGroups is
// dropped: the real operators write it. objs is not changed.
func olmFixture(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	cats := CatalogBundles()
	for _, o := range objs {
		switch o.GetKind() {
		case "CatalogSource":
			o = o.DeepCopy()
			unstructured.RemoveNestedField(o.Object, "status")
			if _, ok := cats[o.GetName()]; ok && o.GetNamespace() == CatalogNamespace {
				unstructured.RemoveNestedField(o.Object, "spec", "image")
				unstructured.RemoveNestedField(o.Object, "spec", "grpcPodConfig")
				_ = unstructured.SetNestedField(o.Object, "grpc", "spec", "sourceType")
				_ = unstructured.SetNestedField(o.Object, catalogAddress(o.GetName()), "spec", "address")
			}
		case "OperatorGroup":
			o = o.DeepCopy()
			unstructured.RemoveNestedField(o.Object, "status")
		}
		out = append(out, o)
	}
	return out
}

// restartFlag makes netns-run start a program of OLM's again when it exits,
// after the kubelet's back-off, as the kubelet restarts the container of
// the olm-operator or catalog-operator Deployment's pod on a cluster. OLM
// v0.46.0 has been seen to panic once at start (a nil OperatorGroup from
// its lister in syncNamespace, olm/operator.go:1126); on a cluster that is
// one container restart, and here it must be no more than that. Each
// restart is a "netns-run: restart" line in the component's log
// (ComponentStatus.Restarts).
const restartFlag = "--restart"

// olmLaunch is one OLM process group to start through netns-run.
type olmLaunch struct {
	name string
	args []string
	env  []string
}

// olmLaunches returns how to run the OLM components of a control plane
// whose apiserver listens on apiPort: the olm operator alone, and the
// catalog operator with one `opm serve` per catalog (catalogs written under
// stateDir/catalogs).
func olmLaunches(o *resolved, stateDir, kubeconfig string, apiPort int) ([]olmLaunch, error) {
	bin := func(n string) string { return filepath.Join(o.BinDir, n) }
	fwd := "--forward=" + strconv.Itoa(apiPort)
	var catalogArgs []string
	catalogArgs = append(catalogArgs, fwd, restartFlag, "--")
	names := []string{CatalogRedHat, CatalogCertified}
	for _, n := range names {
		dir := filepath.Join(stateDir, "catalogs", n)
		if err := WriteCatalog(dir, o.CRDDir, n, o.OperatorPodReadyDelay); err != nil {
			return nil, err
		}
		// --pprof-addr="": opm opens pprof on localhost:6060 by default,
		// where the two servers would collide.
		catalogArgs = append(catalogArgs, bin(Opm), "serve", dir, "-p", strconv.Itoa(opmPorts[n]), "--pprof-addr=", "---")
	}
	catalogArgs = append(catalogArgs, bin(CatalogOperator),
		"--kubeconfig="+kubeconfig,
		// The global catalog namespace, as on OpenShift: Subscriptions of
		// any namespace resolve from its CatalogSources.
		"--namespace="+CatalogNamespace,
		"--writeStatusName=", // no ClusterOperator outside OpenShift
	)
	return []olmLaunch{
		{name: OLMOperator, args: []string{fwd, restartFlag, "--", bin(OLMOperator), "--writeStatusName=", "--writePackageServerStatusName="},
			// olm reads KUBECONFIG (it has no flag); OPERATOR_NAMESPACE
			// and OPERATOR_NAME are its Deployment's env upstream.
			env: []string{"KUBECONFIG=" + kubeconfig, "OPERATOR_NAMESPACE=openshift-operator-lifecycle-manager", "OPERATOR_NAME=olm-operator"}},
		{name: CatalogOperator, args: catalogArgs},
	}, nil
}

// olmServer is the kubeconfig and loopback port OLM's operators use: the
// control plane's, or with Options.OLMVia the server it returns (written
// to olm.kubeconfig in the state folder, no credentials).
func olmServer(ctx context.Context, o *resolved, cfg *rest.Config, kubeconfig string, apiPort int) (string, int, error) {
	if o.OLMVia == nil {
		return kubeconfig, apiPort, nil
	}
	if o.Detach {
		return "", 0, errors.New("testenv: Options.OLMVia cannot be used with Detach (the server it returns lives in the calling process)")
	}
	server, err := o.OLMVia(ctx, rest.CopyConfig(cfg))
	if err != nil {
		return "", 0, fmt.Errorf("Options.OLMVia: %w", err)
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "http" || u.Hostname() != "127.0.0.1" || u.Port() == "" || (u.Path != "" && u.Path != "/") {
		return "", 0, fmt.Errorf("Options.OLMVia returned %q: want http://127.0.0.1:PORT (netns-run forwards one loopback port into OLM's namespaces)", server)
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil || port < 1 || port > 65535 {
		return "", 0, fmt.Errorf("Options.OLMVia returned %q: port is not 1-65535", server)
	}
	path := filepath.Join(o.StateDir, "olm.kubeconfig")
	if err := writeKubeconfig(path, server, nil, ""); err != nil {
		return "", 0, fmt.Errorf("OLM kubeconfig: %w", err)
	}
	return path, port, nil
}

var (
	gvrCatalogSource = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1alpha1", Resource: "catalogsources"}
	gvrOperatorGroup = schema.GroupVersionResource{Group: "operators.coreos.com", Version: "v1", Resource: "operatorgroups"}
)

// waitOLMReady waits until the catalog operator reports every generated
// catalog's CatalogSource READY (it has connected to its opm) and the olm
// operator has synced every OperatorGroup of objs (status.namespaces set).
func waitOLMReady(ctx context.Context, dyn dynamic.Interface, objs []*unstructured.Unstructured) error {
	for _, o := range objs {
		switch o.GetKind() {
		case "CatalogSource":
			if _, ok := CatalogBundles()[o.GetName()]; !ok || o.GetNamespace() != CatalogNamespace {
				continue
			}
			ri := dyn.Resource(gvrCatalogSource).Namespace(o.GetNamespace())
			if err := waitFor(ctx, ri, o.GetName(), func(u *unstructured.Unstructured) (bool, error) {
				s, _, _ := unstructured.NestedString(u.Object, "status", "connectionState", "lastObservedState")
				return s == "READY", nil
			}); err != nil {
				return fmt.Errorf("wait for CatalogSource %s/%s READY: %w", o.GetNamespace(), o.GetName(), err)
			}
		case "OperatorGroup":
			ri := dyn.Resource(gvrOperatorGroup).Namespace(o.GetNamespace())
			if err := waitFor(ctx, ri, o.GetName(), func(u *unstructured.Unstructured) (bool, error) {
				_, found, _ := unstructured.NestedSlice(u.Object, "status", "namespaces")
				return found, nil
			}); err != nil {
				return fmt.Errorf("wait for OperatorGroup %s/%s synced by olm: %w", o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	return nil
}

// errNeedsRoot is returned when OLM cannot get its network namespaces.
var errNeedsRoot = errors.New("the real OLM runs in network namespaces of its own, which needs root (CAP_SYS_ADMIN); run the tests as root or set Options.NoOLM")

func checkRoot() error {
	if os.Geteuid() != 0 {
		return errNeedsRoot
	}
	return nil
}

// ExternalSecretsVersion is the External Secrets Operator release whose
// ExternalSecret CRD checks the ExternalSecrets 'maasctl render --secrets
// external-secrets' writes ('make testenv' downloads its module).
const ExternalSecretsVersion = "v0.16.2"

// ExternalSecretCRDFile returns the ExternalSecret CRD of
// ExternalSecretsVersion from the module cache.
func ExternalSecretCRDFile(ctx context.Context) (string, error) {
	cache, err := goModCache(ctx)
	if err != nil {
		return "", err
	}
	p := filepath.Join(cache, "github.com", "external-secrets", "external-secrets@"+ExternalSecretsVersion, "config", "crds", "bases", "external-secrets.io_externalsecrets.yaml")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: the ExternalSecret CRD %s is not in the module cache (make testenv downloads it)", ErrNotBuilt, p)
	}
	return p, nil
}
