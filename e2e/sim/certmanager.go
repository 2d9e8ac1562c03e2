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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// The simulated cert-manager (cert-manager/cert-manager v1.21.1, CRDs in
// ../shared/crds/cert-manager), measured side by side with the real one
// (issue 18). Sources:
//   - pkg/controller/issuers and pkg/issuer/{ca,selfsigned}/setup.go:
//     every CA and SelfSigned Issuer and ClusterIssuer gets a Ready
//     condition. A CA issuer is Ready=True KeyPairVerified "Signing CA
//     verified" when its Secret (for a ClusterIssuer in the cluster
//     resource namespace, cert-manager) holds tls.crt and tls.key and the
//     certificate is a CA; Ready=False ErrGetKeyPair "Error getting
//     keypair for CA issuer: <cause>" when the Secret or a key of it is
//     missing or does not decode, ErrInvalidKeyPair when the certificate
//     is not a CA. SelfSigned is Ready=True IsReady. ACME, Vault and
//     Venafi issuers are not simulated: their status is what the cluster
//     holds (the fixture's ClusterIssuer is Ready as after ACME account
//     registration), and one without Ready issues nothing.
//   - pkg/controller/certificates/readiness: a missing Secret gives
//     Ready=False DoesNotExist "Issuing certificate as Secret does not
//     exist"; a valid one Ready=True Ready "Certificate is up to date and
//     has not expired".
//   - pkg/controller/certificates/keymanager/keymanager_controller.go:
//     while Issuing=True a temporary Secret <cert>-<random> (label
//     cert-manager.io/next-private-key=true, controlled by the
//     Certificate, tls.key PKCS#8) holds the next private key and
//     status.nextPrivateKeySecretName names it; both go once Issuing is
//     over. With rotationPolicy Never (the default) the key of the
//     existing Secret is reused when it still matches spec.privateKey.
//   - pkg/controller/certificates/requestmanager/requestmanager_controller.go:
//     the CertificateRequest <cert>-<revision> (StableCertificateRequestName)
//     carries the Certificate's labels, its annotations but those under
//     kubectl.kubernetes.io/, fluxcd.io/ and argocd.argoproj.io/ (the
//     default copiedAnnotationPrefixes), spec.isCA, duration, usages and
//     issuerRef as written; it is created with the controller's own
//     credentials, the ServiceAccount cert-manager/cert-manager, and the
//     webhook's identity plugin
//     (internal/webhook/admission/certificaterequest/identity) writes
//     spec.username, uid, groups and extra from the creator's user info
//     (certmanager_identity.go, certmanager_webhook.go).
//   - pkg/controller/certificaterequests: Approved by cert-manager.io;
//     Pending while the issuer is missing or not Ready; then Ready=True
//     Issued with status.certificate and status.ca. Only after that does
//     pkg/controller/certificates/issuing copy them into the Secret
//     (tls.crt, tls.key in spec.privateKey.encoding, PKCS#1/SEC 1 by
//     default, and ca.crt when the issuer returned a CA).
//   - pkg/issuer/ca, pkg/issuer/selfsigned, pki.SignCertificate: a CA
//     issuer signs with its CA key (tls.crt is the leaf and any
//     intermediates, ca.crt the root), SelfSigned with the certificate's
//     own key (ca.crt is the certificate itself), isCA sets BasicConstraints
//     CA:TRUE. The ACME issuer's certificate comes from a simulated ACME
//     chain (leaf plus intermediate, no ca.crt, as Let's Encrypt returns).
//
// The webhook's admission checks and its identity mutation are a
// ValidatingAdmissionPolicy and a MutatingAdmissionPolicy on the API server
// (certmanager_webhook.go), installed when the simulator starts.
type certManager struct {
	m *manager
	r *reconciler
	// nextKeys holds, per Certificate UID, the name of the temporary
	// private-key Secret this process created, until the cache shows it.
	nextKeys sync.Map
	acmeOnce sync.Once
	acme     *simCA // the ACME server's intermediate
	acmeErr  error

	// saMu guards saDyn, the client authenticated as the controller's
	// ServiceAccount, and saRenew, when its token is renewed
	// (certmanager_identity.go).
	saMu    sync.Mutex
	saDyn   dynamic.Interface
	saRenew time.Time
}

