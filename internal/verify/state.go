package verify

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/waiters"
)

// Kinds read by Snapshot (the API versions maasctl installs, see assets/).
var (
	DSCGVK                  = schema.GroupVersionKind{Group: "datasciencecluster.opendatahub.io", Version: "v2", Kind: "DataScienceCluster"}
	DSCIGVK                 = schema.GroupVersionKind{Group: "dscinitialization.opendatahub.io", Version: "v2", Kind: "DSCInitialization"}
	KuadrantGVK             = schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1beta1", Kind: "Kuadrant"}
	AuthorinoGVK            = schema.GroupVersionKind{Group: "operator.authorino.kuadrant.io", Version: "v1beta1", Kind: "Authorino"}
	LimitadorGVK            = schema.GroupVersionKind{Group: "limitador.kuadrant.io", Version: "v1alpha1", Kind: "Limitador"}
	GatewayGVK              = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "Gateway"}
	GatewayClassGVK         = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "GatewayClass"}
	HTTPRouteGVK            = schema.GroupVersionKind{Group: "gateway.networking.k8s.io", Version: "v1", Kind: "HTTPRoute"}
	RouteGVK                = schema.GroupVersionKind{Group: "route.openshift.io", Version: "v1", Kind: "Route"}
	CertificateGVK          = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "Certificate"}
	ClusterIssuerGVK        = schema.GroupVersionKind{Group: "cert-manager.io", Version: "v1", Kind: "ClusterIssuer"}
	ExternalProviderGVK     = schema.GroupVersionKind{Group: "inference.opendatahub.io", Version: "v1alpha1", Kind: "ExternalProvider"}
	ExternalModelGVK        = release.ExternalModelGVK
	MaaSModelRefGVK         = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSModelRef"}
	MaaSAuthPolicyGVK       = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSAuthPolicy"}
	MaaSSubscriptionGVK     = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "MaaSSubscription"}
	AuthPolicyGVK           = schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1", Kind: "AuthPolicy"}
	TokenRateLimitPolicyGVK = schema.GroupVersionKind{Group: "kuadrant.io", Version: "v1alpha1", Kind: "TokenRateLimitPolicy"}
	CSVGVK                  = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "ClusterServiceVersion"}
	SubscriptionGVK         = schema.GroupVersionKind{Group: "operators.coreos.com", Version: "v1alpha1", Kind: "Subscription"}
	DeploymentGVK           = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	PodGVK                  = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	ServiceGVK              = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	SecretGVK               = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	ConfigMapGVK            = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	EndpointSliceGVK        = schema.GroupVersionKind{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}
)

// SecretInfo is what maasctl reads of a Secret: never its values.
type SecretInfo struct {
	Namespace, Name string
	Exists          bool
	// Keys are the data keys holding a non-empty value, sorted.
	Keys   []string
	Labels map[string]string
}

// HasKey reports whether the Secret has a non-empty value under k.
func (s SecretInfo) HasKey(k string) bool {
	for _, x := range s.Keys {
		if x == k {
			return true
		}
	}
	return false
}

// Backend is the in-cluster Service behind an ExternalProvider endpoint
// (<service>.<namespace>.svc[.cluster.local]) and its EndpointSlices.
type Backend struct {
	Host            string
	Namespace, Name string
	Service         *unstructured.Unstructured
	// ReadyEndpoints counts endpoints with conditions.ready true (or unset,
	// which discovery.k8s.io/v1 defines as ready).
	ReadyEndpoints int
	// Endpoints counts all endpoints of the Service's EndpointSlices.
	Endpoints int
	// Workloads are the Deployments in the Service's namespace whose pod
	// template carries every label of the Service's selector (the model
	// server's own), read only when no endpoint is ready.
	Workloads []Workload
}

// Workload is a Deployment behind a model server's Service: spec.replicas
// (1 when unset) and status.readyReplicas.
type Workload struct {
	Name            string
	Replicas, Ready int64
}

