package release

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