const (
	// clusterResourceNamespace is cert-manager's --cluster-resource-namespace
	// (the operand namespace of the cert-manager Operator for Red Hat OpenShift).
	clusterResourceNamespace = "cert-manager"
	nextPrivateKeyLabel      = "cert-manager.io/next-private-key"
	certManagerSA            = "cert-manager"
)

func registerCertManager(m *manager) {
	c := &certManager{m: m}
	certsOfSecret := ownerKeys("Certificate")
	c.r = &reconciler{
		name: "cert-manager/certificate", delayKey: CertManager, primary: gvrCertificate,
		watches: []watch{
			{gvr: gvrClusterIssuer, mapFn: m.allOf(gvrCertificate, false)},
			{gvr: gvrIssuer, mapFn: m.allOf(gvrCertificate, true)},
			{gvr: gvrCertificateRequest, mapFn: ownerKeys("Certificate")},
			{gvr: gvrSecret, mapFn: func(u *unstructured.Unstructured) []key {
				out := certsOfSecret(u)
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
	for _, g := range []schema.GroupVersionResource{gvrIssuer, gvrClusterIssuer} {
		g := g
		m.add(&reconciler{
			name: "cert-manager/" + strings.TrimSuffix(g.Resource, "s"), delayKey: CertManager, primary: g,
			watches: []watch{{gvr: gvrSecret, mapFn: func(u *unstructured.Unstructured) []key {
				ns := u.GetNamespace()
				if g == gvrClusterIssuer {
					if ns != clusterResourceNamespace {
						return nil
					}
					ns = ""
				}
				var out []key
				for _, iss := range m.list(g, ns) {
					if str(iss, "spec", "ca", "secretName") == u.GetName() {
						out = append(out, keyOf(iss))
					}
				}
				return out
			}}},
			reconcile: func(ctx context.Context, k key) error { return c.reconcileIssuer(ctx, g, k) },
		})
	}
}

// reconcileIssuer writes a CA or SelfSigned issuer's Ready condition
// (pkg/controller/issuers/sync.go calling the issuer's Setup).
func (c *certManager) reconcileIssuer(ctx context.Context, g schema.GroupVersionResource, k key) error {
	m := c.m
	iss := m.get(g, k.Namespace, k.Name)
	if iss == nil || iss.GetDeletionTimestamp() != nil {
		return nil
	}
	var ready condition
	switch spec := mapOf(iss, "spec"); {
	case spec["ca"] != nil:
		ns := k.Namespace
		if g == gvrClusterIssuer {
			ns = clusterResourceNamespace
		}
		_, _, reason, msg := c.loadCA(ns, str(iss, "spec", "ca", "secretName"))
		ready = cond("Ready", reason == "KeyPairVerified", reason, msg)
	case spec["selfSigned"] != nil:
		ready = cond("Ready", true, "IsReady", "")
	default:
		return nil // ACME, Vault, Venafi: not simulated
	}
	status := map[string]any{}
	for k, v := range mapOf(iss, "status") {
		status[k] = v
	}
	status["conditions"] = conditions(statusConditions(iss), ready.gen(iss.GetGeneration()))
	return m.updateStatus(ctx, g, iss, status)
}

// loadCA reads a CA issuer's key pair from Secret ns/name as
// pkg/issuer/ca/setup.go does (kube.SecretTLSCert, kube.SecretTLSKey). It
// returns the chain and key, and the Ready reason and message.
func (c *certManager) loadCA(ns, name string) ([]*x509.Certificate, crypto.Signer, string, string) {
	const prefix = "Error getting keypair for CA issuer: "
	s := c.m.get(gvrSecret, ns, name)
	if s == nil {
		return nil, nil, "ErrGetKeyPair", prefix + fmt.Sprintf("secret %q not found", name)
	}
	crt, err := secretValue(s, corev1.TLSCertKey)
	if err != nil {
		return nil, nil, "ErrGetKeyPair", prefix + fmt.Sprintf("no data for %q in secret '%s/%s'", corev1.TLSCertKey, ns, name)
	}
	chain, err := parseChain([]byte(crt))
	if err != nil {
		return nil, nil, "ErrGetKeyPair", prefix + err.Error()
	}
	keyPEM, err := secretValue(s, corev1.TLSPrivateKeyKey)
	if err != nil {
		return nil, nil, "ErrGetKeyPair", prefix + fmt.Sprintf("no data for %q in secret '%s/%s'", corev1.TLSPrivateKeyKey, ns, name)
	}
	key, err := decodeKey([]byte(keyPEM))
	if err != nil {
		return nil, nil, "ErrGetKeyPair", prefix + err.Error()
	}
	if !chain[0].IsCA {
		return nil, nil, "ErrInvalidKeyPair", prefix + "certificate is not a CA"
	}
	return chain, key, "KeyPairVerified", "Signing CA verified"
}

func (c *certManager) reconcile(ctx context.Context, k key) error {
	m := c.m
	cert := m.fresh(gvrCertificate, m.get(gvrCertificate, k.Namespace, k.Name))
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
			"revision":    max(revision, c.issuedRevision(cert), 1),
		}
		if old["nextPrivateKeySecretName"] != nil {
			status["nextPrivateKeySecretName"] = nil // cleared by the keymanager
		}
		if err := m.updateStatus(ctx, gvrCertificate, cert, status); err != nil {
			return err
		}
		return c.deleteNextKeys(ctx, cert)
	}
	reason := "DoesNotExist"
	msg := "Issuing certificate as Secret does not exist"
	if secret != nil {
		reason, msg = "IncorrectCertificate", "Issuing certificate as Secret was previously issued for different names: "+why
	}
	keyName, nextKey, err := c.nextKey(ctx, cert, secret)
	if err != nil {
		return err
	}
	status := map[string]any{"nextPrivateKeySecretName": keyName}
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
	// request's Issued, then the Secret) waits for the delay.
	left := m.delayLeft(c.r, cert, "issue")
	if left > 0 {
		m.log.Debug("holding issuance", zap.Stringer("key", k), zap.Duration("left", left))
		c.r.queue.AddAfter(k, left)
	}
	return c.issue(ctx, cert, revision+1, dnsNames, keyName, nextKey, left > 0)
}

// issuedRevision is the highest revision of cert's CertificateRequests that
// are Ready (the issuing controller sets status.revision from it).
func (c *certManager) issuedRevision(cert *unstructured.Unstructured) int64 {
	var rev int64
	for _, cr := range c.m.list(gvrCertificateRequest, cert.GetNamespace()) {
		if !ownedBy(cr, cert.GetUID()) || !conditionTrue(cr, "Ready") {
			continue
		}
		if n, err := strconv.ParseInt(cr.GetAnnotations()["cert-manager.io/certificate-revision"], 10, 64); err == nil {
			rev = max(rev, n)
		}
	}
	return rev
}

// nextKey returns the temporary private-key Secret of cert and its key,
// creating it when there is none (keymanager).
func (c *certManager) nextKey(ctx context.Context, cert *unstructured.Unstructured, secret *unstructured.Unstructured) (string, crypto.Signer, error) {
	ns, uid := cert.GetNamespace(), cert.GetUID()
	algorithm := str(cert, "spec", "privateKey", "algorithm")
	size64, _, _ := unstructured.NestedInt64(cert.Object, "spec", "privateKey", "size")
	size := int(size64)
	secrets := c.m.kube.CoreV1().Secrets(ns)
	name := str(cert, "status", "nextPrivateKeySecretName")
	if name == "" {
		if v, ok := c.nextKeys.Load(uid); ok {
			name = v.(string)
		}
	}
	if name != "" {
		s, err := secrets.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return "", nil, fmt.Errorf("get secret %s/%s: %w", ns, name, err)
		case metav1.IsControlledBy(s, &metav1.ObjectMeta{UID: uid}):
			if k, err := decodeKey(s.Data[corev1.TLSPrivateKeyKey]); err == nil && keyMatches(k, algorithm, size) {
				return name, k, nil
			}
			// no usable key: the keymanager deletes it and makes a new one
			if err := secrets.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return "", nil, fmt.Errorf("delete secret %s/%s: %w", ns, name, err)
			}
		}
	}
	var key crypto.Signer
	if str(cert, "spec", "privateKey", "rotationPolicy") != "Always" && secret != nil {
		if pemKey, err := secretValue(secret, corev1.TLSPrivateKeyKey); err == nil {
			if k, err := decodeKey([]byte(pemKey)); err == nil && keyMatches(k, algorithm, size) {
				key = k
			}
		}
	}
	if key == nil {
		k, err := newKey(algorithm, size)
		if err != nil {
			return "", nil, err
		}
		key = k
	}
	pk, err := encodeKey(key) // the keymanager stores PKCS#8
	if err != nil {
		return "", nil, err
	}
	yes := true
	s, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: cert.GetName() + "-", Namespace: ns,
			Labels: map[string]string{nextPrivateKeyLabel: "true", "controller.cert-manager.io/fao": "true"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "cert-manager.io/v1", Kind: "Certificate", Name: cert.GetName(), UID: uid,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Data: map[string][]byte{corev1.TLSPrivateKeyKey: pk},
	}, metaCreate)
	if err != nil {
		return "", nil, fmt.Errorf("create private key secret for certificate %s: %w", keyOf(cert), err)
	}
	c.nextKeys.Store(uid, s.Name)
	c.m.log.Info("created", zap.String("resource", "secrets"), zap.String("namespace", ns), zap.String("name", s.Name))
	return s.Name, key, nil
}