// State is a read-only snapshot of the live objects the checks and
// findings look at, taken by Snapshot. A nil object was not found; Missing
// says why (not found, kind not served, or the read error).
type State struct {
	Inv *inventory.Inventory
	// Release is the RHOAI release read, its Version filled in; the names
	// it places (maas-api, maas-db-config, the DSC) come from its methods.
	Release release.Release
	// Caller is the identity of the kubeconfig user (zero if unknown).
	Caller    Identity
	CallerErr string

	DSC, DSCI  *unstructured.Unstructured
	Kuadrant   *unstructured.Unstructured
	Authorinos []*unstructured.Unstructured
	// Limitadors are the Limitador CRs in the Kuadrant namespace, read
	// only when Kuadrant has not reported Ready=True (nil otherwise, and
	// when the read failed; empty, not nil, when it found none): the
	// doctor then tells a Kuadrant whose operator never made its
	// Limitador from one that waits for it.
	Limitadors   []*unstructured.Unstructured
	KuadrantPods []*unstructured.Unstructured
	// KuadrantOperators are the Deployments in the Kuadrant operator
	// namespace whose pod template matches kuadrant.operatorSelector.
	KuadrantOperators []*unstructured.Unstructured
	// AuthorinoService is Authorino's authorization Service
	// (kuadrant.authorinoService in the Kuadrant namespace), which the
	// gateway's Wasm shim calls on every request, with its EndpointSlices
	// and, when none is ready, the Deployments behind it.
	AuthorinoService *Backend
	// AuthorinoOperator is the Authorino operator's Deployment
	// (AuthorinoOperatorDeployment in the Kuadrant operator namespace;
	// nil when not found), which keeps Authorino's Deployment and Services
	// as its Authorino CR says.
	AuthorinoOperator *unstructured.Unstructured
	// AuthorinoDeployment is the Deployment the Authorino operator makes
	// for the Authorino CR (named after it, in the Kuadrant namespace;
	// nil when not found): MAAS-V018 reads its CA trust.
	AuthorinoDeployment *unstructured.Unstructured
	Gateway             *unstructured.Unstructured
	GatewayClass        *unstructured.Unstructured
	GatewayService      *unstructured.Unstructured
	Certificate         *unstructured.Unstructured
	// CertIssuer is the ClusterIssuer gateway.certIssuer names (nil: not
	// found, or no issuer configured).
	CertIssuer       *unstructured.Unstructured
	Route            *unstructured.Unstructured
	MaaSAPI          *unstructured.Unstructured
	DBConfig         SecretInfo
	MonitoringConfig *unstructured.Unstructured
	Providers        map[string]*unstructured.Unstructured // by namespace/name
	ProviderSecrets  map[string]SecretInfo                 // by namespace/name
	Models           map[string]*unstructured.Unstructured // ExternalModel by namespace/name
	ModelRefs        map[string]*unstructured.Unstructured // MaaSModelRef by namespace/name
	AuthPolicies     []*unstructured.Unstructured          // MaaSAuthPolicy in the MaaS namespace
	Subscriptions    []*unstructured.Unstructured          // MaaSSubscription in the MaaS namespace
	KuadrantPolicies map[string]*unstructured.Unstructured // AuthPolicy / TokenRateLimitPolicy by "Kind namespace/name"
	// GatewayAuthPolicy is the MaaS controller's Gateway-level AuthPolicy
	// (Release.MaaSControllerFacts().GatewayAuthPolicy in the Gateway's
	// namespace).
	GatewayAuthPolicy *unstructured.Unstructured
	Backends          map[string]*Backend          // by provider namespace/name
	CSVs              []*unstructured.Unstructured // every namespace's, without OLM's copies (olm.copiedFrom)
	RHCLSubscription  *unstructured.Unstructured   // the RHCL operator's Subscription
	// WasmPlugin is the one older Kuadrant operators write for the MaaS
	// Gateway (WasmPluginName, in the Gateway's namespace); read only
	// when WasmFilter holds no Wasm shim config, else nil.
	WasmPlugin *unstructured.Unstructured
	// WasmFilter is the EnvoyFilter kuadrant-operator v1.5 writes for
	// the MaaS Gateway instead (same name and namespace).
	WasmFilter *unstructured.Unstructured
	// MaaSAPIPods are the pods of Deployment maas-api (its selector).
	MaaSAPIPods []*unstructured.Unstructured
	// Schema is the database's answer to the schema check Job (case N10);
	// nil when no SchemaProber ran (verify/doctor without --database).
	Schema             *SchemaProbe
	Missing            map[string]string // "Kind namespace/name" → reason
	NotServed          map[string]bool   // by Kind
	gatewayServiceName string
}

