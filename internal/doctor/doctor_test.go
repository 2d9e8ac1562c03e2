package doctor_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/e2e/dataplane"
	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

const (
	mns        = "llm-coding-assistant"
	ins        = "models-as-a-service"
	adminToken = "admin-token"
)

var admin = verify.Identity{User: "admin", Groups: []string{"system:masters", "system:authenticated"}}

func healthy(t *testing.T) *verify.StaticReader {
	t.Helper()
	b, err := os.ReadFile("../verify/testdata/healthy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := verify.ParseObjects(b)
	if err != nil {
		t.Fatal(err)
	}
	return verify.NewStaticReader(admin, objs...)
}

func edit(t *testing.T, r *verify.StaticReader, gvk schema.GroupVersionKind, ns, name string, f func(o map[string]any)) {
	t.Helper()
	o, err := r.Get(context.Background(), gvk, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	f(o.Object)
	r.Put(o)
}

func set(v any, path ...string) func(o map[string]any) {
	return func(o map[string]any) { _ = unstructured.SetNestedField(o, v, path...) }
}

func conds(c ...map[string]any) func(o map[string]any) {
	l := make([]any, len(c))
	for i, x := range c {
		l[i] = x
	}
	return func(o map[string]any) { _ = unstructured.SetNestedSlice(o, l, "status", "conditions") }
}

func TestRules(t *testing.T) {
	tests := []struct {
		name     string
		breakf   func(t *testing.T, r *verify.StaticReader)
		code     string // "" = no finding at all
		object   string
		evidence string
		fix      string
		// cause, when set, must be in the finding's cause; notFix must
		// not be in its fix.
		cause, notFix string
		// inv edits the default inventory doctor judges against.
		inv func(*inventory.Inventory)
	}{
		{name: "healthy"},
		{name: "MaaS not enabled: 3.4 spelling on 3.5", code: doctor.CodeMaaSNotEnabled, object: "DataScienceCluster default-dsc",
			evidence: "spec.components.kserve.modelsAsService", fix: `"modelsAsAService":{"managementState":"Managed"}`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DSCGVK, "", "default-dsc", func(o map[string]any) {
					set(map[string]any{"managementState": "Managed"}, "spec", "components", "aigateway")(o)
					set(map[string]any{"managementState": "Managed"}, "spec", "components", "kserve", "modelsAsService")(o)
					conds(map[string]any{"type": "ModelsAsAServiceReady", "status": "False", "reason": "Removed", "message": "ModelsAsService ManagementState is set to Removed"})(o)
				})
			}},
		{name: "subscription shares its priority with a foreign one", code: doctor.CodeSharedPriority, object: "MaaSSubscription " + ins + "/llama-coder-default",
			evidence: "SpecPriorityDuplicate=True (SharedPriority)",
			fix:      `oc patch maassubscription team-extra -n ` + ins + ` --type merge -p '{"spec":{"priority":-1}}'`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", func(o map[string]any) {
					// The Ready condition stays; only the duplicate flag is added.
					l, _, _ := unstructured.NestedSlice(o, "status", "conditions")
					l = append(l, map[string]any{"type": "SpecPriorityDuplicate", "status": "True", "reason": "SharedPriority", "message": "spec.priority 0 is shared with: " + ins + "/team-extra"})
					_ = unstructured.SetNestedSlice(o, l, "status", "conditions")
				})
			}},
		// The upstream MaaS TLS guide's outbound flow missing: Authorino
		// cannot verify maas-api's service-CA certificate.
		{name: "Authorino without the service CA trust", code: doctor.CodeAuthorinoTrust, object: "Deployment kuadrant-system/authorino",
			evidence: "container authorino sets no SSL_CERT_FILE", fix: "maasctl install   (mounts the service CA bundle",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DeploymentGVK, "kuadrant-system", "authorino", func(o map[string]any) {
					cs, _, _ := unstructured.NestedSlice(o, "spec", "template", "spec", "containers")
					delete(cs[0].(map[string]any), "env")
					_ = unstructured.SetNestedSlice(o, cs, "spec", "template", "spec", "containers")
				})
			}},
		{name: "Kuadrant MissingDependency", code: doctor.CodeKuadrantMissingDep, object: "Kuadrant kuadrant-system/kuadrant", evidence: "MissingDependency",
			fix: "oc delete pod -n openshift-operators -l app=kuadrant,control-plane=controller-manager",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency", "message": "reworded"}))
			}},
		{name: "Kuadrant not ready otherwise", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant", evidence: "AuthorinoNotReady", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "AuthorinoNotReady"}))
			}},
		// kuadrant-operator v1.5.2 does not retry the reconcile that
		// creates the Limitador (TestKuadrantStalledComponentReconciled).
		{name: "Kuadrant without its Limitador in the operator's topology", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant", evidence: "LimitadorNotReady",
			fix: "oc annotate kuadrant kuadrant -n kuadrant-system --overwrite extensions.kuadrant.io/trigger-time=",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "LimitadorNotReady", "message": "limitador resource not in topology"}))
			}},
		// kuadrant-operator v1.5.2 writes no status after a failed task
		// (TestKuadrantNoStatusComponentReconciled): no Ready condition.
		{name: "Kuadrant with no status and no Limitador", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant",
			evidence: "no Limitador CR named limitador in kuadrant-system",
			fix:      "oc annotate kuadrant kuadrant -n kuadrant-system --overwrite extensions.kuadrant.io/trigger-time=",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds())
			}},
		// The operator writes a status within seconds: a CR created just
		// now is not blamed on a failed reconcile.
		{name: "Kuadrant with no status, created just now", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant",
			evidence: "no Ready condition", fix: "maasctl install   (re-applies Kuadrant and Authorino",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", func(o map[string]any) {
					conds()(o)
					set(time.Now().UTC().Format(time.RFC3339), "metadata", "creationTimestamp")(o)
				})
			}},
		{name: "Kuadrant with no status, a Limitador and no Authorino", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant",
			evidence: "no Authorino CR named authorino in kuadrant-system",
			fix:      "sets the operator's reconcile trigger once Kuadrant has had no Ready condition for 45 s",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds())
				lim := &unstructured.Unstructured{}
				lim.SetGroupVersionKind(verify.LimitadorGVK)
				lim.SetNamespace("kuadrant-system")
				lim.SetName("limitador")
				r.Put(lim)
				r.Remove(verify.AuthorinoGVK, "kuadrant-system", "authorino")
			}},
		{name: "Kuadrant waits for Authorino's TLS Secret", code: doctor.CodeKuadrantNotReady, object: "Kuadrant kuadrant-system/kuadrant", evidence: "TlsSecretNotProvided",
			fix: "maasctl install   (its step platform/authorino-tls turns Authorino's listener TLS off while Secret authorino-server-cert is missing",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "AuthorinoNotReady"}))
				edit(t, r, verify.AuthorinoGVK, "kuadrant-system", "authorino", conds(map[string]any{"type": "Ready", "status": "False", "reason": "TlsSecretNotProvided", "message": "listener secret name authorino-server-cert not found"}))
				r.Remove(verify.ServiceGVK, "kuadrant-system", "authorino-authorino-authorization")
			}},
		// authorino-operator v0.21.0 does not watch Services: the CR and
		// Kuadrant stay Ready with the Service gone.
		{name: "Authorino Service deleted behind a Ready Authorino", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "Service not found; Authorino authorino Ready=True",
			fix: "maasctl install   (its step platform/authorino-tls turns Authorino's listener TLS off",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.ServiceGVK, "kuadrant-system", "authorino-authorino-authorization")
				r.Remove(verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1")
			}},
		{name: "Authorino Service deleted, TLS not in the inventory", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "Authorino authorino Ready=True",
			fix: `oc annotate authorino authorino -n kuadrant-system --overwrite maasctl.io/reconcile-requested-at=`,
			inv: func(i *inventory.Inventory) { i.Kuadrant.AuthorinoTLS = false },
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.ServiceGVK, "kuadrant-system", "authorino-authorino-authorization")
				r.Remove(verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1")
			}},
		{name: "Authorino down behind a Ready Kuadrant", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "Deployment openshift-operators/authorino-operator: spec.replicas 0, 0 ready",
			fix: "oc scale deployment authorino-operator -n openshift-operators --replicas=1   (",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DeploymentGVK, "openshift-operators", "authorino-operator", func(o map[string]any) {
					set(int64(0), "spec", "replicas")(o)
					set(int64(0), "status", "readyReplicas")(o)
				})
				edit(t, r, verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1", set([]any{}, "endpoints"))
			}},
		{name: "Authorino operator down and Authorino's Deployment scaled to 0", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "Deployment authorino: 0 of 0 replicas ready",
			fix: `oc scale deployment authorino-operator -n openshift-operators --replicas=1; oc patch authorino authorino -n kuadrant-system --type merge -p '{"spec":{"replicas":1}}'   (`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DeploymentGVK, "openshift-operators", "authorino-operator", func(o map[string]any) {
					set(int64(0), "spec", "replicas")(o)
					set(int64(0), "status", "readyReplicas")(o)
				})
				edit(t, r, verify.DeploymentGVK, "kuadrant-system", "authorino", func(o map[string]any) {
					set(int64(0), "spec", "replicas")(o)
					set(int64(0), "status", "readyReplicas")(o)
				})
				edit(t, r, verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1", set([]any{}, "endpoints"))
			}},
		{name: "Authorino's Deployment scaled to 0, its CR without spec.replicas", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "Deployment authorino: 0 of 0 replicas ready",
			fix: `oc patch authorino authorino -n kuadrant-system --type merge -p '{"spec":{"replicas":1}}'   (`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DeploymentGVK, "kuadrant-system", "authorino", func(o map[string]any) {
					set(int64(0), "spec", "replicas")(o)
					set(int64(0), "status", "readyReplicas")(o)
				})
				edit(t, r, verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1", set([]any{}, "endpoints"))
			}},
		{name: "Authorino scaled to 0 by its CR", code: doctor.CodeAuthService, object: "Service kuadrant-system/authorino-authorino-authorization", evidence: "0 ready",
			fix: `oc patch authorino authorino -n kuadrant-system --type merge -p '{"spec":{"replicas":1}}'`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.AuthorinoGVK, "kuadrant-system", "authorino", set(int64(0), "spec", "replicas"))
				edit(t, r, verify.EndpointSliceGVK, "kuadrant-system", "authorino-authorino-authorization-x1", set([]any{}, "endpoints"))
			}},
		{name: "Gateway certificate's ClusterIssuer not Ready", code: doctor.CodeGatewayNotProgrammed, object: "Gateway openshift-ingress/maas-default-gateway",
			evidence: "ClusterIssuer letsencrypt-production is not Ready (ErrRegisterACMEAccount: Failed to register ACME account)",
			fix:      "make ClusterIssuer letsencrypt-production Ready (oc describe clusterissuer letsencrypt-production), or set gateway.certIssuer to a Ready ClusterIssuer in the inventory; then maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", func(o map[string]any) {
					conds(map[string]any{"type": "Programmed", "status": "False", "reason": "Invalid"})(o)
					_ = unstructured.SetNestedSlice(o, []any{map[string]any{"name": "https", "conditions": []any{
						map[string]any{"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef", "message": "secret maas-gateway-tls not found"}}}}, "status", "listeners")
				})
				edit(t, r, verify.ClusterIssuerGVK, "", "letsencrypt-production", conds(map[string]any{"type": "Ready", "status": "False", "reason": "ErrRegisterACMEAccount", "message": "Failed to register ACME account"}))
			}},
		{name: "Gateway certificate missing", code: doctor.CodeGatewayNotProgrammed, object: "Gateway openshift-ingress/maas-default-gateway", evidence: "InvalidCertificateRef",
			fix: "oc describe certificate maas-default-gateway-cert",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", func(o map[string]any) {
					conds(map[string]any{"type": "Programmed", "status": "False", "reason": "Invalid"})(o)
					_ = unstructured.SetNestedSlice(o, []any{map[string]any{"name": "https", "conditions": []any{
						map[string]any{"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef", "message": "secret maas-gateway-tls not found"}}}}, "status", "listeners")
				})
			}},
		{name: "Gateway certificate changed outside the inventory", code: doctor.CodeGatewayNotProgrammed, object: "Gateway openshift-ingress/maas-default-gateway",
			evidence: `Certificate spec.issuerRef.name "someone-elses-issuer", the inventory's gateway.certIssuer "letsencrypt-production"`,
			fix:      "maasctl install   (re-applies Certificate openshift-ingress/maas-default-gateway-cert from the inventory; cert-manager then issues Secret maas-gateway-tls)",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", func(o map[string]any) {
					conds(map[string]any{"type": "Programmed", "status": "False", "reason": "Invalid"})(o)
					_ = unstructured.SetNestedSlice(o, []any{map[string]any{"name": "https", "conditions": []any{
						map[string]any{"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef", "message": "secret maas-gateway-tls not found"}}}}, "status", "listeners")
				})
				edit(t, r, verify.CertificateGVK, "openshift-ingress", "maas-default-gateway-cert", func(o map[string]any) {
					set(map[string]any{"secretName": "maas-gateway-tls", "issuerRef": map[string]any{"kind": "ClusterIssuer", "name": "someone-elses-issuer"}}, "spec")(o)
					conds(map[string]any{"type": "Ready", "status": "False", "reason": "DoesNotExist"})(o)
				})
			}},
		{name: "Gateway's own certificate Secret missing (no issuer)", code: doctor.CodeGatewayNotProgrammed, object: "Gateway openshift-ingress/maas-default-gateway",
			evidence: "InvalidCertificateRef",
			fix:      "oc create secret tls maas-gateway-tls -n openshift-ingress --cert=<certificate file> --key=<key file>",
			inv:      func(i *inventory.Inventory) { i.Gateway.CertIssuer = "" },
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", func(o map[string]any) {
					conds(map[string]any{"type": "Programmed", "status": "False", "reason": "Invalid"})(o)
					_ = unstructured.SetNestedSlice(o, []any{map[string]any{"name": "https", "conditions": []any{
						map[string]any{"type": "ResolvedRefs", "status": "False", "reason": "InvalidCertificateRef", "message": "secret maas-gateway-tls not found"}}}}, "status", "listeners")
				})
				r.Remove(verify.CertificateGVK, "openshift-ingress", "maas-default-gateway-cert")
			}},
		{name: "LoadBalancerPending on ClusterIP is harmless", code: doctor.CodeGatewayLBHarmless, object: "Gateway openshift-ingress/maas-default-gateway", evidence: "DNSReady=False", fix: "none needed",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.GatewayGVK, "openshift-ingress", "maas-default-gateway", conds(
					map[string]any{"type": "Programmed", "status": "True", "reason": "Programmed"},
					map[string]any{"type": "LoadBalancerReady", "status": "False", "reason": "LoadBalancerPending"},
					map[string]any{"type": "DNSReady", "status": "False", "reason": "NoDNSZones"}))
			}},
		{name: "maas-api missing", code: doctor.CodeMaaSAPIMissing, object: "Deployment redhat-ai-gateway-infra/maas-api", evidence: "PrerequisitesMissing",
			fix: "oc get datasciencecluster default-dsc -o yaml",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.DeploymentGVK, "redhat-ai-gateway-infra", "maas-api")
				edit(t, r, verify.DSCGVK, "", "default-dsc", conds(map[string]any{"type": "ModelsAsAServiceReady", "status": "False", "reason": "PrerequisitesMissing", "message": "no Authorino instances found"}))
			}},
		// kubectl scale deploy maas-api --replicas=0: no crash loop, and
		// the operator did not scale it back.
		{name: "maas-api scaled to 0", code: doctor.CodeMaaSAPIMissing, object: "Deployment redhat-ai-gateway-infra/maas-api", evidence: "scaled to 0 replicas",
			cause: "scaled to 0 replicas", fix: "oc scale deployment maas-api -n redhat-ai-gateway-infra --replicas=1", notFix: "crash-loops",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.DeploymentGVK, "redhat-ai-gateway-infra", "maas-api", func(o map[string]any) {
					set(int64(0), "spec", "replicas")(o)
					set(int64(0), "status", "readyReplicas")(o)
				})
			}},
		{name: "maas-db-config missing", code: doctor.CodeDBConfigMissing, object: "Secret redhat-ai-gateway-infra/maas-db-config", evidence: "not found", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.SecretGVK, "redhat-ai-gateway-infra", "maas-db-config")
			}},
		{name: "User Workload Monitoring off", code: doctor.CodeMonitoringOff, object: "ConfigMap openshift-monitoring/cluster-monitoring-config", evidence: "enableUserWorkload=false",
			fix: "cluster-monitoring-config",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.ConfigMapGVK, "openshift-monitoring", "cluster-monitoring-config", set("enableUserWorkload: false\n", "data", "config.yaml"))
			}},
		{name: "provider secret missing", code: doctor.CodeProviderSecret, object: "ExternalProvider " + mns + "/llama-coder-provider", evidence: "SecretNotFound",
			fix: "oc create secret generic llama-coder-api-key",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.SecretGVK, mns, "llama-coder-api-key")
				edit(t, r, verify.ExternalProviderGVK, mns, "llama-coder-provider", func(o map[string]any) {
					set("Failed", "status", "phase")(o)
					conds(map[string]any{"type": "Ready", "status": "False", "reason": "SecretNotFound"})(o)
				})
			}},
		{name: "provider secret without api-key", code: doctor.CodeProviderSecretKey, object: "ExternalProvider " + mns + "/llama-coder-provider", evidence: "Secret keys: token",
			fix: "--from-literal=api-key=",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.SecretGVK, mns, "llama-coder-api-key", set(map[string]any{"token": "eA=="}, "data"))
				edit(t, r, verify.ExternalProviderGVK, mns, "llama-coder-provider", set("Failed", "status", "phase"))
			}},
		{name: "provider secret without label", code: doctor.CodeProviderSecretLabel, object: "ExternalProvider " + mns + "/llama-coder-provider", evidence: "Secret labels",
			fix: "oc label secret llama-coder-api-key -n " + mns + " inference.llm-d.ai/ipp-managed=true",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.SecretGVK, mns, "llama-coder-api-key", func(o map[string]any) { unstructured.RemoveNestedField(o, "metadata", "labels") })
				edit(t, r, verify.ExternalProviderGVK, mns, "llama-coder-provider", set("Pending", "status", "phase"))
			}},
		{name: "provider not ready for another reason", code: doctor.CodeProviderNotReady, object: "ExternalProvider " + mns + "/llama-coder-provider", evidence: "phase Pending",
			fix: "serviceentry,destinationrule",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.ExternalProviderGVK, mns, "llama-coder-provider", set("Pending", "status", "phase"))
			}},
		{name: "provider changed outside the inventory", code: doctor.CodeProviderNotReady, object: "ExternalProvider " + mns + "/llama-coder-provider",
			evidence: `spec.auth.secretRef.name "someone-elses-key", the inventory's externalModels[qwen35-9b-coder].apiKeySecret "llama-coder-api-key"`,
			fix:      "maasctl install   (re-applies ExternalProvider " + mns + "/llama-coder-provider from the inventory)",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.ExternalProviderGVK, mns, "llama-coder-provider", func(o map[string]any) {
					set("someone-elses-key", "spec", "auth", "secretRef", "name")(o)
					set("Failed", "status", "phase")(o)
					conds(map[string]any{"type": "Ready", "status": "False", "reason": "SecretNotFound", "message": "secret someone-elses-key not found"})(o)
				})
			}},
		{name: "llama-coder Service deleted", code: doctor.CodeModelNotServing, object: "Service " + mns + "/llama-coder", evidence: "not found",
			fix: "set externalModels[].endpoint (now llama-coder." + mns + ".svc.cluster.local) in the inventory to the Service of the model server (oc get svc -n " + mns + "), then maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.ServiceGVK, mns, "llama-coder")
				r.Remove(verify.EndpointSliceGVK, mns, "llama-coder-x1")
			}},
		{name: "Service Mesh 3.1", code: doctor.CodeServiceMeshOld, object: "ClusterServiceVersion openshift-operators/servicemeshoperator3.v3.3.2", evidence: "Service Mesh 3.1.0",
			fix: "grep servicemesh",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.CSVGVK, "openshift-operators", "servicemeshoperator3.v3.3.2", set("3.1.0", "spec", "version"))
			}},
		{name: "Service Mesh 3.1 in its own namespace", code: doctor.CodeServiceMeshOld, object: "ClusterServiceVersion istio-system/servicemeshoperator3.v3.1.0", evidence: "Service Mesh 3.1.0",
			fix: "oc get csv -n istio-system",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				o, err := r.Get(context.Background(), verify.CSVGVK, "openshift-operators", "servicemeshoperator3.v3.3.2")
				if err != nil {
					t.Fatal(err)
				}
				r.Remove(verify.CSVGVK, "openshift-operators", "servicemeshoperator3.v3.3.2")
				o = o.DeepCopy()
				o.SetNamespace("istio-system")
				o.SetName("servicemeshoperator3.v3.1.0")
				set("3.1.0", "spec", "version")(o.Object)
				r.Put(o)
			}},
		{name: "llama-coder without ready endpoints", code: doctor.CodeModelNotServing, object: "Service " + mns + "/llama-coder", evidence: "Deployment llama-coder: 0 of 1 replicas ready",
			fix: "oc logs -n " + mns + " deploy/llama-coder",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.EndpointSliceGVK, mns, "llama-coder-x1", set([]any{map[string]any{"addresses": []any{"10.244.0.2"}, "conditions": map[string]any{"ready": false}}}, "endpoints"))
				r.Put(modelServer(mns, 1, 0))
			}},
		{name: "llama-coder scaled to 0", code: doctor.CodeModelNotServing, object: "Service " + mns + "/llama-coder", evidence: "Deployment llama-coder: 0 of 0 replicas ready",
			fix: "oc scale deployment llama-coder -n " + mns + " --replicas=1",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.EndpointSliceGVK, mns, "llama-coder-x1")
				r.Put(modelServer(mns, 0, 0))
			}},
		{name: "llama-coder with no Deployment behind its Service", code: doctor.CodeModelNotServing, object: "Service " + mns + "/llama-coder", evidence: "0 ready",
			fix: "deploy the model server with pod labels app=llama-coder",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.EndpointSliceGVK, mns, "llama-coder-x1")
			}},
		{name: "gateway AuthPolicy not enforced", code: doctor.CodeGatewayAuth, object: "AuthPolicy openshift-ingress/maas-gateway-auth",
			evidence: "Enforced=False (Unknown): [Gateway API provider", fix: "oc delete pod -n openshift-operators",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", set([]any{
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "Unknown", "message": "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"},
				}, "status", "conditions"))
			}},
		{name: "gateway AuthPolicy overridden by the tier-based one", code: doctor.CodeGatewayAuth, object: "AuthPolicy openshift-ingress/maas-gateway-auth",
			evidence: "Enforced=False (Overridden): AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]", fix: "finish the migration (maasctl migrate tiers",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", set([]any{
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "Overridden", "message": "AuthPolicy is overridden by [openshift-ingress/gateway-auth-policy]"},
				}, "status", "conditions"))
			}},
		{name: "gateway AuthPolicy missing", code: doctor.CodeGatewayAuth, object: "AuthPolicy openshift-ingress/maas-gateway-auth",
			evidence: "not found; MaaSAuthPolicies: llama-coder-access (phase Active)", fix: "oc describe maasauthpolicy",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth")
			}},
		// The inventory pairs the model: the live policy was changed by
		// hand, and install re-creates it (not "add it to the inventory").
		{name: "model in a subscription but in no auth policy", code: doctor.CodeGovernanceGap, object: "MaaSModelRef " + mns + "/qwen35-9b-coder", evidence: "no MaaSAuthPolicy",
			fix: "maasctl install   (re-creates the inventory's MaaSAuthPolicy and MaaSSubscription for the model)",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSAuthPolicyGVK, ins, "llama-coder-access", set([]any{map[string]any{"name": "other", "namespace": mns}}, "spec", "modelRefs"))
			}},
		{name: "auth policy groups changed outside the inventory", code: doctor.Code403, object: "MaaSModelRef " + mns + "/qwen35-9b-coder",
			evidence: "llama-coder-access grants groups developers, users <none>; the installed inventory grants groups system:authenticated",
			fix:      "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSAuthPolicyGVK, ins, "llama-coder-access", set([]any{map[string]any{"name": "developers"}}, "spec", "subjects", "groups"))
			}},
		{name: "subscription owners changed outside the inventory", code: doctor.Code429, object: "MaaSModelRef " + mns + "/qwen35-9b-coder",
			evidence: "llama-coder-default is owned by groups developers, users <none>; the installed inventory says groups system:authenticated",
			fix:      "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "developers"}}, "spec", "owner", "groups"))
			}},
		{name: "Kuadrant CR deleted", code: doctor.CodeObjectMissing, object: "Kuadrant kuadrant-system/kuadrant", evidence: "not found", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.KuadrantGVK, "kuadrant-system", "kuadrant")
			}},
		{name: "passthrough Route deleted", code: doctor.CodeObjectMissing, object: "Route openshift-ingress/maas-default-gateway-https", evidence: "not found", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.RouteGVK, "openshift-ingress", "maas-default-gateway-https")
			}},
		{name: "MaaSAuthPolicy deleted", code: doctor.CodeObjectMissing, object: "MaaSAuthPolicy " + ins + "/llama-coder-access", evidence: "not found", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.MaaSAuthPolicyGVK, ins, "llama-coder-access")
			}},
		{name: "Kuadrant operator scaled to 0", code: doctor.CodeKuadrantOperatorDown, object: "Deployment openshift-operators/kuadrant-operator-controller-manager",
			evidence: "spec.replicas 0, 0 ready; 0 Running pod(s)", fix: "oc scale deployment kuadrant-operator-controller-manager -n openshift-operators --replicas=1",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				r.Remove(verify.PodGVK, "openshift-operators", "kuadrant-operator-controller-manager-abc")
				r.Put(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
					"metadata": map[string]any{"name": "kuadrant-operator-controller-manager", "namespace": "openshift-operators"},
					"spec":     map[string]any{"replicas": int64(0), "template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "kuadrant", "control-plane": "controller-manager"}}}},
					"status":   map[string]any{}}})
			}},
		{name: "MaaSSubscription not Active", code: doctor.CodeNotReady, object: "MaaSSubscription " + ins + "/llama-coder-default", evidence: "phase Failed", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set("Failed", "status", "phase"))
			}},
		{name: "RHCL operator env missing", code: doctor.CodeOperatorEnv, object: "Subscription openshift-operators/rhcl-operator", evidence: "spec.config.env lacks", fix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.SubscriptionGVK, "openshift-operators", "rhcl-operator", func(o map[string]any) { unstructured.RemoveNestedField(o, "spec", "config") })
			}},
		{name: "token limit too small", code: doctor.CodeTokenLimitTooSmall, object: "MaaSSubscription " + ins + "/llama-coder-default", evidence: "limit 1000 tokens per 1h",
			fix: `"path":"/spec/modelRefs/0/tokenRateLimits/0/limit"`,
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "qwen35-9b-coder", "namespace": mns,
					"tokenRateLimits": []any{map[string]any{"limit": int64(1000), "window": "1h"}}}}, "spec", "modelRefs"))
			}},
		// Kuadrant's verdict is for the older spec; nothing else is
		// wrong: wait, never restart the operator.
		{name: "gateway AuthPolicy judged for an older generation", code: doctor.CodeGatewayAuth, object: "AuthPolicy openshift-ingress/maas-gateway-auth",
			evidence: "status is for generation 3, the policy is at 4", cause: "Kuadrant has not judged the AuthPolicy's new spec yet",
			fix: "wait and run maasctl verify --settle", notFix: "oc delete pod",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", func(o map[string]any) {
					set(int64(4), "metadata", "generation")(o)
					set(int64(3), "status", "observedGeneration")(o)
				})
			}},
		{name: "generated TokenRateLimitPolicy judged for an older generation", code: doctor.CodeNotReady, object: "TokenRateLimitPolicy " + mns + "/maas-trlp-qwen35-9b-coder",
			evidence: "status is for generation 2, the policy is at 3", cause: "Kuadrant has not judged the TokenRateLimitPolicy's new spec yet",
			fix: "wait and run maasctl verify --settle", notFix: "maasctl install",
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.TokenRateLimitPolicyGVK, mns, "maas-trlp-qwen35-9b-coder", func(o map[string]any) {
					set(int64(3), "metadata", "generation")(o)
					set(int64(2), "status", "observedGeneration")(o)
				})
			}},
		// The trial: the installed inventory's limit is 50000, the live
		// subscription was patched to 7. The fix restores 50000 and names
		// the inventory path; the default 200000 would be new drift.
		{name: "token limit patched below a non-default inventory", code: doctor.CodeTokenLimitTooSmall, object: "MaaSSubscription " + ins + "/llama-coder-default",
			evidence: "subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].limit is 50000",
			fix:      `"path":"/spec/modelRefs/0/tokenRateLimits/0/limit","value":50000}]'`,
			cause:    "changed outside the inventory, which says 50000", notFix: "200000",
			inv: func(inv *inventory.Inventory) { inv.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 50000 },
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "qwen35-9b-coder", "namespace": mns,
					"tokenRateLimits": []any{map[string]any{"limit": int64(7), "window": "1h"}}}}, "spec", "modelRefs"))
			}},
		// An inventory whose own limit is too small: the fix is in the
		// inventory, not an oc patch that install would revert.
		{name: "token limit too small in the inventory itself", code: doctor.CodeTokenLimitTooSmall, object: "MaaSSubscription " + ins + "/llama-coder-default",
			evidence: "limit 500 tokens per 1h",
			fix:      "raise subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].limit (now 500) in the inventory to at least 2000 and run maasctl install",
			notFix:   "oc patch",
			inv:      func(inv *inventory.Inventory) { inv.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 500 },
			breakf: func(t *testing.T, r *verify.StaticReader) {
				edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "qwen35-9b-coder", "namespace": mns,
					"tokenRateLimits": []any{map[string]any{"limit": int64(500), "window": "1h"}}}}, "spec", "modelRefs"))
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy(t)
			if tc.breakf != nil {
				tc.breakf(t, r)
			}
			inv := inventory.Default()
			if tc.inv != nil {
				tc.inv(inv)
			}
			rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inv, Reader: r})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_ = rep.WriteText(&out)
			coveredByDoctor(t, r, inv, rep)
			if tc.code == "" {
				if len(rep.Findings) != 0 {
					t.Fatalf("healthy state has findings:\n%s", out.String())
				}
				return
			}
			var hit *doctor.Finding
			for i, f := range rep.Findings {
				if f.Code == tc.code {
					hit = &rep.Findings[i]
				}
			}
			if hit == nil {
				t.Fatalf("no %s finding:\n%s", tc.code, out.String())
			}
			if hit.Object != tc.object || !strings.Contains(hit.Evidence, tc.evidence) || !strings.Contains(hit.Fix, tc.fix) || hit.Cause == "" {
				t.Errorf("%s:\n object %q (want %q)\n evidence %q (want ⊇ %q)\n fix %q (want ⊇ %q)", tc.code, hit.Object, tc.object, hit.Evidence, tc.evidence, hit.Fix, tc.fix)
			}
			if !strings.Contains(hit.Cause, tc.cause) || (tc.notFix != "" && strings.Contains(hit.Fix, tc.notFix)) {
				t.Errorf("%s:\n cause %q (want ⊇ %q)\n fix %q (want ⊉ %q)", tc.code, hit.Cause, tc.cause, hit.Fix, tc.notFix)
			}
		})
	}
}

func TestRulesCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range doctor.Rules {
		if seen[r.Code] || !strings.HasPrefix(r.Code, "MAAS-D") || r.Symptom == "" {
			t.Errorf("bad or duplicate rule %+v", r)
		}
		seen[r.Code] = true
	}
}

// TestDataPathFindings: with an endpoint, doctor observes 429 (exhausted)
// and 401 (the user's own revoked key) on the simulated data plane.
func TestDataPathFindings(t *testing.T) {
	r := healthy(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plane, err := dataplane.Start(ctx, dataplane.Options{Reader: r, Auth: dataplane.StaticTokens{adminToken: admin}})
	if err != nil {
		t.Fatal(err)
	}
	defer plane.Close()
	ca, err := plane.WriteCAFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dp := &verify.DataPathOptions{Endpoint: plane.URL(), Token: adminToken, CAFile: ca}
	hc, err := verify.HTTPClient(*dp)
	if err != nil {
		t.Fatal(err)
	}
	// Use up a 30-token limit with the caller's own key.
	edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "qwen35-9b-coder", "namespace": mns,
		"tokenRateLimits": []any{map[string]any{"limit": int64(30), "window": "1h"}}}}, "spec", "modelRefs"))
	req, _ := http.NewRequest(http.MethodPost, plane.URL()+"/maas-api/v1/api-keys", strings.NewReader(`{"name":"mine","subscription":"llama-coder-default"}`))
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	key := plane.IssuedKeys()[0]
	for i := 0; i < 5; i++ {
		req, _ := http.NewRequest(http.MethodPost, plane.URL()+"/v1/chat/completions", strings.NewReader(`{"model":"qwen35-9b-coder","messages":[{"role":"user","content":"one two three four five"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	for _, k := range plane.Keys() {
		req, _ := http.NewRequest(http.MethodDelete, plane.URL()+"/maas-api/v1/api-keys/"+k.ID, nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
	}
	rep, err := doctor.Run(ctx, doctor.Options{Inventory: inventory.Default(), Reader: r, DataPath: dp, APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = rep.WriteJSON(&out)
	_ = rep.WriteText(&out)
	if strings.Contains(out.String(), key) || strings.Contains(out.String(), adminToken) {
		t.Fatal("doctor output holds a key or the token")
	}
	want := map[string]string{doctor.Code429: "tokens per 1h", doctor.Code401: "HTTP 401", doctor.CodeTokenLimitTooSmall: "limit 30"}
	for code, ev := range want {
		found := false
		for _, f := range rep.Findings {
			if f.Code == code && strings.Contains(f.Evidence+f.Cause, ev) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s finding mentioning %q:\n%s", code, ev, out.String())
		}
	}
}

// TestAuthFailureMergesIntoKuadrant: a 500 AUTH_FAILURE observed while
// Kuadrant reports MissingDependency is evidence of that finding, not a
// second one.
func TestAuthFailureMergesIntoKuadrant(t *testing.T) {
	r := healthy(t)
	edit(t, r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", conds(map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency", "message": "restart the operator"}))
	s, err := verify.Snapshot(context.Background(), r, inventory.Default(), release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	dp := []verify.Check{
		{Code: verify.CodeMintKey, Object: "https://maas/maas-api/v1/api-keys", Result: verify.Fail, Class: string(verify.ClassAuthService), Detail: `HTTP 500: {"error":"AUTH_FAILURE"}`},
		{Code: verify.CodeNoKey401, Object: "https://maas/v1/chat/completions", Result: verify.Fail, Class: string(verify.ClassAuthService), Detail: `HTTP 500: {"error":"AUTH_FAILURE"}`},
	}
	got := doctor.Analyze(s, dp)
	if len(got) != 1 || got[0].Code != doctor.CodeKuadrantMissingDep || !strings.Contains(got[0].Evidence, "AUTH_FAILURE") || got[0].Fix == "" {
		t.Fatalf("findings %+v, want one %s carrying the AUTH_FAILURE evidence", got, doctor.CodeKuadrantMissingDep)
	}
	// With Kuadrant Ready the same observation is its own finding.
	_ = unstructured.SetNestedSlice(s.Kuadrant.Object, []any{map[string]any{"type": "Ready", "status": "True", "reason": "Ready"}}, "status", "conditions")
	got = doctor.Analyze(s, dp)
	if len(got) != 1 || got[0].Code != doctor.CodeAuthService {
		t.Fatalf("findings %+v, want one %s", got, doctor.CodeAuthService)
	}
}

// coveredByDoctor asserts that every verify check failing on the state of
// r has a doctor finding of a rule its VerifyCoverage entry names.
func coveredByDoctor(t *testing.T, r verify.Reader, inv *inventory.Inventory, rep *doctor.Report) {
	t.Helper()
	s, err := verify.Snapshot(context.Background(), r, inv, release.Release{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range verify.LiveChecks(s) {
		if c.Result != verify.Fail {
			continue
		}
		rules := doctor.VerifyCoverage[c.Code]
		if !slices.ContainsFunc(rep.Findings, func(f doctor.Finding) bool { return slices.Contains(rules, f.Code) && f.Fix != "" && f.Cause != "" }) {
			t.Errorf("verify %s fails (%s: %s) but doctor reports none of %v: %v", c.Code, c.Object, c.Detail, rules, rep.Codes())
		}
	}
}

// TestVerifyCoverage: every verify check code has doctor rules, each of
// them in the catalogue, and no entry names a code verify does not have.
func TestVerifyCoverage(t *testing.T) {
	known := map[string]bool{}
	for _, r := range doctor.Rules {
		known[r.Code] = true
	}
	codes := verify.Codes()
	if len(codes) == 0 {
		t.Fatal("verify declares no codes")
	}
	for _, c := range codes {
		rules, ok := doctor.VerifyCoverage[c]
		if !ok || len(rules) == 0 {
			t.Errorf("verify check %s (%s) has no doctor rule in doctor.VerifyCoverage", c, verify.TitleOf(c))
		}
		for _, r := range rules {
			if !known[r] {
				t.Errorf("VerifyCoverage[%s] names %s, which is not in doctor.Rules", c, r)
			}
		}
	}
	for c := range doctor.VerifyCoverage {
		if !slices.Contains(codes, c) {
			t.Errorf("VerifyCoverage names %s, which verify does not declare", c)
		}
	}
}

// TestNotInGrantedGroups: with an inventory that grants a group the
// caller is not in, and live policies as the inventory says, doctor
// reports information, not an error (DEPLOYMENT.md "Grant access to
// specific groups").
func TestNotInGrantedGroups(t *testing.T) {
	r := healthy(t)
	inv := inventory.Default()
	for i := range inv.AuthPolicies {
		inv.AuthPolicies[i].Groups = []string{"developers"}
	}
	for i := range inv.Subscriptions {
		inv.Subscriptions[i].Groups = []string{"developers"}
	}
	edit(t, r, verify.MaaSAuthPolicyGVK, ins, "llama-coder-access", set([]any{map[string]any{"name": "developers"}}, "spec", "subjects", "groups"))
	edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "developers"}}, "spec", "owner", "groups"))
	rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inv, Reader: r})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = rep.WriteText(&out)
	if len(rep.Errors()) != 0 {
		t.Fatalf("errors for an intended configuration:\n%s", out.String())
	}
	if got := rep.Codes(); !slices.Equal(got, []string{doctor.CodeNotInGroups}) {
		t.Fatalf("codes %v, want [%s]\n%s", got, doctor.CodeNotInGroups, out.String())
	}
	f := rep.Findings[0]
	if f.Severity != doctor.Info || !strings.Contains(f.Evidence, "you are not in authPolicies llama-coder-access (groups developers") || !strings.Contains(f.Evidence, "you are admin (groups system:masters") {
		t.Errorf("finding %+v", f)
	}
	// The same live policies with the default inventory are drift: errors.
	rep, err = doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: r})
	if err != nil {
		t.Fatal(err)
	}
	if codes := strings.Join(rep.Codes(), " "); !strings.Contains(codes, doctor.Code403) || !strings.Contains(codes, doctor.Code429) || strings.Contains(codes, doctor.CodeNotInGroups) {
		t.Errorf("drift from the default inventory: codes %s, want %s and %s", codes, doctor.Code403, doctor.Code429)
	}
}

// TestUnreachableEndpoint: an endpoint that does not answer, or answers
// 404 to everything, is a finding, not dropped; so is a missing Route
// when no endpoint is given.
func TestUnreachableEndpoint(t *testing.T) {
	notFound := httptest.NewServer(http.NotFoundHandler())
	defer notFound.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	for _, tc := range []struct{ name, endpoint, evidence string }{
		{"no response", closedURL, "connect"},
		{"not found", notFound.URL, "404"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: healthy(t),
				DataPath: &verify.DataPathOptions{Endpoint: tc.endpoint, Token: adminToken, RequestTimeout: 5 * time.Second}})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_ = rep.WriteText(&out)
			found := false
			for _, f := range rep.Findings {
				found = found || f.Code == doctor.CodeEndpointUnreachable && strings.Contains(f.Evidence, tc.evidence) && strings.Contains(f.Fix, "--endpoint https://maas.apps.openshift.example.com")
			}
			if !found || len(rep.Errors()) == 0 {
				t.Errorf("no %s error naming %q:\n%s", doctor.CodeEndpointUnreachable, tc.evidence, out.String())
			}
		})
	}
	t.Run("no Route, no endpoint", func(t *testing.T) {
		r := healthy(t)
		r.Remove(verify.RouteGVK, "openshift-ingress", "maas-default-gateway-https")
		rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: r, DataPath: &verify.DataPathOptions{Token: adminToken}})
		if err != nil {
			t.Fatal(err)
		}
		codes := strings.Join(rep.Codes(), " ")
		if !strings.Contains(codes, doctor.CodeEndpointUnreachable) || !strings.Contains(codes, doctor.CodeObjectMissing) {
			t.Errorf("codes %s, want %s and %s", codes, doctor.CodeEndpointUnreachable, doctor.CodeObjectMissing)
		}
	})
}

// TestNotInGrantedGroupsDataPath: the same intended configuration probed
// through the data plane: the 403/429 the admin gets are information.
func TestNotInGrantedGroupsDataPath(t *testing.T) {
	r := healthy(t)
	inv := inventory.Default()
	for i := range inv.AuthPolicies {
		inv.AuthPolicies[i].Groups = []string{"developers"}
	}
	for i := range inv.Subscriptions {
		inv.Subscriptions[i].Groups = []string{"developers"}
	}
	edit(t, r, verify.MaaSAuthPolicyGVK, ins, "llama-coder-access", set([]any{map[string]any{"name": "developers"}}, "spec", "subjects", "groups"))
	edit(t, r, verify.MaaSSubscriptionGVK, ins, "llama-coder-default", set([]any{map[string]any{"name": "developers"}}, "spec", "owner", "groups"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	plane, err := dataplane.Start(ctx, dataplane.Options{Reader: r, Auth: dataplane.StaticTokens{adminToken: admin}})
	if err != nil {
		t.Fatal(err)
	}
	defer plane.Close()
	ca, err := plane.WriteCAFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rep, err := doctor.Run(ctx, doctor.Options{Inventory: inv, Reader: r, DataPath: &verify.DataPathOptions{Endpoint: plane.URL(), Token: adminToken, CAFile: ca}})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	_ = rep.WriteText(&out)
	if len(rep.Errors()) != 0 || !strings.Contains(out.String(), "you are not in") {
		t.Fatalf("want only information for an intended configuration:\n%s", out.String())
	}
}

// modelServer is a llama-coder Deployment with pods labelled app=llama-coder.
func modelServer(ns string, replicas, ready int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "llama-coder", "namespace": ns},
		"spec":     map[string]any{"replicas": replicas, "template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "llama-coder"}}}},
		"status":   map[string]any{"readyReplicas": ready},
	}}
}

// fixingReader is a verify.Reader over r that, on its fixAt-th read of an
// AuthPolicy (Get or List), first gives the Gateway AuthPolicy the
// conditions Kuadrant writes once it has synced (fixAt 0: never).
type fixingReader struct {
	*verify.StaticReader
	t            *testing.T
	fixAt, reads int
}

func (f *fixingReader) seen(gvk schema.GroupVersionKind) {
	if gvk != verify.AuthPolicyGVK {
		return
	}
	if f.reads++; f.reads == f.fixAt {
		edit(f.t, f.StaticReader, verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", conds(
			map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
			map[string]any{"type": "Enforced", "status": "True", "reason": "Enforced"}))
	}
}

func (f *fixingReader) Get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	f.seen(gvk)
	return f.StaticReader.Get(ctx, gvk, ns, name)
}

func (f *fixingReader) List(ctx context.Context, gvk schema.GroupVersionKind, ns, sel string) ([]*unstructured.Unstructured, error) {
	f.seen(gvk)
	return f.StaticReader.List(ctx, gvk, ns, sel)
}

// TestSettleBeforeFindings: right after an install Kuadrant reports the
// Gateway AuthPolicy Enforced=False "waiting for the following components
// to sync" for a few seconds; with Settle doctor reads again meanwhile and
// finds nothing once Kuadrant has synced, as verify --settle passes.
// Without Settle, or for a failure no later read can end, MAAS-D021 is
// reported from the first read.
func TestSettleBeforeFindings(t *testing.T) {
	const syncing = "AuthPolicy waiting for the following components to sync: [AuthConfig (5f0e3a1c9b)]"
	const notInstalled = "[Gateway API provider (istio / envoy gateway)] is not installed, please restart Kuadrant Operator pod once dependency has been installed"
	for _, tc := range []struct {
		name        string
		message     string
		settle      time.Duration
		fixAt       int
		wantD021    bool
		wantReads   int
		wantWaiting int
	}{
		{name: "syncing, settled", message: syncing, settle: time.Minute, fixAt: 2, wantReads: 2, wantWaiting: 1},
		{name: "syncing, settle 0", message: syncing, fixAt: 2, wantD021: true, wantReads: 1},
		{name: "not pending: judged at once", message: notInstalled, settle: time.Minute, fixAt: 2, wantD021: true, wantReads: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &fixingReader{StaticReader: healthy(t), t: t, fixAt: tc.fixAt}
			edit(t, r.StaticReader, verify.AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", conds(
				map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
				map[string]any{"type": "Enforced", "status": "False", "reason": "Unknown", "message": tc.message}))
			var waiting []string
			rep, err := doctor.Run(context.Background(), doctor.Options{Inventory: inventory.Default(), Reader: r,
				Settle: tc.settle, Waiting: func(p string) { waiting = append(waiting, p) }})
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(rep.Codes(), doctor.CodeGatewayAuth); got != tc.wantD021 {
				t.Errorf("MAAS-D021 reported: %v, want %v; findings %v", got, tc.wantD021, rep.Codes())
			}
			if r.reads != tc.wantReads {
				t.Errorf("AuthPolicy read %d times, want %d", r.reads, tc.wantReads)
			}
			if len(waiting) != tc.wantWaiting || tc.wantWaiting > 0 && !strings.Contains(waiting[0], "MAAS-V010") {
				t.Errorf("Waiting got %q, want %d message(s) naming MAAS-V010", waiting, tc.wantWaiting)
			}
		})
	}
}

// TestWriteTextMultiLineEvidence: a multi-line evidence (a step Check's
// message) stays in the value column of its finding, so the next
// finding's code still starts a line of its own (a new user's trial,
// session 41: D030 evidence broke the table).
func TestWriteTextMultiLineEvidence(t *testing.T) {
	rep := &doctor.Report{Findings: []doctor.Finding{
		{Code: "MAAS-D030", Severity: doctor.Error, Symptom: "step not converged", Object: "step rhoai/dsc",
			Evidence: "drifted: DataScienceCluster default-dsc:\n  spec.components.kserve differs\n", Cause: "changed after the install", Fix: "maasctl install"},
		{Code: "MAAS-D031", Severity: doctor.Warning, Symptom: "step unsure", Object: "step models/model", Evidence: "unknown", Cause: "c", Fix: "f"},
	}}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	var evidence int
	for i, l := range lines {
		if strings.Contains(l, "evidence:") && strings.Contains(l, "drifted:") {
			evidence = i
		}
	}
	col := strings.Index(lines[evidence], "drifted:")
	if next := lines[evidence+1]; strings.TrimSpace(next) != "spec.components.kserve differs" || strings.Index(next, "spec.") != col+2 {
		t.Errorf("the second line of the evidence is not in the value column (at %d):\n%s", col, out.String())
	}
	if !strings.HasPrefix(lines[evidence+2], "  ") || !strings.Contains(lines[evidence+2], "cause:") {
		t.Errorf("the line after the evidence is not its finding's cause:\n%s", out.String())
	}
	for _, l := range lines {
		if strings.Contains(l, "WARNING") && !strings.HasPrefix(l, "MAAS-D031") {
			t.Errorf("the second finding's code does not start its line: %q\n%s", l, out.String())
		}
	}
}
