package steps

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/blang/semver/v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/waiters"
)

// checkOpenShiftVersion reads ClusterVersion "version": the desired
// version, else the newest Completed history entry.
func checkOpenShiftVersion(ctx context.Context, e *Env) ([]Finding, error) {
	cv, err := getOptional(ctx, e.Clients, clusterVersionGVK, "", "version")
	if kube.IsNotServed(err) {
		return []Finding{warnf("", "config.openshift.io ClusterVersion is not served: this is not an OpenShift cluster, and maasctl only supports OpenShift %s or later", MinOpenShift)}, nil
	}
	if err != nil {
		return nil, err
	}
	if cv == nil {
		return []Finding{warnf("", "ClusterVersion version not found: cannot tell the OpenShift version (%s or later is required)", MinOpenShift)}, nil
	}
	return openShiftVersionFindings(cv), nil
}

func openShiftVersionFindings(cv *unstructured.Unstructured) []Finding {
	v, _, _ := unstructured.NestedString(cv.Object, "status", "desired", "version")
	if v == "" {
		hist, _, _ := unstructured.NestedSlice(cv.Object, "status", "history")
		for _, h := range hist {
			hm, _ := h.(map[string]any)
			if hm["state"] == "Completed" {
				v, _ = hm["version"].(string)
				break
			}
		}
	}
	have, err := semver.ParseTolerant(v)
	if err != nil {
		return []Finding{warnf("", "ClusterVersion version reports no readable version (%q); OpenShift %s or later is required", v, MinOpenShift)}
	}
	if have.LT(semver.MustParse(MinOpenShift)) {
		return []Finding{errorf("upgrade the cluster: oc adm upgrade --to-latest", "OpenShift %s is older than %s, the oldest release with the Gateway API and Service Mesh 3 MaaS needs", have, MinOpenShift)}
	}
	return nil
}

// checkCertManager: the Certificate kind is served and the ClusterIssuer
// the Gateway certificate comes from is Ready (case B13).
func checkCertManager(ctx context.Context, e *Env) ([]Finding, error) {
	iss := e.Inv.Gateway.CertIssuer
	if iss == "" {
		return nil, nil
	}
	if _, err := e.Clients.Mapping(certificateGVK); kube.IsNotServed(err) {
		return []Finding{errorf("install the cert-manager Operator for Red Hat OpenShift (OperatorHub), or set gateway.certIssuer= and supply Secret "+e.Inv.Gateway.CertSecret,
			"cert-manager is not installed: certificates.cert-manager.io is not served")}, nil
	} else if err != nil {
		return nil, err
	}
	ci, err := getOptional(ctx, e.Clients, clusterIssuerGVK, "", iss)
	if err != nil {
		return nil, err
	}
	if ci == nil {
		return []Finding{errorf("create ClusterIssuer "+iss+" (ACME, DNS-01), or set gateway.certIssuer to an existing one",
			"ClusterIssuer %s not found: the Gateway certificate could never be issued", iss)}, nil
	}
	if r := waiters.ConditionTrue("Ready")(ci); !r.Done {
		return []Finding{errorf("oc describe clusterissuer "+iss,
			"ClusterIssuer %s is not Ready (%s): the Gateway certificate would stay pending and the Gateway listener unresolved (InvalidCertificateRef)", iss, r.Status)}, nil
	}
	return nil, nil
}

// checkGatewayCert inspects a user-supplied Gateway certificate (no
// issuer): it must exist and, behind a passthrough Route, name only the
// MaaS host. Browsers reuse an HTTP/2 connection for every host a
// certificate covers, and the router sends passthrough traffic by SNI, so a
// wildcard misroutes requests to other *.apps routes (case B14,
// keycloak/keycloak#50602, openshift/router PR #589).
func checkGatewayCert(ctx context.Context, e *Env) ([]Finding, error) {
	g := e.Inv.Gateway
	if g.CertIssuer != "" {
		return nil, nil
	}
	s, err := e.Clients.Kube.CoreV1().Secrets(g.Namespace).Get(ctx, g.CertSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return []Finding{errorf(fmt.Sprintf("oc create secret tls %s -n %s --cert=maas.crt --key=maas.key (a certificate for %s only)", g.CertSecret, g.Namespace, e.Facts.Host),
			"gateway.certIssuer is empty, so the Gateway needs the TLS Secret %s/%s, which does not exist (the listener would report InvalidCertificateRef)", g.Namespace, g.CertSecret)}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", g.Namespace, g.CertSecret, err)
	}
	return certFindings(s.Data["tls.crt"], e.Facts.Host, g.CreateRoute, g.Namespace+"/"+g.CertSecret), nil
}

// certFindings checks a PEM certificate chain's leaf against host.
func certFindings(pemData []byte, host string, passthrough bool, name string) []Finding {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return []Finding{errorf("store a PEM certificate under key tls.crt", "Secret %s has no PEM certificate in tls.crt", name)}
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return []Finding{errorf("store a valid X.509 certificate under key tls.crt", "Secret %s: tls.crt does not parse: %v", name, err)}
	}
	var out []Finding
	if err := leaf.VerifyHostname(host); err != nil {
		out = append(out, errorf("issue a certificate for "+host, "the certificate in Secret %s does not cover %s: %v", name, host, err))
	}
	var wide []string
	for _, n := range leaf.DNSNames {
		if n != host {
			wide = append(wide, n)
		}
	}
	if passthrough && len(wide) > 0 {
		out = append(out, errorf("issue a certificate for "+host+" only (or set gateway.certIssuer to let cert-manager issue one); --ignore-preflight gateway-cert accepts the risk",
			"the certificate in Secret %s also covers %s; behind the passthrough Route, HTTP/2 connection coalescing makes browsers send requests for those hosts to the MaaS Gateway (and MaaS requests to the router), which answers 404/503",
			name, strings.Join(wide, ", ")))
	}
	return out
}