// AuthorinoOperatorDeployment is the Deployment of the Authorino operator
// RHCL installs beside the Kuadrant operator (authorino-operator bundle
// CSV, spec.install.spec.deployments[0].name).
const AuthorinoOperatorDeployment = "authorino-operator"

// Key joins namespace and name as namespace/name.
func Key(ns, name string) string { return ns + "/" + name }

// describe names an object as Kind namespace/name, or Kind name when
// cluster-scoped.
func describe(kind, ns, name string) string {
	if ns == "" {
		return kind + " " + name
	}
	return kind + " " + ns + "/" + name
}

// snapshotWorkers bounds the concurrent reads of Snapshot.
const snapshotWorkers = 8

// manyAtLeast is the number of objects of one kind in one namespace from
// which Snapshot lists the kind instead of getting each object.
const manyAtLeast = 4

// Snapshot reads, once, every object the Verify checks and doctor rules
// need for inventory inv on release rel (the zero Release is 3.5 with the
// inventory's names). Objects that are missing or whose kind is not
// served are recorded in Missing and NotServed; only an error that makes
// the whole snapshot useless (the context ended) is returned.
func Snapshot(ctx context.Context, r Reader, inv *inventory.Inventory, rel release.Release) (*State, error) {
	rel = rel.WithDefaults()
	s := &State{
		Inv: inv, Release: rel, Providers: map[string]*unstructured.Unstructured{}, ProviderSecrets: map[string]SecretInfo{},
		Models: map[string]*unstructured.Unstructured{}, ModelRefs: map[string]*unstructured.Unstructured{},
		KuadrantPolicies: map[string]*unstructured.Unstructured{}, Backends: map[string]*Backend{},
		Missing: map[string]string{}, NotServed: map[string]bool{},
	}
	// The reads are independent but for the generated Kuadrant policies,
	// which the MaaS policies name: snapshotWorkers at a time, in two
	// rounds.
	sn := &snapshotter{ctx: ctx, r: r, s: s}
	sn.reads.SetLimit(snapshotWorkers)
	sn.platform(inv, rel)
	providerSecret, secrets := sn.models(inv, rel)
	sn.access(inv, rel)
	_ = sn.reads.Wait()
	for pk, sk := range providerSecret {
		s.ProviderSecrets[pk] = *secrets[sk]
	}
	sn.generated(rel)
	_ = sn.reads.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	return s, nil
}

// snapshotter runs Snapshot's reads; mu guards the maps of s and
// recordMissing.
type snapshotter struct {
	ctx   context.Context
	r     Reader
	s     *State
	mu    sync.Mutex
	reads errgroup.Group
}

func (sn *snapshotter) async(f func()) { sn.reads.Go(func() error { f(); return nil }) }

func (sn *snapshotter) get(gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	o, err := sn.r.Get(sn.ctx, gvk, ns, name)
	if err != nil {
		sn.mu.Lock()
		sn.s.recordMissing(gvk, ns, name, err)
		sn.mu.Unlock()
		return nil
	}
	return o
}

func (sn *snapshotter) list(gvk schema.GroupVersionKind, ns, sel string) []*unstructured.Unstructured {
	l, err := sn.r.List(sn.ctx, gvk, ns, sel)
	if err != nil {
		sn.mu.Lock()
		sn.s.recordMissing(gvk, ns, "*", err)
		sn.mu.Unlock()
		return nil
	}
	return l
}