// deleteNextKeys removes cert's temporary private-key Secrets once issuance
// is over (keymanager).
func (c *certManager) deleteNextKeys(ctx context.Context, cert *unstructured.Unstructured) error {
	ns, uid := cert.GetNamespace(), cert.GetUID()
	var names []string
	if v, ok := c.nextKeys.Load(uid); ok {
		names = append(names, v.(string))
	}
	for _, s := range c.m.list(gvrSecret, ns) {
		if s.GetLabels()[nextPrivateKeyLabel] == "true" && ownedBy(s, uid) && !slices.Contains(names, s.GetName()) {
			names = append(names, s.GetName())
		}
	}
	for _, n := range names {
		if err := c.m.kube.CoreV1().Secrets(ns).Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete secret %s/%s: %w", ns, n, err)
		}
	}
	c.nextKeys.Delete(uid)
	return nil
}

// copiedAnnotations are the Certificate's annotations cert-manager copies
// to the CertificateRequest (defaultCopiedAnnotationPrefixes: all but
// kubectl.kubernetes.io/, fluxcd.io/, argocd.argoproj.io/).
func copiedAnnotations(in map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range in {
		if strings.HasPrefix(k, "kubectl.kubernetes.io/") || strings.HasPrefix(k, "fluxcd.io/") || strings.HasPrefix(k, "argocd.argoproj.io/") {
			continue
		}
		out[k] = v
	}
	return out
}

