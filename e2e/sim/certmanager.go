package sim

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"crypto/rand"

	"go.uber.org/zap"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The simulated cert-manager (cert-manager/cert-manager v1.21, CRDs in
// ../shared/crds/cert-manager). Sources: the certificates controllers in
// pkg/controller/certificates/{readiness,issuing,requestmanager} (a missing
// Secret gives Ready=False reason DoesNotExist "Issuing certificate as Secret
// does not exist"; a valid one gives Ready=True reason Ready "Certificate is
// up to date and has not expired"), pkg/controller/certificaterequests
// (Approved by "cert-manager.io"; Pending while the issuer is missing or not
// Ready), and the Secret annotations of pkg/apis/certmanager/v1/types.go.
// Issuers are not simulated: their status comes from the cluster (the
// fixture's ClusterIssuer is Ready as after ACME account registration).
// The issued certificate is a real self-signed X.509 certificate. The
// webhook's admission checks are a ValidatingAdmissionPolicy on the API
// server (certmanager_webhook.go), installed when the simulator starts.
type certManager struct {
	m *manager
	r *reconciler
	// keys holds the private key of each CertificateRequest this process
	// created (by UID), as cert-manager keeps it in a temporary Secret.
	keys sync.Map
}

func registerCertManager(m *manager) {
	c := &certManager{m: m}
	c.r = &reconciler{
		name: "cert-manager/certificate", delayKey: CertManager, primary: gvrCertificate,
		watches: []watch{
			{gvr: gvrClusterIssuer, mapFn: m.allOf(gvrCertificate, false)},
			{gvr: gvrIssuer, mapFn: m.allOf(gvrCertificate, true)},
			{gvr: gvrCertificateRequest, mapFn: ownerKeys("Certificate")},
			{gvr: gvrSecret, mapFn: func(u *unstructured.Unstructured) []key {
				var out []key
				for _, c := range m.list(gvrCertificate, u.GetNamespace()) {
					if str(c, "spec", "secretName") == u.GetName() {
						out = append(out, keyOf(c))
					}
				}
				return out
			}},
		},
		reconcile: c.reconcile,
	}
	m.add(c.r)
}

func (c *certManager) reconcile(ctx context.Context, k key) error {
	m := c.m
	cert := m.get(gvrCertificate, k.Namespace, k.Name)
	if cert == nil || cert.GetDeletionTimestamp() != nil {
		return nil
	}
	gen := cert.GetGeneration()
	old := mapOf(cert, "status")
	revision, _, _ := unstructured.NestedInt64(cert.Object, "status", "revision")
	secretName := str(cert, "spec", "secretName")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")

	// Readiness: the Secret holds a key pair for the requested names.
	secret := m.get(gvrSecret, k.Namespace, secretName)
	leaf, why := validCertSecret(secret, dnsNames)
	if why == "" {
		status := map[string]any{
			"conditions": conditions(old["conditions"],
				cond("Ready", true, "Ready", "Certificate is up to date and has not expired").gen(gen)),
			"notBefore":   timeString(leaf.NotBefore),
			"notAfter":    timeString(leaf.NotAfter),
			"renewalTime": timeString(leaf.NotAfter.Add(-leaf.NotAfter.Sub(leaf.NotBefore) / 3)),
			"revision":    max(revision, 1),
		}
		return m.updateStatus(ctx, gvrCertificate, cert, status)
	}
	reason := "DoesNotExist"
	msg := "Issuing certificate as Secret does not exist"
	if secret != nil {
		reason, msg = "IncorrectCertificate", "Issuing certificate as Secret was previously issued for different names: "+why
	}
	status := map[string]any{}
	if revision > 0 {
		status["revision"] = revision
	}
	status["conditions"] = conditions(old["conditions"],
		cond("Ready", false, reason, msg).gen(gen),
		cond("Issuing", true, reason, msg).gen(gen))
	if err := m.updateStatus(ctx, gvrCertificate, cert, status); err != nil {
		return err
	}
	// The delay stands for the ACME order (challenge, DNS propagation,
	// finalize). cert-manager's requestmanager creates the
	// CertificateRequest at once when issuance starts, and the request
	// stays Ready=False, reason Pending, while the order runs; so the key
	// and the request are made now, and only the signed certificate (the
	// Secret, the request's Issued) waits for the delay.
	left := m.delayLeft(c.r, cert, "issue")
	if left > 0 {
		m.log.Debug("holding issuance", zap.Stringer("key", k), zap.Duration("left", left))
		c.r.queue.AddAfter(k, left)
	}
	return c.issue(ctx, cert, revision+1, dnsNames, left > 0)
}

// validCertSecret checks that s is a TLS Secret whose key pair matches and
// whose leaf covers dnsNames and is within its validity. It returns the leaf,
// or a reason.
func validCertSecret(s *unstructured.Unstructured, dnsNames []string) (*x509.Certificate, string) {
	if s == nil {
		return nil, "missing"
	}
	crt, err1 := secretValue(s, corev1.TLSCertKey)
	key, err2 := secretValue(s, corev1.TLSPrivateKeyKey)
	if err1 != nil || err2 != nil {
		return nil, "missing tls.crt or tls.key"
	}
	if _, err := tls.X509KeyPair([]byte(crt), []byte(key)); err != nil {
		return nil, "invalid key pair"
	}
	leaf, err := parseLeaf([]byte(crt))
	if err != nil {
		return nil, "invalid certificate"
	}
	now := time.Now()
	if now.Before(leaf.NotBefore) || now.After(leaf.NotAfter) {
		return nil, "expired"
	}
	have := slices.Clone(leaf.DNSNames)
	want := slices.Clone(dnsNames)
	slices.Sort(have)
	slices.Sort(want)
	if !slices.Equal(have, want) {
		return nil, fmt.Sprintf("DNS names %v, want %v", have, want)
	}
	return leaf, ""
}

// issue runs one issuance: a CertificateRequest for revision, approved by
// cert-manager, signed once the issuer is Ready, then the Secret. While
// ordering is true the request is only made and reported Pending on its
// order (the delay has not passed).
func (c *certManager) issue(ctx context.Context, cert *unstructured.Unstructured, revision int64, dnsNames []string, ordering bool) error {
	m := c.m
	ns := cert.GetNamespace()
	issuerKind := str(cert, "spec", "issuerRef", "kind")
	if issuerKind == "" {
		issuerKind = "Issuer"
	}
	issuerName := str(cert, "spec", "issuerRef", "name")
	crName := fmt.Sprintf("%s-%d", cert.GetName(), revision)
	cr := m.get(gvrCertificateRequest, ns, crName)
	algorithm := str(cert, "spec", "privateKey", "algorithm")
	size, _, _ := unstructured.NestedInt64(cert.Object, "spec", "privateKey", "size")
	if cr == nil {
		key, err := newKey(algorithm, int(size))
		if err != nil {
			return err
		}
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: str(cert, "spec", "commonName")}, DNSNames: dnsNames,
		}, key)
		if err != nil {
			return fmt.Errorf("certificate %s: csr: %w", keyOf(cert), err)
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
			"metadata": map[string]any{
				"name": crName, "namespace": ns,
				"annotations": map[string]any{
					"cert-manager.io/certificate-name":        cert.GetName(),
					"cert-manager.io/certificate-revision":    strconv.FormatInt(revision, 10),
					"cert-manager.io/private-key-secret-name": cert.GetName() + "-sim-key",
				},
				"ownerReferences": []any{ownerRef(cert, true)},
			},
			"spec": map[string]any{
				"request":   base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
				"issuerRef": map[string]any{"name": issuerName, "kind": issuerKind, "group": "cert-manager.io"},
				"usages":    []any{"digital signature", "key encipherment"},
			},
		}}
		created, err := m.create(ctx, gvrCertificateRequest, obj)
		if err != nil {
			return err
		}
		c.keys.Store(string(created.GetUID()), key)
		cr = created
	}

	approved := cond("Approved", true, "cert-manager.io", "Certificate request has been approved by cert-manager.io")
	var issuer *unstructured.Unstructured
	if issuerKind == "ClusterIssuer" {
		issuer = m.get(gvrClusterIssuer, "", issuerName)
	} else {
		issuer = m.get(gvrIssuer, ns, issuerName)
	}
	pending := func(msg string) error {
		return m.updateStatus(ctx, gvrCertificateRequest, cr, map[string]any{
			"conditions": conditions(statusConditions(cr), approved, cond("Ready", false, "Pending", msg)),
		})
	}
	switch {
	case issuer == nil:
		return pending(fmt.Sprintf("Referenced %q not found: %s.cert-manager.io %q not found", issuerKind, strings.ToLower(issuerKind), issuerName))
	case !conditionTrue(issuer, "Ready"):
		return pending("Referenced issuer does not have a Ready status condition")
	case m.opts.Faults.CertificatePending:
		return pending(fmt.Sprintf("Waiting on certificate issuance from order %s/%s-1: \"pending\": Waiting for DNS-01 challenge propagation: DNS record for %q not yet propagated", ns, crName, firstOr(dnsNames, "")))
	case ordering:
		return pending(fmt.Sprintf("Waiting on certificate issuance from order %s/%s-1: \"pending\"", ns, crName))
	}
	if str(cr, "status", "certificate") != "" {
		return nil // issued; the Secret write below is retried from the Secret watch
	}
	keyAny, ok := c.keys.Load(string(cr.GetUID()))
	if !ok {
		// The key of a request created by an earlier process is gone:
		// start a new revision, as cert-manager does for a lost key.
		return m.dyn.Resource(gvrCertificateRequest).Namespace(ns).Delete(ctx, crName, metav1.DeleteOptions{})
	}
	kp, err := issue(keyAny.(crypto.Signer), str(cert, "spec", "commonName"), dnsNames, certDuration(cert), nil, nil)
	if err != nil {
		return err
	}
	if err := c.writeSecret(ctx, cert, issuerKind, issuerName, dnsNames, kp); err != nil {
		return err
	}
	return m.updateStatus(ctx, gvrCertificateRequest, cr, map[string]any{
		"conditions":  conditions(statusConditions(cr), approved, cond("Ready", true, "Issued", "Certificate fetched from issuer successfully")),
		"certificate": base64.StdEncoding.EncodeToString(kp.CertPEM),
	})
}

