package doctor

import (
	"github.com/maasctl/maasctl/internal/verify"
)

// CodeAuthorinoTrust: Authorino does not trust OpenShift's service CA, so
// its calls to maas-api fail and model calls with a valid key are refused.
const CodeAuthorinoTrust = "MAAS-D036"

// authorinoTrust reads the Authorino Deployment as MAAS-V018 does
// (verify.AuthorinoTrustProblem). The symptom in the field is a 401 or 403
// on every model call with a key maas-api itself just minted, while the
// key, the subscription and the MaaSAuthPolicy are all fine: Authorino's
// API key validation call to maas-api fails its TLS handshake. Only when
// the inventory has maasctl manage Authorino's TLS (kuadrant.authorinoTLS)
// does maasctl install set the trust; otherwise the fix is by hand, as the
// upstream models-as-a-service TLS guide does it.
func authorinoTrust(s *verify.State) []Finding {
	k := s.Inv.Kuadrant
	d := s.AuthorinoDeployment
	if d == nil {
		return nil
	}
	p := verify.AuthorinoTrustProblem(d)
	if p == "" {
		return nil
	}
	fix := "maasctl install   (mounts the service CA bundle in the Authorino CR and sets " + verify.AuthorinoCAFileEnv + " on its Deployment)"
	if !k.AuthorinoTLS {
		fix = "add to Authorino " + k.AuthorinoName + " (" + k.Namespace + ") spec.volumes.items a volume of ConfigMap openshift-service-ca.crt (key service-ca.crt, path service-ca-bundle.crt) mounted at /etc/ssl/certs/openshift-service-ca, then: oc -n " +
			k.Namespace + " set env deployment/" + k.AuthorinoName + " " + verify.AuthorinoCAFileEnv + "=/etc/ssl/certs/openshift-service-ca/service-ca-bundle.crt"
	}
	return []Finding{finding(CodeAuthorinoTrust, obj("Deployment", k.Namespace, k.AuthorinoName), p, verify.AuthorinoTrustCause, fix)}
}