// issue runs one issuance: a CertificateRequest for revision signed by the
// key of the temporary Secret keyName, approved by cert-manager, signed once
// the issuer is Ready and marked Issued; on a later pass (the request's
// watch event) the issuing controller writes the Secret. While ordering is
// true the request is only made and reported Pending on its order (the
// delay has not passed).
func (c *certManager) issue(ctx context.Context, cert *unstructured.Unstructured, revision int64, dnsNames []string, keyName string, key crypto.Signer, ordering bool) error {
	m := c.m
	ns := cert.GetNamespace()
	issuerRef := mapOf(cert, "spec", "issuerRef")
	issuerKind := str(cert, "spec", "issuerRef", "kind")
	if issuerKind == "" {
		issuerKind = "Issuer"
	}
	issuerName := str(cert, "spec", "issuerRef", "name")
	crName := fmt.Sprintf("%s-%d", cert.GetName(), revision)
	cr := m.fresh(gvrCertificateRequest, m.get(gvrCertificateRequest, ns, crName))
	if cr != nil && cr.GetAnnotations()["cert-manager.io/private-key-secret-name"] != keyName {
		// made with another key: the requestmanager deletes it and starts over
		return m.dyn.Resource(gvrCertificateRequest).Namespace(ns).Delete(ctx, crName, metav1.DeleteOptions{})
	}
	if cr == nil {
		csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
			Subject: pkix.Name{CommonName: str(cert, "spec", "commonName")}, DNSNames: dnsNames,
		}, key)
		if err != nil {
			return fmt.Errorf("certificate %s: csr: %w", keyOf(cert), err)
		}
		annotations := copiedAnnotations(cert.GetAnnotations())
		annotations["cert-manager.io/certificate-name"] = cert.GetName()
		annotations["cert-manager.io/certificate-revision"] = strconv.FormatInt(revision, 10)
		annotations["cert-manager.io/private-key-secret-name"] = keyName
		// No identity here: admission writes the creator's (the
		// controller's ServiceAccount, whose client creates it below).
		spec := map[string]any{
			"request":   base64.StdEncoding.EncodeToString(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr})),
			"issuerRef": issuerRef,
		}
		if isCA, _, _ := unstructured.NestedBool(cert.Object, "spec", "isCA"); isCA {
			spec["isCA"] = true
		}
		if d := str(cert, "spec", "duration"); d != "" {
			spec["duration"] = d
		}
		if u, _, _ := unstructured.NestedSlice(cert.Object, "spec", "usages"); len(u) > 0 {
			spec["usages"] = u
		}
		meta := map[string]any{
			"name": crName, "namespace": ns,
			"annotations":     annotations,
			"ownerReferences": []any{ownerRef(cert, true)},
		}
		if l := cert.GetLabels(); len(l) > 0 {
			labels := map[string]any{}
			for k, v := range l {
				labels[k] = v
			}
			meta["labels"] = labels
		}
		created, err := c.createRequest(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "cert-manager.io/v1", "kind": "CertificateRequest",
			"metadata": meta, "spec": spec,
		}})
		if err != nil {
			return err
		}
		cr = created
	}

	if enc := str(cr, "status", "certificate"); enc != "" {
		// Issued: the issuing controller copies the request's certificate
		// and CA with the next private key into the Secret.
		chain, err := base64.StdEncoding.DecodeString(enc)
		if err != nil {
			return fmt.Errorf("certificaterequest %s/%s: status.certificate: %w", ns, crName, err)
		}
		ca, _ := base64.StdEncoding.DecodeString(str(cr, "status", "ca"))
		keyPEM, err := encodeKeyAs(key, str(cert, "spec", "privateKey", "encoding"))
		if err != nil {
			return err
		}
		return c.writeSecret(ctx, cert, issuerRef, dnsNames, chain, keyPEM, ca)
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
	chain, ca, wait, err := c.sign(cert, issuer, issuerKind, key, dnsNames)
	if err != nil {
		return err
	}
	if wait != "" {
		return pending(wait)
	}
	status := map[string]any{
		"conditions":  conditions(statusConditions(cr), approved, cond("Ready", true, "Issued", "Certificate fetched from issuer successfully")),
		"certificate": base64.StdEncoding.EncodeToString(chain),
	}
	if len(ca) > 0 {
		status["ca"] = base64.StdEncoding.EncodeToString(ca)
	}
	// The request is Issued first; the Secret follows from its watch event.
	return m.updateStatus(ctx, gvrCertificateRequest, cr, status)
}

