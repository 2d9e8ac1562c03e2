package steps

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
)

// certManagerSecret is a kubernetes.io/tls Secret as cert-manager v1.21.1
// writes it for a CA issuer (issuing/internal/secret.go): tls.crt the leaf
// (and the intermediate), tls.key in the default PKCS1 encoding (PKCS#1 for
// RSA, SEC 1 for ECDSA) or PKCS#8, ca.crt the root.
func certManagerSecret(t *testing.T, ns, name, host string, leafKey crypto.Signer, encoding string) *corev1.Secret {
	t.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	now := time.Now()
	rootTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "internal-ca"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTpl, rootTpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	interKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	interTpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "internal-ca-intermediate"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	interDER, err := x509.CreateCertificate(rand.Reader, interTpl, root, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	inter, _ := x509.ParseCertificate(interDER)
	leafTpl := &x509.Certificate{SerialNumber: big.NewInt(3), DNSNames: []string{host}, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour)}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTpl, inter, leafKey.Public(), interKey)
	if err != nil {
		t.Fatal(err)
	}
	var keyPEM []byte
	switch k := leafKey.(type) {
	case *rsa.PrivateKey:
		if encoding != "PKCS8" {
			keyPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
		}
	case *ecdsa.PrivateKey:
		if encoding != "PKCS8" {
			der, _ := x509.MarshalECPrivateKey(k)
			keyPEM = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
		}
	}
	if keyPEM == nil {
		der, _ := x509.MarshalPKCS8PrivateKey(leafKey)
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	}
	block := func(der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}) }
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: map[string]string{"cert-manager.io/issuer-kind": "ClusterIssuer"}},
		Type:       corev1.SecretTypeTLS,
		Data: map[string][]byte{
			corev1.TLSCertKey:       append(block(leafDER), block(interDER)...),
			corev1.TLSPrivateKeyKey: keyPEM,
			"ca.crt":                block(rootDER),
		},
	}
}

// TestCheckGatewayCertAcceptsCertManagerShape: the gateway-cert preflight
// check reads a user-supplied Secret cert-manager issued (ca.crt present,
// a chain in tls.crt, PKCS#1/SEC 1/PKCS#8 keys) and judges the leaf only
// (issue 18); a leaf for another host is still refused.
func TestCheckGatewayCertAcceptsCertManagerShape(t *testing.T) {
	const host = "maas.apps.example.com"
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	inv := inventory.Default()
	inv.Gateway.CertIssuer = ""
	g := inv.Gateway
	for _, tc := range []struct {
		name     string
		key      crypto.Signer
		encoding string
		leafHost string
		want     string // substring of a finding; "" = none
	}{
		{"RSA PKCS#1", rsaKey, "", host, ""},
		{"ECDSA SEC 1", ecKey, "", host, ""},
		{"RSA PKCS#8", rsaKey, "PKCS8", host, ""},
		{"other host", ecKey, "", "other.example.com", "does not cover " + host},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := certManagerSecret(t, g.Namespace, g.CertSecret, tc.leafHost, tc.key, tc.encoding)
			e := &Env{Inv: inv, Facts: assets.Facts{Host: host}, Clients: &kube.Clients{Kube: fake.NewClientset(s)}}
			fs, err := checkGatewayCert(t.Context(), e)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want == "" {
				if len(fs) != 0 {
					t.Errorf("findings %v for a Secret cert-manager writes", fs)
				}
				return
			}
			var msgs []string
			for _, f := range fs {
				msgs = append(msgs, f.Message)
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("findings %v, want one containing %q", fs, tc.want)
			}
		})
	}
}
