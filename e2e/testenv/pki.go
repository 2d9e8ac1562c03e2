package testenv

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeServiceAccountKeys writes an RSA 2048 key pair for signing service
// account tokens: sa.key (PKCS#8) for kube-apiserver
// --service-account-signing-key-file and kube-controller-manager
// --service-account-private-key-file, sa.pub (PKIX) for
// --service-account-key-file.
func writeServiceAccountKeys(stateDir string) (keyFile, pubFile string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", fmt.Errorf("generate service account key: %w", err)
	}
	priv, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("encode service account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", fmt.Errorf("encode service account public key: %w", err)
	}
	keyFile = filepath.Join(stateDir, "sa.key")
	pubFile = filepath.Join(stateDir, "sa.pub")
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return "", "", fmt.Errorf("write service account key: %w", err)
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return "", "", fmt.Errorf("write service account public key: %w", err)
	}
	return keyFile, pubFile, nil
}

// writeTokenFile writes kube-apiserver's --token-auth-file with one random
// admin token in group system:masters (RBAC allows that group everything)
// and returns the file and the token. The token is written only to files
// of mode 0600 in the state folder.
func writeTokenFile(stateDir string) (file, token string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("generate admin token: %w", err)
	}
	token = hex.EncodeToString(b)
	file = filepath.Join(stateDir, "tokens.csv")
	// Format: token,user,uid,"group1,group2" (kube-apiserver --token-auth-file).
	line := token + ",admin,admin-uid,system:masters\n"
	if err := os.WriteFile(file, []byte(line), 0o600); err != nil {
		return "", "", fmt.Errorf("write token file: %w", err)
	}
	return file, token, nil
}

// caFromServingCert returns the CA certificate (PEM) that kube-apiserver
// generated with --cert-dir: apiserver.crt is the self-signed serving
// certificate followed by its CA, and only the second block has the CA bit
// (RECIPE.md §3 pitfall 2: using the whole file as --root-ca-file makes
// kube-controller-manager's ClusterTrustBundle publisher loop).
func caFromServingCert(certFile string) ([]byte, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, err
	}
	remaining := b
	for i := 0; ; i++ {
		var block *pem.Block
		block, remaining = pem.Decode(remaining)
		if block == nil {
			return nil, fmt.Errorf("%s: %d certificate(s), want leaf and CA", certFile, i)
		}
		if i < 1 {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: parse second certificate: %w", certFile, err)
		}
		if !c.IsCA {
			return nil, errors.New(certFile + ": second certificate is not a CA")
		}
		return pem.EncodeToMemory(block), nil
	}
}

// writeKubeconfig writes an admin kubeconfig (mode 0600) for server with
// the CA data and token inlined, so the file works when copied elsewhere.
func writeKubeconfig(path, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["testenv"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["testenv"] = &clientcmdapi.Context{Cluster: "testenv", AuthInfo: "admin"}
	cfg.CurrentContext = "testenv"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}

// restConfigFromKubeconfig loads a kubeconfig written by writeKubeconfig
// and raises client-side rate limits, which only slow tests down.
func restConfigFromKubeconfig(path string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", path, err)
	}
	cfg.QPS = 100
	cfg.Burst = 200
	return cfg, nil
}