// sign signs cert's request with issuer. It returns the chain (tls.crt),
// the CA (ca.crt, empty for ACME), or a reason the request stays Pending.
func (c *certManager) sign(cert, issuer *unstructured.Unstructured, issuerKind string, key crypto.Signer, dnsNames []string) ([]byte, []byte, string, error) {
	isCA, _, _ := unstructured.NestedBool(cert.Object, "spec", "isCA")
	usages, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "usages")
	req := leafRequest{
		commonName: str(cert, "spec", "commonName"), dnsNames: dnsNames, validity: certDuration(cert),
		isCA: isCA, usages: usages, pub: key.Public(),
	}
	switch spec := mapOf(issuer, "spec"); {
	case spec["ca"] != nil:
		ns := cert.GetNamespace()
		if issuerKind == "ClusterIssuer" {
			ns = clusterResourceNamespace
		}
		caChain, caKey, reason, msg := c.loadCA(ns, str(issuer, "spec", "ca", "secretName"))
		if reason != "KeyPairVerified" {
			return nil, nil, msg, nil
		}
		leaf, err := signLeaf(req, caChain[0], caKey)
		if err != nil {
			return nil, nil, "", err
		}
		// pki.ParseSingleCertificateChain: a self-signed root is the CA
		// and not part of the chain.
		chain, root := append([]*x509.Certificate{leaf}, caChain...), caChain[len(caChain)-1]
		if root.CheckSignatureFrom(root) == nil {
			chain = chain[:len(chain)-1]
		}
		return certPEM(chain...), certPEM(root), "", nil
	case spec["selfSigned"] != nil:
		leaf, err := signLeaf(req, nil, key)
		if err != nil {
			return nil, nil, "", err
		}
		return certPEM(leaf), certPEM(leaf), "", nil
	default:
		c.acmeOnce.Do(func() {
			root, err := newSimCA("(SIM) ACME Root X1", nil)
			if err == nil {
				c.acme, err = newSimCA("(SIM) ACME R1", root)
			}
			c.acmeErr = err
		})
		if c.acmeErr != nil {
			return nil, nil, "", c.acmeErr
		}
		req.isCA = false // an ACME CA never issues a CA certificate
		req.usages = []string{"digital signature", "key encipherment", "server auth"}
		leaf, err := signLeaf(req, c.acme.cert, c.acme.key)
		if err != nil {
			return nil, nil, "", err
		}
		return certPEM(leaf, c.acme.cert), nil, "", nil
	}
}