func (sn *snapshotter) put(m map[string]*unstructured.Unstructured, k string, o *unstructured.Unstructured) {
	sn.mu.Lock()
	m[k] = o
	sn.mu.Unlock()
}

// backend reads the Service of b, counts its ready endpoints and, with
// none, names the workloads behind it.
func (sn *snapshotter) backend(b *Backend) {
	b.Service = sn.get(ServiceGVK, b.Namespace, b.Name)
	for _, es := range sn.list(EndpointSliceGVK, b.Namespace, "kubernetes.io/service-name="+b.Name) {
		countEndpoints(es, b)
	}
	if b.Service != nil && b.ReadyEndpoints == 0 {
		b.Workloads = workloadsBehind(b.Service, sn.list(DeploymentGVK, b.Namespace, ""))
	}
}

// platform starts the reads of the platform's objects: the caller, DSC,
// DSCI, Kuadrant and Authorino, the Gateway and its Service, certificate
// and Route, maas-api, maas-db-config and the monitoring config.
func (sn *snapshotter) platform(inv *inventory.Inventory, rel release.Release) {
	s, get, list, async := sn.s, sn.get, sn.list, sn.async
	async(func() {
		if id, err := sn.r.WhoAmI(sn.ctx); err != nil {
			s.CallerErr = err.Error()
		} else {
			s.Caller = id
		}
	})
	async(func() { s.DSC = get(DSCGVK, "", rel.DSC(inv)) })
	async(func() { s.DSCI = get(DSCIGVK, "", inv.RHOAI.DSCIName) })
	async(func() {
		k := get(KuadrantGVK, inv.Kuadrant.Namespace, inv.Kuadrant.Name)
		s.Kuadrant = k
		if k == nil {
			return
		}
		if c, ok := waiters.GetCondition(k, "Ready"); !ok || c.Status != "True" {
			// Not nil once read, even when empty: nil is "not read" (or
			// the read failed, which is not recorded as a missing object).
			if l, err := sn.r.List(sn.ctx, LimitadorGVK, inv.Kuadrant.Namespace, ""); err == nil {
				s.Limitadors = append([]*unstructured.Unstructured{}, l...)
			}
		}
	})
	async(func() { s.Authorinos = list(AuthorinoGVK, inv.Kuadrant.Namespace, "") })
	async(func() { s.KuadrantPods = list(PodGVK, inv.Kuadrant.OperatorNamespace, inv.Kuadrant.OperatorSelector) })
	async(func() {
		s.KuadrantOperators = templateMatches(list(DeploymentGVK, inv.Kuadrant.OperatorNamespace, ""), inv.Kuadrant.OperatorSelector)
	})
	async(func() {
		b := &Backend{Namespace: inv.Kuadrant.Namespace, Name: inv.Kuadrant.AuthorinoService}
		b.Host = b.Name + "." + b.Namespace + ".svc"
		sn.backend(b)
		s.AuthorinoService = b
	})
	async(func() {
		s.AuthorinoOperator = get(DeploymentGVK, inv.Kuadrant.OperatorNamespace, AuthorinoOperatorDeployment)
	})
	async(func() { s.AuthorinoDeployment = get(DeploymentGVK, inv.Kuadrant.Namespace, inv.Kuadrant.AuthorinoName) })
	async(func() { s.GatewayClass = get(GatewayClassGVK, "", inv.Gateway.ClassName) })
	async(func() { s.Gateway = get(GatewayGVK, inv.Gateway.Namespace, inv.Gateway.Name) })
	// The WasmPlugin is read only when the EnvoyFilter that replaced it
	// (kuadrant-operator v1.5) holds no Wasm shim config: one read on a
	// current cluster.
	async(func() {
		s.WasmFilter = get(EnvoyFilterGVK, inv.Gateway.Namespace, WasmPluginName(inv.Gateway.Name))
		if s.WasmFilter == nil || wasmServices(s.WasmFilter) == nil {
			s.WasmPlugin = get(WasmPluginGVK, inv.Gateway.Namespace, WasmPluginName(inv.Gateway.Name))
		}
	})
	// Istio names the Gateway's Service <gateway>-<class>
	// (istio pilot/pkg/config/kube/gateway deployment controller).
	s.gatewayServiceName = inv.Gateway.Name + "-" + inv.Gateway.ClassName
	async(func() { s.GatewayService = get(ServiceGVK, inv.Gateway.Namespace, s.gatewayServiceName) })
	if inv.Gateway.CertIssuer != "" {
		async(func() { s.Certificate = get(CertificateGVK, inv.Gateway.Namespace, inv.Gateway.CertificateName) })
		async(func() { s.CertIssuer = get(ClusterIssuerGVK, "", inv.Gateway.CertIssuer) })
	}
	if inv.Gateway.CreateRoute {
		async(func() { s.Route = get(RouteGVK, inv.Gateway.Namespace, inv.Gateway.RouteName) })
	}
	async(func() { s.MaaSAPI = get(DeploymentGVK, rel.MaaSAPINamespace(inv), "maas-api") })
	async(func() {
		s.DBConfig = secretInfo(get(SecretGVK, rel.DBConfigNamespace(inv), inv.DBConfig.Name), rel.DBConfigNamespace(inv), inv.DBConfig.Name)
	})
	async(func() { s.MonitoringConfig = get(ConfigMapGVK, "openshift-monitoring", "cluster-monitoring-config") })
}