func firstOr(l []string, def string) string {
	if len(l) == 0 {
		return def
	}
	return l[0]
}

// certDuration is spec.duration, cert-manager's default 90 days (2160h) when unset.
func certDuration(cert *unstructured.Unstructured) time.Duration {
	if d, err := time.ParseDuration(str(cert, "spec", "duration")); err == nil && d > 0 {
		return d
	}
	return 2160 * time.Hour
}

func (c *certManager) writeSecret(ctx context.Context, cert *unstructured.Unstructured, issuerKind, issuerName string, dnsNames []string, kp *keyPair) error {
	ns, name := cert.GetNamespace(), str(cert, "spec", "secretName")
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{"controller.cert-manager.io/fao": "true"},
			Annotations: map[string]string{
				"cert-manager.io/certificate-name": cert.GetName(),
				"cert-manager.io/issuer-name":      issuerName,
				"cert-manager.io/issuer-kind":      issuerKind,
				"cert-manager.io/issuer-group":     "cert-manager.io",
				"cert-manager.io/common-name":      str(cert, "spec", "commonName"),
				"cert-manager.io/alt-names":        strings.Join(dnsNames, ","),
				"cert-manager.io/ip-sans":          "",
				"cert-manager.io/uri-sans":         "",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: kp.CertPEM, corev1.TLSPrivateKeyKey: kp.KeyPEM},
	}
	secrets := c.m.kube.CoreV1().Secrets(ns)
	_, err := secrets.Create(ctx, s, metaCreate)
	if apierrors.IsAlreadyExists(err) {
		live, gerr := secrets.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return fmt.Errorf("get secret %s/%s: %w", ns, name, gerr)
		}
		if live.Data == nil {
			live.Data = map[string][]byte{}
		}
		live.Data[corev1.TLSCertKey], live.Data[corev1.TLSPrivateKeyKey] = kp.CertPEM, kp.KeyPEM
		if live.Annotations == nil {
			live.Annotations = map[string]string{}
		}
		for k, v := range s.Annotations {
			live.Annotations[k] = v
		}
		_, err = secrets.Update(ctx, live, metaUpdate)
	}
	if err != nil {
		return fmt.Errorf("write secret %s/%s: %w", ns, name, err)
	}
	return nil
}