// writeSecret writes the issued key pair to spec.secretName with the
// annotations of pkg/apis/certmanager/v1/types.go
// (issuing/internal/secret.go).
func (c *certManager) writeSecret(ctx context.Context, cert *unstructured.Unstructured, issuerRef map[string]any, dnsNames []string, chain, keyPEM, ca []byte) error {
	ns, name := cert.GetNamespace(), str(cert, "spec", "secretName")
	kind, _ := issuerRef["kind"].(string)
	if kind == "" {
		kind = "Issuer"
	}
	iname, _ := issuerRef["name"].(string)
	group, _ := issuerRef["group"].(string)
	data := map[string][]byte{corev1.TLSCertKey: chain, corev1.TLSPrivateKeyKey: keyPEM}
	if len(ca) > 0 {
		data["ca.crt"] = ca
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{"controller.cert-manager.io/fao": "true"},
			Annotations: map[string]string{
				"cert-manager.io/certificate-name": cert.GetName(),
				"cert-manager.io/issuer-name":      iname,
				"cert-manager.io/issuer-kind":      kind,
				"cert-manager.io/issuer-group":     group,
				"cert-manager.io/common-name":      str(cert, "spec", "commonName"),
				"cert-manager.io/alt-names":        strings.Join(dnsNames, ","),
				"cert-manager.io/ip-sans":          "",
				"cert-manager.io/uri-sans":         "",
			},
		},
		Type: corev1.SecretTypeTLS,
		Data: data,
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
		delete(live.Data, "ca.crt")
		for k, v := range data {
			live.Data[k] = v
		}
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