// models starts the reads of the external models, their providers, API
// key Secrets, model servers and MaaSModelRefs. Each distinct Secret and
// model server is read once, however many providers share it; a kind with
// many objects in one namespace is read by one LIST there (getMany): the
// reads do not grow with the square of the models, nor one request per
// object (issue 16). It returns each provider's Secret key and the
// SecretInfo being read for each Secret key.
func (sn *snapshotter) models(inv *inventory.Inventory, rel release.Release) (providerSecret map[string]string, secrets map[string]*SecretInfo) {
	s := sn.s
	providers := map[string]bool{}
	secrets = map[string]*SecretInfo{}
	backends := map[string]*Backend{}
	byNS := func() map[string][]string { return map[string][]string{} }
	providerNames, modelNames := byNS(), byNS()
	providerSecret = map[string]string{} // provider key -> Secret key
	for _, m := range inv.ExternalModels {
		modelNames[m.Namespace] = append(modelNames[m.Namespace], m.Name)
		pk := Key(m.Namespace, m.ProviderName)
		if providers[pk] {
			continue
		}
		providers[pk] = true
		if !rel.KServeMaaS() {
			// 3.3/3.4 have no ExternalProvider: the model names its
			// Secret and endpoint itself.
			providerNames[m.Namespace] = append(providerNames[m.Namespace], m.ProviderName)
		}
		sk := Key(m.Namespace, m.APIKeySecret)
		providerSecret[pk] = sk
		if secrets[sk] == nil {
			si := &SecretInfo{}
			secrets[sk] = si
			sn.async(func() { *si = secretInfo(sn.get(SecretGVK, m.Namespace, m.APIKeySecret), m.Namespace, m.APIKeySecret) })
		}
		if b, ok := backends[m.Endpoint]; ok {
			if b != nil {
				s.Backends[pk] = b
			}
		} else if b := backendFor(m.Endpoint); b != nil {
			backends[m.Endpoint] = b
			s.Backends[pk] = b
			sn.async(func() { sn.backend(b) })
		} else {
			backends[m.Endpoint] = nil
		}
	}
	for ns, names := range providerNames {
		sn.getMany(ExternalProviderGVK, ns, names, s.Providers)
	}
	for ns, names := range modelNames {
		sn.getMany(rel.ExternalModelGVK(), ns, names, s.Models)
		sn.getMany(MaaSModelRefGVK, ns, names, s.ModelRefs)
	}
	return providerSecret, secrets
}

