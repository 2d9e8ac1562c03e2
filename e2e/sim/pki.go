package sim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"time"
)

// keyPair is a PEM certificate with its PEM private key.
type keyPair struct {
	CertPEM, KeyPEM []byte
	Cert            *x509.Certificate
}

// newKey generates a private key. algorithm is cert-manager's
// spec.privateKey.algorithm ("RSA" default, "ECDSA"); size its bits.
func newKey(algorithm string, size int) (crypto.Signer, error) {
	switch algorithm {
	case "ECDSA":
		curve := elliptic.P256()
		switch size {
		case 384:
			curve = elliptic.P384()
		case 521:
			curve = elliptic.P521()
		}
		return ecdsa.GenerateKey(curve, rand.Reader)
	case "", "RSA":
		if size == 0 {
			size = 2048
		}
		return rsa.GenerateKey(rand.Reader, size)
	default:
		return nil, fmt.Errorf("private key algorithm %q not simulated", algorithm)
	}
}

func encodeKey(k crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// issue signs a serving certificate for dnsNames valid for validity. With a
// nil parent the certificate is self-signed.
func issue(key crypto.Signer, commonName string, dnsNames []string, validity time.Duration, parent *keyPair, parentKey crypto.Signer) (*keyPair, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		DNSNames:     dnsNames,
		NotBefore:    now,
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	signerCert, signerKey := tmpl, key
	if parent != nil {
		signerCert, signerKey = parent.Cert, parentKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, key.Public(), signerKey)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if parent != nil {
		certPEM = append(certPEM, parent.CertPEM...)
	}
	return &keyPair{CertPEM: certPEM, KeyPEM: keyPEM, Cert: cert}, nil
}

// servingCA is the in-memory signer of the simulated service-ca operator.
type servingCA struct {
	kp  *keyPair
	key crypto.Signer
}

// newServingCA creates a CA named like OpenShift's service serving signer
// (openshift-service-serving-signer@<unix time>, from openshift/service-ca-operator).
func newServingCA() (*servingCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("service ca key: %w", err)
	}
	now := time.Now().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: fmt.Sprintf("openshift-service-serving-signer@%d", now.Unix())},
		NotBefore:             now,
		NotAfter:              now.Add(26 * 30 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("service ca: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &servingCA{
		kp:  &keyPair{CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Cert: cert},
		key: key,
	}, nil
}

// parseLeaf returns the first certificate of a PEM bundle.
func parseLeaf(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// encodeKeyAs encodes k as cert-manager's pki.EncodePrivateKey does for
// spec.privateKey.encoding (pkg/util/pki/parse.go and
// pkg/controller/certificates/issuing/internal/secret.go): PKCS1 (the
// default) is "RSA PRIVATE KEY" (PKCS#1) for RSA and "EC PRIVATE KEY"
// (SEC 1) for ECDSA; PKCS8 is "PRIVATE KEY". Ed25519 keys are always PKCS#8.
func encodeKeyAs(k crypto.Signer, encoding string) ([]byte, error) {
	if encoding == "PKCS8" {
		return encodeKey(k)
	}
	switch key := k.(type) {
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), nil
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, fmt.Errorf("marshal key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
	default:
		return encodeKey(k)
	}
}

// decodeKey parses a PEM private key in any of the encodings cert-manager
// reads (pki.DecodePrivateKeyBytes): PKCS#1, SEC 1 or PKCS#8.
func decodeKey(keyPEM []byte) (crypto.Signer, error) {
	b, _ := pem.Decode(keyPEM)
	if b == nil {
		return nil, fmt.Errorf("error decoding private key PEM block")
	}
	switch b.Type {
	case "RSA PRIVATE KEY":
		return x509.ParsePKCS1PrivateKey(b.Bytes)
	case "EC PRIVATE KEY":
		return x509.ParseECPrivateKey(b.Bytes)
	case "PRIVATE KEY":
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, err
		}
		s, ok := k.(crypto.Signer)
		if !ok {
			return nil, fmt.Errorf("unsupported private key type %T", k)
		}
		return s, nil
	default:
		return nil, fmt.Errorf("unknown private key type: %s", b.Type)
	}
}

// keyMatches reports whether k has spec.privateKey's algorithm and size
// (cert-manager's pki.PrivateKeyMatchesSpec; defaults RSA 2048, ECDSA 256).
func keyMatches(k crypto.Signer, algorithm string, size int) bool {
	switch key := k.(type) {
	case *rsa.PrivateKey:
		if size == 0 {
			size = 2048
		}
		return (algorithm == "" || algorithm == "RSA") && key.N.BitLen() == size
	case *ecdsa.PrivateKey:
		if size == 0 {
			size = 256
		}
		return algorithm == "ECDSA" && key.Curve.Params().BitSize == size
	default:
		return false
	}
}

// parseChain returns every certificate of a PEM bundle, in order.
func parseChain(certPEM []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("error decoding certificate PEM block")
	}
	return out, nil
}

func certPEM(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// leafRequest is what one CertificateRequest asks to be signed.
type leafRequest struct {
	commonName string
	dnsNames   []string
	validity   time.Duration
	isCA       bool
	// usages are cert-manager's spec.usages names; empty is its default
	// ("digital signature", "key encipherment").
	usages []string
	pub    crypto.PublicKey
}

// signLeaf signs req with signer (whose certificate is parent; a nil parent
// self-signs with the request's own key, which signer must then be), the
// way cert-manager's pki.CertificateTemplateFromCertificateRequest and
// pki.SignCertificate build it: isCA sets BasicConstraints CA:TRUE and
// cert sign usage.
func signLeaf(req leafRequest, parent *x509.Certificate, signer crypto.Signer) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	now := time.Now().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: req.commonName},
		DNSNames:              req.dnsNames,
		NotBefore:             now,
		NotAfter:              now.Add(req.validity),
		BasicConstraintsValid: true,
		IsCA:                  req.isCA,
	}
	usages := req.usages
	if len(usages) == 0 {
		usages = []string{"digital signature", "key encipherment"}
	}
	for _, u := range usages {
		switch u {
		case "digital signature":
			tmpl.KeyUsage |= x509.KeyUsageDigitalSignature
		case "key encipherment":
			tmpl.KeyUsage |= x509.KeyUsageKeyEncipherment
		case "cert sign":
			tmpl.KeyUsage |= x509.KeyUsageCertSign
		case "server auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		case "client auth":
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
		}
	}
	if req.isCA {
		tmpl.KeyUsage |= x509.KeyUsageCertSign
	}
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, req.pub, signer)
	if err != nil {
		return nil, fmt.Errorf("sign certificate: %w", err)
	}
	return x509.ParseCertificate(der)
}

// simCA is an in-memory CA (the ACME server's issuing chain).
type simCA struct {
	cert *x509.Certificate
	key  crypto.Signer
}

func newSimCA(cn string, parent *simCA) (*simCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	req := leafRequest{commonName: cn, validity: 5 * 365 * 24 * time.Hour, isCA: true, usages: []string{"digital signature"}, pub: key.Public()}
	var pc *x509.Certificate
	var signer crypto.Signer = key
	if parent != nil {
		pc, signer = parent.cert, parent.key
	}
	c, err := signLeaf(req, pc, signer)
	if err != nil {
		return nil, err
	}
	return &simCA{cert: c, key: key}, nil
}
