// Package migrate moves a MaaS installation from the RHOAI 3.2 tier system
// (tier-to-group-mapping ConfigMap, gateway-level AuthPolicy and
// TokenRateLimitPolicy with tier predicates, tier annotations on
// LLMInferenceService objects) to the RHOAI 3.4+ subscription model
// (MaaSModelRef, MaaSAuthPolicy, MaaSSubscription), and carries the custom
// settings of the old cluster-scoped ModelsAsService CR to their new owners
// (AITenant and the tenant configuration).
//
// It follows the phases of the upgrade guide
// (reference/UPGRADE-3.2-TO-3.4.md): backup, audit, plan, apply, validate,
// and rollback from a backup directory. Planning is a pure function of the
// objects read from the cluster; nothing old is deleted before every new
// object is Ready/Active and the Kuadrant policies generated for it are
// Enforced, and every change is recorded in the backup directory's journal.
package migrate

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"

	"github.com/maasctl/maasctl/internal/kube"
	maasnames "github.com/maasctl/maasctl/internal/names"
)

// Names the 3.2 tier system uses (upgrade guide, Phase 1).
const (
	// TierConfigMapName is the tier-to-group-mapping ConfigMap (data key
	// "tiers"). The guide keeps it in maas-api; some installations also
	// have a copy in the applications namespace, so every namespace is
	// searched.
	TierConfigMapName = "tier-to-group-mapping"
	// TierConfigMapKey is the ConfigMap data key holding the tier list.
	TierConfigMapKey = "tiers"
	// TierAnnotation lists, as a JSON array, the tiers that may use an
	// LLMInferenceService; an empty array means every tier
	// (odh-model-controller TierConfigLoader.DefinedGroups).
	TierAnnotation = "alpha.maas.opendatahub.io/tiers"
	// TierLookupPath is the 3.2 maas-api endpoint that maps groups to a
	// tier; it is gone (404) in 3.4.
	TierLookupPath = "/v1/tiers/lookup"
	// tierAttribute is the identity attribute the 3.2 gateway AuthPolicy
	// fills from the tier lookup and the tier predicates read.
	tierAttribute = "auth.identity.tier"
)

// Defaults of the 3.4 layout (upgrade guide, Phases 3 and 5).
const (
	// DefaultGatewayNamespace and DefaultGatewayName name the MaaS Gateway.
	DefaultGatewayNamespace = "openshift-ingress"
	DefaultGatewayName      = "maas-default-gateway"
	// DefaultMaaSNamespace holds MaaSAuthPolicy and MaaSSubscription objects.
	DefaultMaaSNamespace = "models-as-a-service"
)

// Labels and annotations maasctl puts on the objects a migration creates.
// Rollback deletes only journaled objects that carry MigrationLabel.
const (
	ManagedByLabel       = maasnames.ManagedByLabel
	MigrationLabel       = "maasctl.io/migration"
	MigrationLabelValue  = "tiers"
	BackupAnnotation     = "maasctl.io/migration-backup"
	maasModelLabel       = "maas.opendatahub.io/model"
	maasControllerName   = "maas-controller"
	maasAPIVersion       = "maas.opendatahub.io/v1alpha1"
	defaultAuthNewName   = "gateway-default-auth"
	defaultDenyNewName   = "gateway-default-deny"
	llmisvcModelRefKind  = "LLMInferenceService"
	gatewayAPIGroup      = "gateway.networking.k8s.io"
	maasSubscriptionKind = "MaaSSubscription"
	maasAuthPolicyKind   = "MaaSAuthPolicy"
	maasModelRefKind     = "MaaSModelRef"
)

