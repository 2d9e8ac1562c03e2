package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
)

// kubeAuthOptions are the global flags that decide how maasctl
// authenticates to the cluster.
type kubeAuthOptions struct {
	// tokenFromVault is --kube-token-from-vault PATH:KEY.
	tokenFromVault string
}

// addFlags registers --kube-token-from-vault, --server and
// --certificate-authority on the root command's persistent flags.
func (o *kubeAuthOptions) addFlags(fs *pflag.FlagSet, g *globalOptions) {
	fs.StringVar(&o.tokenFromVault, "kube-token-from-vault", "",
		"PATH:KEY of a Kubernetes bearer token in Vault (e.g. kv/data/lab/rhoai-deployer:token): talk to the API server with it instead of the kubeconfig's credentials; it is never written to disk (inventory: vault.kubeTokenPath)")
	fs.StringVar(g.kube.APIServer, "server", "", "Kubernetes API server URL (default: the kubeconfig context's cluster)")
	fs.StringVar(g.kube.CAFile, "certificate-authority", "", "CA file for the API server's certificate (default: the kubeconfig's cluster CA)")
}

// restConfig returns the cluster client configuration. Without a Vault
// token path (--kube-token-from-vault, else inventory vault.kubeTokenPath)
// it is the kubeconfig's. With one, it keeps only where the API server is
// and how to trust it (the kubeconfig context's cluster, --server,
// --certificate-authority, or the in-cluster config in a pod), drops every
// credential the kubeconfig names, and authenticates with the bearer token
// read from Vault, as the playbook's hashi_vault lookup did. The token stays
// in memory. It is checked with a SelfSubjectReview so a stale token fails
// here, naming the Vault path, instead of at the first step.
func (g *globalOptions) restConfig(ctx context.Context, inv *inventory.Inventory, vc *vault.Client) (*rest.Config, error) {
	spec := g.kubeAuth.tokenFromVault
	if spec == "" {
		spec = inv.Vault.KubeTokenPath
	}
	if spec == "" {
		cfg, err := g.kube.ToRESTConfig()
		if err != nil {
			return nil, fmt.Errorf("kubeconfig: %w", err)
		}
		return cfg, nil
	}
	path, key, err := vault.ParseKeyPath(spec)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--kube-token-from-vault: %w", err)}
	}
	base, err := g.kube.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("find the API server for the token from Vault %s (kubeconfig cluster or --server): %w", spec, err)
	}
	token, err := vc.ReadKey(ctx, path, key)
	if err != nil {
		return nil, fmt.Errorf("read the cluster token from Vault %s: %w", spec, err)
	}
	cfg := rest.AnonymousClientConfig(base)
	cfg.BearerToken = token
	if err := checkClusterToken(ctx, cfg, spec); err != nil {
		return nil, err
	}
	return cfg, nil
}

// checkClusterToken asks the API server who the token is
// (authentication.k8s.io/v1 SelfSubjectReview). Only a 401 is an error: an
// older API server without the endpoint, or a transient failure, is left to
// the install's own requests.
func checkClusterToken(ctx context.Context, cfg *rest.Config, spec string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("cluster client for the token from Vault %s: %w", spec, err)
	}
	_, err = cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if apierrors.IsUnauthorized(err) {
		return fmt.Errorf("the API server %s rejects the token from Vault %s (401 Unauthorized): the ServiceAccount token has expired or was rotated; store a current one, e.g. `vault kv put ... token=$(oc create token rhoai-deployer -n <namespace> --duration=24h)`", cfg.Host, spec)
	}
	return nil
}