// checkModelSecrets: each model's namespace and API-key Secret exist, the
// Secret holds key api-key. The role only labels the Secret
// (reference/DEPLOYMENT.md, "Rules for model entries").
func checkModelSecrets(ctx context.Context, e *Env) ([]Finding, error) {
	var out []Finding
	seenNS := map[string]bool{}
	for i, m := range e.Inv.ExternalModels {
		if !seenNS[m.Namespace] {
			seenNS[m.Namespace] = true
			_, err := e.Clients.Kube.CoreV1().Namespaces().Get(ctx, m.Namespace, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				out = append(out, errorf("deploy the model server first, or fix externalModels["+fmt.Sprint(i)+"].namespace",
					"model namespace %s does not exist (externalModels[%d] %s)", m.Namespace, i, m.Name))
				continue
			}
			if err != nil && !apierrors.IsForbidden(err) {
				return nil, fmt.Errorf("get Namespace %s: %w", m.Namespace, err)
			}
		}
		s, err := e.Clients.Kube.CoreV1().Secrets(m.Namespace).Get(ctx, m.APIKeySecret, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, errorf(fmt.Sprintf("oc create secret generic %s -n %s --from-literal=api-key=<provider key>", m.APIKeySecret, m.Namespace),
				"API-key Secret %s/%s of model %s not found", m.Namespace, m.APIKeySecret, m.Name))
		case err != nil:
			return nil, fmt.Errorf("get Secret %s/%s: %w", m.Namespace, m.APIKeySecret, err)
		case len(s.Data["api-key"]) == 0:
			out = append(out, errorf(fmt.Sprintf("oc set data secret/%s -n %s api-key=<provider key>", m.APIKeySecret, m.Namespace),
				"Secret %s/%s has no key api-key; the model's provider reads exactly that key", m.Namespace, m.APIKeySecret))
		}
	}
	return out, nil
}

// checkStorageClass: the CNPG PVCs need the named StorageClass or a default
// one, else they stay Pending and the primary is never set up (case B09).
func checkStorageClass(ctx context.Context, e *Env) ([]Finding, error) {
	d := e.Inv.Database
	if cl, err := getShared(ctx, e, cnpgClusterGVK, d.Namespace, d.ClusterName); err == nil && cl != nil && waiters.ConditionTrue("Ready")(cl).Done {
		return nil, nil // the database already runs
	}
	scs, err := e.Clients.Kube.StorageV1().StorageClasses().List(ctx, cachedList(""))
	if err != nil {
		return nil, fmt.Errorf("list StorageClasses: %w", err)
	}
	var names []string
	for _, sc := range scs.Items {
		names = append(names, sc.Name)
		if d.StorageClass == "" && sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
			return nil, nil
		}
	}
	if d.StorageClass != "" {
		if slices.Contains(names, d.StorageClass) {
			return nil, nil
		}
		return []Finding{errorf("set database.storageClass to one of: "+strings.Join(names, ", "),
			"StorageClass %s (database.storageClass) does not exist: the database PVC would stay Pending", d.StorageClass)}, nil
	}
	fix := "mark one default: oc annotate storageclass NAME storageclass.kubernetes.io/is-default-class=true"
	if len(names) > 0 {
		fix += ", or set database.storageClass to one of: " + strings.Join(names, ", ")
	}
	return []Finding{errorf(fix, "no default StorageClass and database.storageClass is empty: the database PVC would stay Pending and CNPG would never set up the primary")}, nil
}

// checkStalePVCs refuses to create the CNPG Cluster over PVCs of an earlier
// one: CNPG then refuses to bootstrap ("refusing to create the primary
// instance while the latest generated serial is not zero",
// cloudnative-pg#3309, case B09).
func checkStalePVCs(ctx context.Context, e *Env) ([]Finding, error) {
	d := e.Inv.Database
	cl, err := getShared(ctx, e, cnpgClusterGVK, d.Namespace, d.ClusterName)
	if err != nil && !kube.IsNotServed(err) {
		return nil, err
	}
	if cl != nil {
		return nil, nil
	}
	sel := "cnpg.io/cluster=" + d.ClusterName
	pvcs, err := e.Clients.Kube.CoreV1().PersistentVolumeClaims(d.Namespace).List(ctx, cachedList(sel))
	if err != nil {
		return nil, fmt.Errorf("list PVCs %s in %s: %w", sel, d.Namespace, err)
	}
	if len(pvcs.Items) == 0 {
		return nil, nil
	}
	var names []string
	for _, p := range pvcs.Items {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return []Finding{errorf(fmt.Sprintf("delete them to start with an empty database: oc delete pvc -l %s -n %s (the API keys stored there are lost)", sel, d.Namespace),
		"PVC(s) %s in %s belong to an earlier CNPG Cluster %s that no longer exists; CNPG refuses to bootstrap over them and the Cluster would stay in \"Setting up primary\"",
		strings.Join(names, ", "), d.Namespace, d.ClusterName)}, nil
}
