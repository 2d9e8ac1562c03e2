package migrate

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/kube"
)

// PolicyClass sorts the gateway-level Kuadrant policies that target the
// MaaS Gateway (upgrade guide 3.4, "Identify Policy Conflicts").
type PolicyClass string

// Policy classes.
const (
	// PolicyOld is a 3.2 tier policy: it reads auth.identity.tier or calls
	// the tier lookup endpoint. The migration replaces and deletes it.
	PolicyOld PolicyClass = "old (tier-based)"
	// PolicyNew is a 3.4 gateway default made by maas-controller
	// (gateway-default-auth, gateway-default-deny).
	PolicyNew PolicyClass = "new (maas-controller)"
	// PolicyOther is any other policy on the Gateway; left alone.
	PolicyOther PolicyClass = "other"
)

// GatewayPolicy is one AuthPolicy or TokenRateLimitPolicy whose targetRef
// names the MaaS Gateway.
type GatewayPolicy struct {
	Object *unstructured.Unstructured
	Class  PolicyClass
}

// State is what the migration reads from the cluster before it changes
// anything. Every slice is sorted by namespace and name.
type State struct {
	// Gateway is the MaaS Gateway the old and new policies target.
	Gateway types.NamespacedName
	// TierConfigMaps are the tier-to-group-mapping ConfigMaps (any namespace).
	TierConfigMaps []*unstructured.Unstructured
	// Policies are the AuthPolicies and TokenRateLimitPolicies (any
	// namespace) whose targetRef is a Gateway named Gateway.Name.
	Policies []GatewayPolicy
	// GatewayNamespaceTRLPs are every TokenRateLimitPolicy in the Gateway's
	// namespace (the guide backs them all up).
	GatewayNamespaceTRLPs []*unstructured.Unstructured
	// Models are the LLMInferenceServices carrying the tier annotation.
	Models []*unstructured.Unstructured
	// OtherModels are the other LLMInferenceServices in the namespaces of
	// Models (backed up with them, as the guide does, never changed).
	OtherModels []*unstructured.Unstructured
	// ModelRoutes are the HTTPRoutes KServe made for LLMInferenceServices
	// (its router labels) in the namespaces of Models; CheckModels reads
	// them. RoutesServed is false when HTTPRoute is not served. Never
	// changed or backed up.
	ModelRoutes  []*unstructured.Unstructured
	RoutesServed bool
	// ModelsAsService is the 3.3 ModelsAsService CR, when served and present.
	ModelsAsService *unstructured.Unstructured
	// MaaSServed reports whether MaaSModelRef, MaaSAuthPolicy and
	// MaaSSubscription are all served (the 3.4 operator with MaaS enabled).
	MaaSServed bool
	// MaaSNamespace is where MaaSAuthPolicy and MaaSSubscription go;
	// MaaSNamespaceExists whether it exists.
	MaaSNamespace       string
	MaaSNamespaceExists bool
	// Existing are the MaaSModelRef, MaaSAuthPolicy and MaaSSubscription
	// objects already in the cluster, keyed by "Kind namespace/name".
	Existing map[string]*unstructured.Unstructured
}

// DiscoverOptions says where the MaaS Gateway and the MaaS namespace are.
// Zero values mean the defaults of the 3.4 layout.
type DiscoverOptions struct {
	Gateway       types.NamespacedName
	MaaSNamespace string
}

func (o DiscoverOptions) withDefaults() DiscoverOptions {
	if o.Gateway.Name == "" {
		o.Gateway.Name = DefaultGatewayName
	}
	if o.Gateway.Namespace == "" {
		o.Gateway.Namespace = DefaultGatewayNamespace
	}
	if o.MaaSNamespace == "" {
		o.MaaSNamespace = DefaultMaaSNamespace
	}
	return o
}

