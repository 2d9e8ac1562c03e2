package verify

import (
	"fmt"
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// AuthorinoCAFileEnv is the variable that points Authorino's HTTP client at
// a CA bundle: Go reads the file it names in place of the system CA file
// (crypto/x509 on Linux) and still reads the system CA folders.
const AuthorinoCAFileEnv = "SSL_CERT_FILE"

// AuthorinoTrustProblem judges whether the Authorino Deployment d lets
// Authorino verify certificates of OpenShift's service CA, which signs
// maas-api's: the container "authorino" (else the first) sets
// AuthorinoCAFileEnv to a file under a volumeMount whose volume is, or
// projects, a ConfigMap or Secret, and whose items (when it lists any)
// name that file. It returns "" when so, else what is missing, in words.
// Without that trust every HTTP metadata call Authorino makes to maas-api
// (API key validation, subscription lookups) fails the TLS handshake and
// the MaaS AuthPolicy denies each model call with a valid key (401/403).
// The ConfigMap's content is not read: the service CA operator owns it.
// Source: the upstream models-as-a-service TLS guide ("Authorino →
// maas-api (Outbound TLS)"); authorino-operator v0.21.0 mounts each
// spec.volumes item of the Authorino CR as a projected volume.
func AuthorinoTrustProblem(d *unstructured.Unstructured) string {
	containers, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
	var c map[string]any
	for _, x := range containers {
		m, _ := x.(map[string]any)
		if c == nil || m["name"] == "authorino" {
			c = m
		}
	}
	if c == nil {
		return "the Deployment has no container"
	}
	file := ""
	env, _, _ := unstructured.NestedSlice(c, "env")
	for _, x := range env {
		if m, _ := x.(map[string]any); m["name"] == AuthorinoCAFileEnv {
			file, _ = m["value"].(string)
		}
	}
	if file == "" {
		return fmt.Sprintf("container %v sets no %s: Authorino trusts only the system CAs", c["name"], AuthorinoCAFileEnv)
	}
	mountPath, volName := "", ""
	mounts, _, _ := unstructured.NestedSlice(c, "volumeMounts")
	for _, x := range mounts {
		m, _ := x.(map[string]any)
		p, _ := m["mountPath"].(string)
		p = strings.TrimSuffix(p, "/")
		if p != "" && strings.HasPrefix(file, p+"/") && len(p) > len(mountPath) {
			mountPath, volName = p, fmt.Sprint(m["name"])
		}
	}
	if mountPath == "" {
		return fmt.Sprintf("%s=%s is in no volume container %v mounts", AuthorinoCAFileEnv, file, c["name"])
	}
	rel := strings.TrimPrefix(file, mountPath+"/")
	volumes, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "volumes")
	for _, x := range volumes {
		v, _ := x.(map[string]any)
		if v["name"] != volName {
			continue
		}
		var sources []map[string]any
		for _, kind := range []string{"configMap", "secret"} {
			if s, ok := v[kind].(map[string]any); ok {
				sources = append(sources, s)
			}
		}
		proj, _, _ := unstructured.NestedSlice(v, "projected", "sources")
		for _, p := range proj {
			pm, _ := p.(map[string]any)
			for _, kind := range []string{"configMap", "secret"} {
				if s, ok := pm[kind].(map[string]any); ok {
					sources = append(sources, s)
				}
			}
		}
		if len(sources) == 0 {
			return fmt.Sprintf("%s=%s is in volume %s, which holds no ConfigMap or Secret", AuthorinoCAFileEnv, file, volName)
		}
		var paths []string
		for _, s := range sources {
			items, _ := s["items"].([]any)
			if len(items) == 0 {
				return "" // every key of the object is a file; its keys are not read here
			}
			for _, it := range items {
				im, _ := it.(map[string]any)
				p := path.Clean(fmt.Sprint(im["path"]))
				if p == rel {
					return ""
				}
				paths = append(paths, p)
			}
		}
		return fmt.Sprintf("%s=%s, but volume %s has no file %s (its files: %s)", AuthorinoCAFileEnv, file, volName, rel, strings.Join(paths, ", "))
	}
	return fmt.Sprintf("%s=%s is under mount %s of volume %s, which the Deployment does not have", AuthorinoCAFileEnv, file, mountPath, volName)
}

// checkAuthorinoTrust (MAAS-V018): Authorino trusts the service CA for its
// calls to maas-api (AuthorinoTrustProblem). Skipped when the inventory
// leaves Authorino's TLS to someone else (kuadrant.authorinoTLS false).
func checkAuthorinoTrust(s *State) Check {
	k := s.Inv.Kuadrant
	c := newCheck(CodeAuthorinoTrust, describe("Deployment", k.Namespace, k.AuthorinoName))
	if !k.AuthorinoTLS {
		return c.skip("the inventory leaves Authorino's TLS to someone else (kuadrant.authorinoTLS false)")
	}
	if s.AuthorinoDeployment == nil {
		return c.fail(s.MissingReason("Deployment", k.Namespace, k.AuthorinoName),
			"the Authorino operator has not deployed Authorino (Kuadrant not Ready?), so no request is authenticated",
			"oc get authorino "+k.AuthorinoName+" -n "+k.Namespace+" -o jsonpath='{.status.conditions}'")
	}
	if p := AuthorinoTrustProblem(s.AuthorinoDeployment); p != "" {
		return c.fail(p, AuthorinoTrustCause, "maasctl install   (mounts the service CA bundle in the Authorino CR and sets "+AuthorinoCAFileEnv+" on its Deployment)")
	}
	return c.pass(AuthorinoCAFileEnv + " names the mounted service CA bundle")
}

// AuthorinoTrustCause is the cause of a failed MAAS-V018.
const AuthorinoTrustCause = "Authorino cannot verify maas-api's certificate (signed by OpenShift's service CA), so its API key validation calls to maas-api fail and every model call with a valid API key is refused (401/403)"
