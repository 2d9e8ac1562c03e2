package sim

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	kwatch "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// certObj is a Certificate on issuer (kind/name) for host.
func certObj(ns, name, secret, kind, issuer string, spec map[string]any) map[string]any {
	spec["secretName"] = secret
	spec["issuerRef"] = map[string]any{"group": "cert-manager.io", "kind": kind, "name": issuer}
	return map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     spec,
	}
}

func pemType(t *testing.T, b []byte) string {
	t.Helper()
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("no PEM block in %d bytes", len(b))
	}
	return blk.Type
}

// TestCertManagerIssuerReady: cert-manager v1.21.1 writes every CA and
// SelfSigned issuer's Ready condition (pkg/issuer/ca/setup.go,
// pkg/issuer/selfsigned/setup.go): ErrGetKeyPair with its message while
// the CA Secret is missing, ErrInvalidKeyPair for a non-CA certificate,
// KeyPairVerified once it holds a CA, IsReady for SelfSigned; a
// Certificate on an issuer that is not Ready is not issued (issue 18).
func TestCertManagerIssuerReady(t *testing.T) {
	c := startCluster(t, Options{})
	c.apply(t, gvrClusterIssuer, map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
		"metadata": map[string]any{"name": "internal-ca"},
		"spec":     map[string]any{"ca": map[string]any{"secretName": "internal-ca-root"}},
	})
	c.waitFor(t, gvrClusterIssuer, "", "internal-ca", time.Minute, "ErrGetKeyPair", func(u *unstructured.Unstructured) bool {
		cd := findCondition(u, "Ready")
		return cd != nil && cd["status"] == "False" && cd["reason"] == "ErrGetKeyPair" &&
			cd["message"] == `Error getting keypair for CA issuer: secret "internal-ca-root" not found`
	})
	c.apply(t, gvrCertificate, certObj("openshift-ingress", "on-internal", "on-internal-tls", "ClusterIssuer", "internal-ca",
		map[string]any{"dnsNames": []any{"svc.example.com"}}))
	c.waitFor(t, gvrCertificateRequest, "openshift-ingress", "on-internal-1", time.Minute, "Pending on the issuer",
		hasCondition("Ready", "False", "Pending"))
	cert := c.waitFor(t, gvrCertificate, "openshift-ingress", "on-internal", time.Minute, "nextPrivateKeySecretName",
		func(u *unstructured.Unstructured) bool { return str(u, "status", "nextPrivateKeySecretName") != "" })
	next := str(cert, "status", "nextPrivateKeySecretName")
	s, err := c.kube.CoreV1().Secrets("openshift-ingress").Get(t.Context(), next, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("temporary private key Secret %s: %v", next, err)
	}
	if s.Labels["cert-manager.io/next-private-key"] != "true" || !metav1.IsControlledBy(s, &metav1.ObjectMeta{UID: cert.GetUID()}) || pemType(t, s.Data["tls.key"]) != "PRIVATE KEY" {
		t.Errorf("temporary Secret %s: labels %v owners %v key %q; want the next-private-key label, the Certificate as controller, a PKCS#8 key",
			next, s.Labels, s.OwnerReferences, pemType(t, s.Data["tls.key"]))
	}
	time.Sleep(2 * time.Second)
	if _, err := c.kube.CoreV1().Secrets("openshift-ingress").Get(t.Context(), "on-internal-tls", metav1.GetOptions{}); err == nil {
		t.Fatalf("a Certificate on an issuer that is not Ready was issued")
	}

	// A Secret whose certificate is not a CA.
	leafKey, _ := newKey("ECDSA", 256)
	leaf, err := signLeaf(leafRequest{commonName: "leaf", validity: time.Hour, pub: leafKey.Public()}, nil, leafKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := encodeKeyAs(leafKey, "")
	if _, err := c.kube.CoreV1().Secrets("openshift-ingress").Create(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "not-a-ca"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": certPEM(leaf), "tls.key": keyPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.apply(t, gvrIssuer, map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
		"metadata": map[string]any{"name": "leaf-as-ca", "namespace": "openshift-ingress"},
		"spec":     map[string]any{"ca": map[string]any{"secretName": "not-a-ca"}},
	})
	c.waitFor(t, gvrIssuer, "openshift-ingress", "leaf-as-ca", time.Minute, "ErrInvalidKeyPair", func(u *unstructured.Unstructured) bool {
		cd := findCondition(u, "Ready")
		return cd != nil && cd["status"] == "False" && cd["reason"] == "ErrInvalidKeyPair" &&
			cd["message"] == "Error getting keypair for CA issuer: certificate is not a CA"
	})

	// Bootstrap the CA from a SelfSigned ClusterIssuer (cert-manager's
	// documented CA bootstrap).
	c.apply(t, gvrClusterIssuer, map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "ClusterIssuer",
		"metadata": map[string]any{"name": "selfsigned"},
		"spec":     map[string]any{"selfSigned": map[string]any{}},
	})
	c.waitFor(t, gvrClusterIssuer, "", "selfsigned", time.Minute, "IsReady", hasCondition("Ready", "True", "IsReady"))
	c.apply(t, gvrCertificate, certObj("cert-manager", "internal-ca-root", "internal-ca-root", "ClusterIssuer", "selfsigned",
		map[string]any{"isCA": true, "commonName": "internal-ca", "privateKey": map[string]any{"algorithm": "ECDSA", "size": int64(256)}}))
	c.waitFor(t, gvrCertificate, "cert-manager", "internal-ca-root", time.Minute, "Ready", hasCondition("Ready", "True", "Ready"))
	root, err := c.kube.CoreV1().Secrets("cert-manager").Get(t.Context(), "internal-ca-root", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pemType(t, root.Data["tls.key"]); got != "EC PRIVATE KEY" {
		t.Errorf("ECDSA key encoded as %q, want SEC 1 (EC PRIVATE KEY), cert-manager's default PKCS1 encoding", got)
	}
	if string(root.Data["ca.crt"]) != string(root.Data["tls.crt"]) {
		t.Errorf("SelfSigned Secret: ca.crt is not the certificate itself")
	}
	rootCert, err := parseLeaf(root.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	if !rootCert.IsCA || !rootCert.BasicConstraintsValid || rootCert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("isCA Certificate: IsCA %v BasicConstraintsValid %v KeyUsage %v, want a CA", rootCert.IsCA, rootCert.BasicConstraintsValid, rootCert.KeyUsage)
	}
	c.waitFor(t, gvrClusterIssuer, "", "internal-ca", time.Minute, "KeyPairVerified", func(u *unstructured.Unstructured) bool {
		cd := findCondition(u, "Ready")
		return cd != nil && cd["status"] == "True" && cd["reason"] == "KeyPairVerified" && cd["message"] == "Signing CA verified"
	})
	// Now the waiting Certificate is issued, signed by the CA.
	c.waitFor(t, gvrCertificate, "openshift-ingress", "on-internal", time.Minute, "Ready", hasCondition("Ready", "True", "Ready"))
	tlsSecret, err := c.kube.CoreV1().Secrets("openshift-ingress").Get(t.Context(), "on-internal-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(tlsSecret.Data["ca.crt"]) != string(root.Data["tls.crt"]) {
		t.Errorf("ca.crt of a CA-issued Secret is not the issuing CA")
	}
	leafCert, err := parseLeaf(tlsSecret.Data["tls.crt"])
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(rootCert)
	if _, err := leafCert.Verify(x509.VerifyOptions{Roots: pool, DNSName: "svc.example.com"}); err != nil {
		t.Errorf("issued certificate does not verify against the issuer's CA: %v", err)
	}
	if leafCert.IsCA {
		t.Errorf("a Certificate without isCA was issued as a CA")
	}
	if got := pemType(t, tlsSecret.Data["tls.key"]); got != "RSA PRIVATE KEY" {
		t.Errorf("RSA key encoded as %q, want PKCS#1 (RSA PRIVATE KEY)", got)
	}
}