// getMany reads the objects of gvk named names in ns into into: by one
// LIST from manyAtLeast objects on, else one GET each.
func (sn *snapshotter) getMany(gvk schema.GroupVersionKind, ns string, names []string, into map[string]*unstructured.Unstructured) {
	if len(names) < manyAtLeast {
		for _, name := range names {
			sn.async(func() { sn.put(into, Key(ns, name), sn.get(gvk, ns, name)) })
		}
		return
	}
	sn.async(func() {
		l, err := sn.r.List(sn.ctx, gvk, ns, "")
		found := map[string]*unstructured.Unstructured{}
		for _, o := range l {
			found[o.GetName()] = o
		}
		sn.mu.Lock()
		defer sn.mu.Unlock()
		for _, name := range names {
			switch o := found[name]; {
			case err != nil:
				sn.s.recordMissing(gvk, ns, name, err)
			case o == nil:
				sn.s.recordMissing(gvk, ns, name, apierrors.NewNotFound(schema.GroupResource{Group: gvk.Group, Resource: gvk.Kind}, name))
			}
			into[Key(ns, name)] = found[name]
		}
	})
}

// access starts the reads of the access objects: MaaS auth policies and
// subscriptions, the gateway AuthPolicy, the installed CSVs and RHCL's
// Subscription.
func (sn *snapshotter) access(inv *inventory.Inventory, rel release.Release) {
	s, get, list, async := sn.s, sn.get, sn.list, sn.async
	async(func() { s.AuthPolicies = list(MaaSAuthPolicyGVK, inv.RHOAI.MaaSNamespace, "") })
	async(func() {
		s.GatewayAuthPolicy = get(AuthPolicyGVK, inv.Gateway.Namespace, rel.MaaSControllerFacts().GatewayAuthPolicy)
	})
	async(func() { s.Subscriptions = list(MaaSSubscriptionGVK, inv.RHOAI.MaaSNamespace, "") })
	if op := inv.Operator("rhcl"); op != nil {
		// Every namespace's installed CSVs, not OLM's copies of an
		// AllNamespaces operator's: Service Mesh may be installed in
		// another namespace than RHCL (the same LIST as preflight's).
		async(func() { s.CSVs = list(CSVGVK, "", "!olm.copiedFrom") })
		async(func() { s.RHCLSubscription = get(SubscriptionGVK, op.Namespace, op.Package) })
	}
}

// generated starts the second round: the Kuadrant policies the
// subscriptions name, and maas-api's pods.
func (sn *snapshotter) generated(rel release.Release) {
	s := sn.s
	generated := map[string]bool{}
	for _, p := range s.Subscriptions {
		for _, ref := range generatedPolicies(p, "tokenRateLimitStatuses") {
			k := describe("TokenRateLimitPolicy", ref[0], ref[1])
			if !generated[k] {
				generated[k] = true
				sn.async(func() { sn.put(s.KuadrantPolicies, k, sn.get(TokenRateLimitPolicyGVK, ref[0], ref[1])) })
			}
		}
	}
	if s.MaaSAPI != nil {
		if sel, _, _ := unstructured.NestedStringMap(s.MaaSAPI.Object, "spec", "selector", "matchLabels"); len(sel) > 0 {
			sn.async(func() {
				s.MaaSAPIPods = sn.list(PodGVK, rel.MaaSAPINamespace(s.Inv), labels.SelectorFromSet(sel).String())
			})
		}
	}
}

func (s *State) recordMissing(gvk schema.GroupVersionKind, ns, name string, err error) {
	k := describe(gvk.Kind, ns, name)
	switch {
	case apierrors.IsNotFound(err):
		s.Missing[k] = "not found"
	case kube.IsNotServed(err):
		s.NotServed[gvk.Kind] = true
		s.Missing[k] = "kind " + gvk.Kind + " (" + gvk.Group + ") is not served by the API server"
	default:
		s.Missing[k] = err.Error()
	}
}

// ReadFailed reports whether the read of kind ns/name (name "*" for a
// LIST) failed for another reason than the object being absent: the
// snapshot then cannot tell whether it exists.
func (s *State) ReadFailed(kind, ns, name string) bool {
	r, ok := s.Missing[describe(kind, ns, name)]
	return ok && r != "not found"
}

