package main

import (
	"github.com/spf13/pflag"
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
	fs.StringVar(&g.kube.APIServer, "server", "", "Kubernetes API server URL (default: the kubeconfig context's cluster)")
	fs.StringVar(&g.kube.CAFile, "certificate-authority", "", "CA file for the API server's certificate (default: the kubeconfig's cluster CA)")
}