// Discover reads the tier objects, the gateway policies, the models and
// the MaaS objects that already exist. Kinds the server does not serve are
// treated as having no objects. It only reads.
func Discover(ctx context.Context, c *kube.Clients, o DiscoverOptions) (*State, error) {
	o = o.withDefaults()
	st := &State{Gateway: o.Gateway, MaaSNamespace: o.MaaSNamespace, Existing: map[string]*unstructured.Unstructured{}}
	var err error
	byName := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", TierConfigMapName).String()}
	if st.TierConfigMaps, _, err = list(ctx, c, gkConfigMap, "", byName); err != nil {
		return nil, err
	}
	for _, gk := range []schema.GroupKind{gkAuthPolicy, gkTokenRateLimit} {
		objs, _, err := list(ctx, c, gk, "", metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for _, p := range objs {
			if !targetsGateway(p, o.Gateway.Name) {
				continue
			}
			st.Policies = append(st.Policies, GatewayPolicy{Object: p, Class: classify(p)})
		}
	}
	if st.GatewayNamespaceTRLPs, _, err = list(ctx, c, gkTokenRateLimit, o.Gateway.Namespace, metav1.ListOptions{}); err != nil {
		return nil, err
	}
	models, _, err := list(ctx, c, gkLLMISvc, "", metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	modelNS := map[string]bool{}
	for _, m := range models {
		if _, ok := m.GetAnnotations()[TierAnnotation]; ok {
			st.Models = append(st.Models, m)
			modelNS[m.GetNamespace()] = true
		}
	}
	for _, m := range models {
		if _, ok := m.GetAnnotations()[TierAnnotation]; !ok && modelNS[m.GetNamespace()] {
			st.OtherModels = append(st.OtherModels, m)
		}
	}
	if st.ModelRoutes, st.RoutesServed, err = modelRoutes(ctx, c, sortedNamespaces(modelNS)); err != nil {
		return nil, err
	}
	if mas, ok, err := mapping(c, gkModelsAsService); err != nil {
		return nil, err
	} else if ok {
		u, err := resourceFor(c, mas, "").Get(ctx, ModelsAsServiceName, metav1.GetOptions{})
		switch {
		case err == nil:
			st.ModelsAsService = u
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("get ModelsAsService %s: %w", ModelsAsServiceName, err)
		}
	}
	st.MaaSServed = true
	for _, gk := range maasKinds {
		objs, served, err := list(ctx, c, gk, "", metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		if !served {
			st.MaaSServed = false
			continue
		}
		for _, u := range objs {
			st.Existing[key(u)] = u
		}
	}
	ns, found, err := get(ctx, c, ObjectRef{APIVersion: "v1", Kind: "Namespace", Name: o.MaaSNamespace})
	if err != nil {
		return nil, err
	}
	st.MaaSNamespaceExists = found && ns.GetDeletionTimestamp() == nil
	return st, nil
}

// ModelsAsServiceName is the one allowed name of the cluster-scoped 3.3
// ModelsAsService CR (its CRD's CEL rule).
const ModelsAsServiceName = "default-modelsasservice"

// maasKinds are the 3.4 kinds the migration creates.
var maasKinds = []schema.GroupKind{gkMaaSModelRef, gkMaaSAuthPolicy, gkMaaSSubscription}

// key names an object as "Kind namespace/name".
func key(u *unstructured.Unstructured) string { return refOf(u).String() }

// targetsGateway reports whether policy p's targetRef is a Gateway named
// name (Kuadrant policies target objects in their own namespace; the guide
// lists policies from any namespace that name the MaaS Gateway).
func targetsGateway(p *unstructured.Unstructured, name string) bool {
	group, _, _ := unstructured.NestedString(p.Object, "spec", "targetRef", "group")
	kind, _, _ := unstructured.NestedString(p.Object, "spec", "targetRef", "kind")
	n, _, _ := unstructured.NestedString(p.Object, "spec", "targetRef", "name")
	return kind == "Gateway" && (group == "" || group == gatewayAPIGroup) && n == name
}

// classify sorts a gateway policy: tier-based when its spec reads the tier
// attribute or calls the tier lookup endpoint; maas-controller's when it
// carries that controller's managed-by label or a gateway default's name.
func classify(p *unstructured.Unstructured) PolicyClass {
	spec, _ := json.Marshal(p.Object["spec"])
	if strings.Contains(string(spec), tierAttribute) || strings.Contains(string(spec), TierLookupPath) {
		return PolicyOld
	}
	if p.GetLabels()[ManagedByLabel] == maasControllerName || p.GetName() == defaultAuthNewName || p.GetName() == defaultDenyNewName {
		return PolicyNew
	}
	return PolicyOther
}

// OldPolicies returns the tier-based policies of st.
func (st *State) OldPolicies() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, p := range st.Policies {
		if p.Class == PolicyOld {
			out = append(out, p.Object)
		}
	}
	return out
}

// HasTierObjects reports whether any 3.2 tier object is left.
func (st *State) HasTierObjects() bool {
	return len(st.TierConfigMaps) > 0 || len(st.OldPolicies()) > 0 || len(st.Models) > 0
}

// TierObjects names every 3.2 tier object of st, sorted.
func (st *State) TierObjects() []string {
	var out []string
	for _, u := range st.TierConfigMaps {
		out = append(out, key(u))
	}
	for _, u := range st.OldPolicies() {
		out = append(out, key(u))
	}
	for _, u := range st.Models {
		out = append(out, key(u)+" (annotation "+TierAnnotation+")")
	}
	sort.Strings(out)
	return out
}

// DetectTiers reports whether the cluster still has 3.2 tier resources (a
// tier-to-group-mapping ConfigMap, a tier-based AuthPolicy or
// TokenRateLimitPolicy on maas-default-gateway, or an LLMInferenceService
// with the tier annotation) and names them as "Kind namespace/name". The
// install's preflight uses it to stop and point to `maasctl migrate tiers`.
// Kinds the server does not serve count as empty. It only reads.
func DetectTiers(ctx context.Context, c *kube.Clients) (found bool, objects []string, err error) {
	st, err := Discover(ctx, c, DiscoverOptions{})
	if err != nil {
		return false, nil, fmt.Errorf("detect tier resources: %w", err)
	}
	objs := st.TierObjects()
	return len(objs) > 0, objs, nil
}

func sortedNamespaces(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for ns := range set {
		out = append(out, ns)
	}
	sort.Strings(out)
	return out
}

func sortObjects(objs []*unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool {
		if objs[i].GetNamespace() != objs[j].GetNamespace() {
			return objs[i].GetNamespace() < objs[j].GetNamespace()
		}
		return objs[i].GetName() < objs[j].GetName()
	})
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// modelRoutes lists KServe's HTTPRoutes of the governed models (by their
// router labels) in each of the models' namespaces, and whether the
// HTTPRoute kind is served.
func modelRoutes(ctx context.Context, c *kube.Clients, namespaces []string) ([]*unstructured.Unstructured, bool, error) {
	var out []*unstructured.Unstructured
	all := true
	for _, ns := range namespaces {
		routes, served, err := list(ctx, c, gkHTTPRoute, ns, metav1.ListOptions{
			LabelSelector: routeComponentLabel + "=" + routeComponent + "," + routePartOfLabel + "=" + routePartOf,
		})
		if err != nil {
			return nil, false, err
		}
		all = all && served
		out = append(out, routes...)
	}
	return out, all, nil
}