// MissingReason says why the object is absent from the snapshot.
func (s *State) MissingReason(kind, ns, name string) string {
	if r := s.Missing[describe(kind, ns, name)]; r != "" {
		return r
	}
	return "not found"
}

// templateMatches returns the Deployments of l whose pod template labels
// match the label selector sel (none when sel does not parse).
func templateMatches(l []*unstructured.Unstructured, sel string) []*unstructured.Unstructured {
	ls, err := labels.Parse(sel)
	if err != nil {
		return nil
	}
	var out []*unstructured.Unstructured
	for _, d := range l {
		tl, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if len(tl) > 0 && ls.Matches(labels.Set(tl)) {
			out = append(out, d)
		}
	}
	return out
}

// generatedPolicies returns [namespace, name] of the Kuadrant policies a
// MaaS policy's status lists (MaaSAuthPolicy status.authPolicies,
// MaaSSubscription status.tokenRateLimitStatuses; CRDs in
// ../shared/crds/maas).
func generatedPolicies(owner *unstructured.Unstructured, field string) [][2]string {
	l, _, _ := unstructured.NestedSlice(owner.Object, "status", field)
	var out [][2]string
	for _, x := range l {
		m, _ := x.(map[string]any)
		name, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		if name != "" {
			out = append(out, [2]string{ns, name})
		}
	}
	return out
}

func secretInfo(u *unstructured.Unstructured, ns, name string) SecretInfo {
	si := SecretInfo{Namespace: ns, Name: name}
	if u == nil {
		return si
	}
	si.Exists = true
	si.Labels = u.GetLabels()
	data, _, _ := unstructured.NestedMap(u.Object, "data")
	for k, v := range data {
		if s, _ := v.(string); s != "" {
			si.Keys = append(si.Keys, k)
		}
	}
	sd, _, _ := unstructured.NestedMap(u.Object, "stringData")
	for k, v := range sd {
		if s, _ := v.(string); s != "" && !si.HasKey(k) {
			si.Keys = append(si.Keys, k)
		}
	}
	sort.Strings(si.Keys)
	return si
}

// backendFor parses an in-cluster Service host (<svc>.<ns>.svc or
// <svc>.<ns>.svc.cluster.local); other hosts are external and give nil.
func backendFor(host string) *Backend {
	parts := strings.Split(host, ".")
	if len(parts) < 3 || parts[2] != "svc" {
		return nil
	}
	return &Backend{Host: host, Name: parts[0], Namespace: parts[1]}
}

func countEndpoints(es *unstructured.Unstructured, b *Backend) {
	eps, _, _ := unstructured.NestedSlice(es.Object, "endpoints")
	for _, e := range eps {
		m, _ := e.(map[string]any)
		b.Endpoints++
		conds, _ := m["conditions"].(map[string]any)
		if ready, ok := conds["ready"].(bool); !ok || ready {
			b.ReadyEndpoints++
		}
	}
}

// GatewayServiceName is the Service Istio creates for the Gateway.
func (s *State) GatewayServiceName() string { return s.gatewayServiceName }

// workloadsBehind are the Deployments whose pod template labels hold
// every label of svc's selector.
func workloadsBehind(svc *unstructured.Unstructured, deps []*unstructured.Unstructured) []Workload {
	sel, _, _ := unstructured.NestedStringMap(svc.Object, "spec", "selector")
	if len(sel) == 0 {
		return nil
	}
	var out []Workload
	for _, d := range deps {
		lbl, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		match := true
		for k, v := range sel {
			if lbl[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		w := Workload{Name: d.GetName(), Replicas: 1}
		if r, ok, _ := unstructured.NestedInt64(d.Object, "spec", "replicas"); ok {
			w.Replicas = r
		}
		w.Ready, _, _ = unstructured.NestedInt64(d.Object, "status", "readyReplicas")
		out = append(out, w)
	}
	return out
}