// TestCertManagerIssuance: while issuing, the temporary private-key Secret
// and status.nextPrivateKeySecretName exist and go once issued
// (keymanager); the CertificateRequest carries the controller's identity,
// isCA, the Certificate's labels and copied annotations
// (requestmanager), and is Issued before the Secret is written (issuing);
// PKCS8 encoding is honoured (issue 18).
func TestCertManagerIssuance(t *testing.T) {
	c := startCluster(t, Options{Delay: map[string]time.Duration{CertManager: 3 * time.Second}})
	c.apply(t, gvrIssuer, map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "Issuer",
		"metadata": map[string]any{"name": "selfsigned", "namespace": "openshift-ingress"},
		"spec":     map[string]any{"selfSigned": map[string]any{}},
	})
	c.waitFor(t, gvrIssuer, "openshift-ingress", "selfsigned", time.Minute, "IsReady", hasCondition("Ready", "True", "IsReady"))

	// Watch the Secret: when it appears, the request must already be Issued.
	w, err := c.kube.CoreV1().Secrets("openshift-ingress").Watch(t.Context(), metav1.ListOptions{FieldSelector: "metadata.name=labelled-tls"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	obj := certObj("openshift-ingress", "labelled", "labelled-tls", "Issuer", "selfsigned", map[string]any{
		"dnsNames": []any{"a.example.com"}, "isCA": true,
		"privateKey": map[string]any{"encoding": "PKCS8"},
	})
	obj["metadata"].(map[string]any)["labels"] = map[string]any{"team": "platform"}
	obj["metadata"].(map[string]any)["annotations"] = map[string]any{
		"example.com/owner": "maas", "kubectl.kubernetes.io/last-applied-configuration": "{}",
	}
	c.apply(t, gvrCertificate, obj)
	cert := c.waitFor(t, gvrCertificate, "openshift-ingress", "labelled", time.Minute, "Issuing with a next key",
		func(u *unstructured.Unstructured) bool {
			return conditionTrue(u, "Issuing") && str(u, "status", "nextPrivateKeySecretName") != ""
		})
	next := str(cert, "status", "nextPrivateKeySecretName")
	cr := c.waitFor(t, gvrCertificateRequest, "openshift-ingress", "labelled-1", time.Minute, "exists", exists)
	spec := mapOf(cr, "spec")
	groups, _, _ := unstructured.NestedStringSlice(cr.Object, "spec", "groups")
	slices.Sort(groups)
	if spec["username"] != "system:serviceaccount:cert-manager:cert-manager" ||
		!slices.Equal(groups, []string{"system:authenticated", "system:serviceaccounts", "system:serviceaccounts:cert-manager"}) {
		t.Errorf("CertificateRequest identity username %v groups %v, want the cert-manager controller's ServiceAccount", spec["username"], groups)
	}
	// The uid and extra are the ones the API server authenticated: the
	// ServiceAccount's UID and the token's credential id.
	sa, err := c.kube.CoreV1().ServiceAccounts("cert-manager").Get(t.Context(), "cert-manager", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the controller's ServiceAccount: %v", err)
	}
	if spec["uid"] != string(sa.UID) {
		t.Errorf("CertificateRequest spec.uid %v, want the ServiceAccount's UID %s", spec["uid"], sa.UID)
	}
	if cred, _, _ := unstructured.NestedStringSlice(cr.Object, "spec", "extra", "authentication.kubernetes.io/credential-id"); len(cred) != 1 || !strings.HasPrefix(cred[0], "JTI=") {
		t.Errorf("CertificateRequest spec.extra %v, want the token's authentication.kubernetes.io/credential-id", spec["extra"])
	}
	if spec["isCA"] != true {
		t.Errorf("CertificateRequest spec.isCA %v, want true", spec["isCA"])
	}
	if cr.GetLabels()["team"] != "platform" {
		t.Errorf("CertificateRequest labels %v, want the Certificate's", cr.GetLabels())
	}
	ann := cr.GetAnnotations()
	if ann["example.com/owner"] != "maas" || ann["kubectl.kubernetes.io/last-applied-configuration"] != "" || ann["cert-manager.io/private-key-secret-name"] != next {
		t.Errorf("CertificateRequest annotations %v: want example.com/owner copied, kubectl.kubernetes.io/ not, private-key-secret-name %s", ann, next)
	}

	deadline := time.After(time.Minute)
	for done := false; !done; {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != kwatch.Added {
				continue
			}
			live, err := c.dyn.Resource(gvrCertificateRequest).Namespace("openshift-ingress").Get(t.Context(), "labelled-1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !hasCondition("Ready", "True", "Issued")(live) || str(live, "status", "certificate") == "" {
				t.Errorf("the Secret was written before the CertificateRequest was Issued (request status %v)", mapOf(live, "status"))
			}
			done = true
		case <-deadline:
			t.Fatal("the Secret was not written within a minute")
		}
	}
	done := c.waitFor(t, gvrCertificate, "openshift-ingress", "labelled", time.Minute, "Ready, next key cleared", func(u *unstructured.Unstructured) bool {
		return hasCondition("Ready", "True", "Ready")(u) && str(u, "status", "nextPrivateKeySecretName") == "" && findCondition(u, "Issuing") == nil
	})
	if rev, _, _ := unstructured.NestedInt64(done.Object, "status", "revision"); rev != 1 {
		t.Errorf("revision %d, want 1", rev)
	}
	c.waitGone(t, gvrSecret, "openshift-ingress", next, time.Minute)
	s, err := c.kube.CoreV1().Secrets("openshift-ingress").Get(t.Context(), "labelled-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := pemType(t, s.Data["tls.key"]); got != "PRIVATE KEY" {
		t.Errorf("encoding PKCS8: key encoded as %q, want PRIVATE KEY", got)
	}
	ca, _ := base64.StdEncoding.DecodeString(str(c.waitFor(t, gvrCertificateRequest, "openshift-ingress", "labelled-1", time.Minute, "Issued", hasCondition("Ready", "True", "Issued")), "status", "ca"))
	if len(ca) == 0 || string(ca) != string(s.Data["ca.crt"]) {
		t.Errorf("Secret ca.crt does not match the request's status.ca")
	}
}