// Group kinds read or written. Versions are resolved through discovery
// (the preferred version), because 3.2 and 3.5 clusters serve different
// versions of some of them.
var (
	gkConfigMap        = schema.GroupKind{Kind: "ConfigMap"}
	gkNamespace        = schema.GroupKind{Kind: "Namespace"}
	gkAuthPolicy       = schema.GroupKind{Group: "kuadrant.io", Kind: "AuthPolicy"}
	gkTokenRateLimit   = schema.GroupKind{Group: "kuadrant.io", Kind: "TokenRateLimitPolicy"}
	gkLLMISvc          = schema.GroupKind{Group: "serving.kserve.io", Kind: "LLMInferenceService"}
	gkMaaSModelRef     = schema.GroupKind{Group: "maas.opendatahub.io", Kind: maasModelRefKind}
	gkMaaSAuthPolicy   = schema.GroupKind{Group: "maas.opendatahub.io", Kind: maasAuthPolicyKind}
	gkMaaSSubscription = schema.GroupKind{Group: "maas.opendatahub.io", Kind: maasSubscriptionKind}
	gkModelsAsService  = schema.GroupKind{Group: "components.platform.opendatahub.io", Kind: "ModelsAsService"}
	gkAITenant         = schema.GroupKind{Group: "maas.opendatahub.io", Kind: "AITenant"}
	gkMaasTenantConfig = schema.GroupKind{Group: "maas.opendatahub.io", Kind: "MaasTenantConfig"}
	gkTenant           = schema.GroupKind{Group: "maas.opendatahub.io", Kind: "Tenant"}
)

// mapping returns the REST mapping of gk's preferred version, or ok=false
// when the API server does not serve the kind. The discovery cache is reset
// once on a miss, so a CRD registered after start is found.
func mapping(c *kube.Clients, gk schema.GroupKind) (*meta.RESTMapping, bool, error) {
	m, err := c.Mapper.RESTMapping(gk)
	if err == nil {
		return m, true, nil
	}
	if !meta.IsNoMatchError(err) && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, false, fmt.Errorf("resolve %s: %w", gk, err)
	}
	c.ResetMapper()
	m, err = c.Mapper.RESTMapping(gk)
	if err != nil {
		if meta.IsNoMatchError(err) || discovery.IsGroupDiscoveryFailedError(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("resolve %s: %w", gk, err)
	}
	return m, true, nil
}

// resourceFor returns the dynamic client of m in namespace ns ("" for all
// namespaces or a cluster-scoped kind).
func resourceFor(c *kube.Clients, m *meta.RESTMapping, ns string) dynamic.ResourceInterface {
	if m.Scope.Name() == meta.RESTScopeNameNamespace && ns != "" {
		return c.Dynamic.Resource(m.Resource).Namespace(ns)
	}
	return c.Dynamic.Resource(m.Resource)
}

// list returns every object of gk (in ns, "" for all namespaces) matching
// opts, sorted by namespace and name; served=false when the kind is not
// served.
func list(ctx context.Context, c *kube.Clients, gk schema.GroupKind, ns string, opts metav1.ListOptions) (objs []*unstructured.Unstructured, served bool, err error) {
	m, ok, err := mapping(c, gk)
	if err != nil || !ok {
		return nil, ok, err
	}
	l, err := resourceFor(c, m, ns).List(ctx, opts)
	if err != nil {
		return nil, true, fmt.Errorf("list %s: %w", gk.Kind, err)
	}
	for i := range l.Items {
		u := l.Items[i]
		// A list's items carry apiVersion/kind only in the list envelope on
		// some servers; set them so backups and restores are complete.
		u.SetGroupVersionKind(m.GroupVersionKind)
		objs = append(objs, &u)
	}
	sortObjects(objs)
	return objs, true, nil
}

// ObjectRef names one object by kind, namespace and name, with the
// resourceVersion it had when it was read.
type ObjectRef struct {
	APIVersion      string `json:"apiVersion"`
	Kind            string `json:"kind"`
	Namespace       string `json:"namespace,omitempty"`
	Name            string `json:"name"`
	ResourceVersion string `json:"resourceVersion,omitempty"`
}

// refOf returns the ObjectRef of obj.
func refOf(obj *unstructured.Unstructured) ObjectRef {
	return ObjectRef{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(),
		Namespace: obj.GetNamespace(), Name: obj.GetName(),
		ResourceVersion: obj.GetResourceVersion(),
	}
}

// GroupKind returns the group and kind of r.
func (r ObjectRef) GroupKind() schema.GroupKind {
	gv, _ := schema.ParseGroupVersion(r.APIVersion)
	return schema.GroupKind{Group: gv.Group, Kind: r.Kind}
}

// String names r as Kind namespace/name (or Kind name).
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// get reads the live object r names; found=false when it does not exist or
// its kind is not served.
func get(ctx context.Context, c *kube.Clients, r ObjectRef) (*unstructured.Unstructured, bool, error) {
	m, ok, err := mapping(c, r.GroupKind())
	if err != nil || !ok {
		return nil, false, err
	}
	u, err := resourceFor(c, m, r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("get %s: %w", r, err)
	}
	return u, true, nil
}
