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