// TestCertManagerRequestIdentity: cert-manager v1.21.1's webhook
// (internal/webhook/admission/certificaterequest/identity/certificaterequest_identity.go)
// records on every CertificateRequest the identity of whoever creates it,
// whatever the creator wrote into spec.username, uid, groups and extra,
// and refuses any later change of it (issue 18).
func TestCertManagerRequestIdentity(t *testing.T) {
	c := startAPIServerOnly(t, Options{})
	me, err := c.kube.AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u := me.Status.UserInfo
	forged := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
		"metadata": map[string]any{"name": "forged", "namespace": "openshift-ingress"},
		"spec": map[string]any{
			"request":   "cHJvYmU=",
			"issuerRef": map[string]any{"name": "letsencrypt-production", "kind": "ClusterIssuer"},
			"username":  "system:serviceaccount:cert-manager:cert-manager",
			"uid":       "forged-uid",
			"groups":    []any{"system:masters"},
			"extra":     map[string]any{"example.com/forged": []any{"yes"}},
		},
	}}
	crs := c.dyn.Resource(gvrCertificateRequest).Namespace("openshift-ingress")
	cr, err := crs.Create(t.Context(), forged, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CertificateRequest: %v", err)
	}
	groups, _, _ := unstructured.NestedStringSlice(cr.Object, "spec", "groups")
	if str(cr, "spec", "username") != u.Username || str(cr, "spec", "uid") != u.UID || !slices.Equal(groups, u.Groups) {
		t.Errorf("CertificateRequest identity username %q uid %q groups %v, want the creator's %q %q %v",
			str(cr, "spec", "username"), str(cr, "spec", "uid"), groups, u.Username, u.UID, u.Groups)
	}
	extra := mapOf(cr, "spec", "extra")
	if _, ok := extra["example.com/forged"]; ok || len(extra) != len(u.Extra) {
		t.Errorf("CertificateRequest spec.extra %v, want the creator's %v", extra, u.Extra)
	}

	for field, value := range map[string]any{
		"username": "system:serviceaccount:cert-manager:cert-manager",
		"uid":      "another-uid",
		"groups":   []any{"system:masters"},
		"extra":    map[string]any{"example.com/forged": []any{"yes"}},
	} {
		changed := cr.DeepCopy()
		if err := unstructured.SetNestedField(changed.Object, value, "spec", field); err != nil {
			t.Fatal(err)
		}
		_, err := crs.Update(t.Context(), changed, metav1.UpdateOptions{})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec."+field) {
			t.Errorf("update of spec.%s: %v, want it refused naming spec.%s", field, err, field)
		}
	}
	// A ServiceAccount's request carries its UID and its token's extra.
	ns := "openshift-ingress"
	sa, err := c.kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "requester"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.kube.RbacV1().Roles(ns).Create(t.Context(), &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "requester"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"cert-manager.io"}, Resources: []string{"certificaterequests"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.kube.RbacV1().RoleBindings(ns).Create(t.Context(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "requester"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "requester"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "requester", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tok, err := c.kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), "requester", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	saCfg := rest.AnonymousClientConfig(c.cfg)
	saCfg.BearerToken = tok.Status.Token
	saMe, err := kubernetes.NewForConfigOrDie(saCfg).AuthenticationV1().SelfSubjectReviews().Create(t.Context(), &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(saMe.Status.UserInfo.Extra) == 0 {
		t.Fatalf("the ServiceAccount token's user info has no extra: %+v", saMe.Status.UserInfo)
	}
	forged.SetName("by-serviceaccount")
	var saCR *unstructured.Unstructured
	if err := wait.PollUntilContextTimeout(t.Context(), 100*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		saCR, err = dynamic.NewForConfigOrDie(saCfg).Resource(gvrCertificateRequest).Namespace(ns).Create(ctx, forged, metav1.CreateOptions{})
		return err == nil, nil // RBAC sees the new binding shortly
	}); err != nil {
		t.Fatalf("create CertificateRequest as ServiceAccount requester: %v", err)
	}
	wantExtra := map[string]any{}
	for k, v := range saMe.Status.UserInfo.Extra {
		l := []any{}
		for _, s := range v {
			l = append(l, s)
		}
		wantExtra[k] = l
	}
	if str(saCR, "spec", "username") != "system:serviceaccount:"+ns+":requester" || str(saCR, "spec", "uid") != string(sa.UID) ||
		!reflect.DeepEqual(mapOf(saCR, "spec", "extra"), wantExtra) {
		t.Errorf("CertificateRequest of ServiceAccount requester: username %q uid %q extra %v, want %q %q %v",
			str(saCR, "spec", "username"), str(saCR, "spec", "uid"), mapOf(saCR, "spec", "extra"), "system:serviceaccount:"+ns+":requester", sa.UID, wantExtra)
	}

	// Anything else may still change (labels here).
	relabelled := cr.DeepCopy()
	relabelled.SetLabels(map[string]string{"team": "platform"})
	if _, err := crs.Update(t.Context(), relabelled, metav1.UpdateOptions{}); err != nil {
		t.Errorf("update of the labels: %v", err)
	}
}
