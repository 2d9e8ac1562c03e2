package verify

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
)

// LegacyExternalModelGVK is the external-model kind of RHOAI 3.3 and 3.4:
// one maas.opendatahub.io ExternalModel per model with no ExternalProvider
// (shared/crds/opendatahub/rhoai-3.4, case B16).
var LegacyExternalModelGVK = schema.GroupVersionKind{Group: "maas.opendatahub.io", Version: "v1alpha1", Kind: "ExternalModel"}

// Release is where the installed RHOAI release keeps what verify reads. The
// caller detects it (steps.DetectRelease reads the DataScienceCluster CRD
// schema, the rhods-operator CSV and the live DSC); the zero value is the
// RHOAI 3.5 layout with the inventory's names.
//
// 3.5 switches MaaS on with spec.components.aigateway.modelsAsAService,
// reports condition ModelsAsAServiceReady, runs maas-api in
// rhoai.maasAPINamespace and publishes models as inference.opendatahub.io
// ExternalProvider + ExternalModel. 3.3/3.4 use
// spec.components.kserve.modelsAsService, ModelsAsServiceReady, run maas-api
// in the applications namespace and publish maas.opendatahub.io
// ExternalModels (reference/DEPLOYMENT.md "Upgrades").
type Release struct {
	// Version is the minor release, "3.3", "3.4" or "3.5"; "" is 3.5.
	Version string
	// DSCName is the live DataScienceCluster: the operator allows one and
	// maasctl adopts it under any name; "" is rhoai.dscName.
	DSCName string
	// MaaSAPINamespace holds the maas-api Deployment; "" is
	// rhoai.maasAPINamespace.
	MaaSAPINamespace string
	// DBConfigNamespace is where maas-api reads maas-db-config; "" is
	// dbConfig.namespace.
	DBConfigNamespace string
	// LegacyExternalModel selects the 3.3/3.4 maas.opendatahub.io
	// ExternalModel and no ExternalProvider.
	LegacyExternalModel bool
}

// resolve fills the empty fields from the inventory.
func (r Release) resolve(inv *inventory.Inventory) Release {
	if r.Version == "" {
		r.Version = "3.5"
	}
	if r.DSCName == "" {
		r.DSCName = inv.RHOAI.DSCName
	}
	if r.MaaSAPINamespace == "" {
		r.MaaSAPINamespace = inv.RHOAI.MaaSAPINamespace
	}
	if r.DBConfigNamespace == "" {
		r.DBConfigNamespace = inv.DBConfig.Namespace
	}
	return r
}

// MaaSCondition is the DSC condition that reports the MaaS component.
func (r Release) MaaSCondition() string {
	if r.LegacyExternalModel {
		return "ModelsAsServiceReady"
	}
	return "ModelsAsAServiceReady"
}

// MaaSField is the DSC field that switches MaaS on.
func (r Release) MaaSField() string {
	if r.LegacyExternalModel {
		return "spec.components.kserve.modelsAsService"
	}
	return "spec.components.aigateway.modelsAsAService"
}

// ExternalModelGVK is the release's external-model kind.
func (r Release) ExternalModelGVK() schema.GroupVersionKind {
	if r.LegacyExternalModel {
		return LegacyExternalModelGVK
	}
	return ExternalModelGVK
}

// MaaSController is what the release's MaaS controller (opendatahub-io/
// models-as-a-service maas-controller v0.2.1, RHOAI 3.5; measured against it
// on the shipped CRDs, issue 18) writes that maasctl's verify, doctor,
// waits and uninstall read. One value per release: MaaSControllerFacts.
type MaaSController struct {
	// Version is the maas-controller tag these facts were measured on.
	Version string
	// GatewayAuthPolicy is the one Kuadrant AuthPolicy, in the MaaS
	// Gateway's namespace and targeting that Gateway, that every
	// MaaSAuthPolicy converges on (maasauthpolicy_controller.go
	// maasGatewayAuthPolicyName). There is no per-model AuthPolicy.
	GatewayAuthPolicy string
	// GatewayNamespace is the namespace of the MaaS Gateway the controller
	// is configured for (its --gateway-namespace default), where
	// GatewayAuthPolicy lives.
	GatewayNamespace string
	// GatewayAuthLabels are the labels it carries.
	GatewayAuthLabels map[string]string
	// TokenRateLimitPolicyPrefix + model name is the TokenRateLimitPolicy
	// generated per model, in the HTTPRoute's namespace, owned by the
	// model's HTTPRoute (maassubscription_controller.go).
	TokenRateLimitPolicyPrefix string
	// Finalizers are the finalizers the controller puts on each MaaS kind
	// and removes only while it runs: an object deleted after the
	// controller (the DataScienceCluster) is gone stays.
	Finalizers map[string]string
	// ConflictCondition is the MaaSAuthPolicy condition that reports
	// non-MaaS AuthPolicies on MaaS routes (False, reason NoConflict,
	// when there are none).
	ConflictCondition string
}

// maasController021 is maas-controller v0.2.1.
var maasController021 = MaaSController{
	Version:           "v0.2.1",
	GatewayAuthPolicy: "maas-gateway-auth",
	GatewayNamespace:  "openshift-ingress",
	GatewayAuthLabels: map[string]string{
		"app.kubernetes.io/component":  "gateway-auth",
		"app.kubernetes.io/managed-by": "maas-controller",
		"app.kubernetes.io/part-of":    "maas-gateway-auth",
	},
	TokenRateLimitPolicyPrefix: "maas-trlp-",
	Finalizers: map[string]string{
		"MaaSModelRef":     "maas.opendatahub.io/model-cleanup",
		"MaaSAuthPolicy":   "maas.opendatahub.io/authpolicy-cleanup",
		"MaaSSubscription": "maas.opendatahub.io/subscription-cleanup",
	},
	ConflictCondition: "ConflictingAuthPolicy",
}

// MaaSControllerFacts returns the MaaS controller facts of the release.
// Only v0.2.1 (RHOAI 3.5) was measured; 3.3 and 3.4 get the same facts.
func (r Release) MaaSControllerFacts() MaaSController { return maasController021 }

// IsMaaSFinalizer reports whether f is one of the MaaS controller's
// finalizers (any release).
func IsMaaSFinalizer(f string) bool {
	for _, x := range maasController021.Finalizers {
		if x == f {
			return true
		}
	}
	return false
}
