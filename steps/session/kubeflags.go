package session

import (
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// KubeFlags are kubectl's connection flags that maasctl takes: --kubeconfig,
// --context, --server and --certificate-authority. They resolve as
// kubectl resolves them (client-go clientcmd: the explicit file, else
// $KUBECONFIG's files merged, else ~/.kube/config; in a pod without any,
// the service account), with a non-empty flag overriding the kubeconfig.
//
// Not k8s.io/cli-runtime's genericclioptions.ConfigFlags, which does the
// same with the same clientcmd calls: importing genericclioptions pulls in
// cli-runtime's resource builder, kustomize and Go's plugin package, and a
// binary that imports plugin keeps every exported method (the linker's
// dead-method elimination is off). That made maasctl 101 MB, and the pages
// of its code alone 59 MB of a 1,000-model install's resident set.
type KubeFlags struct {
	// KubeConfig is a kubeconfig file path ("" = $KUBECONFIG or
	// ~/.kube/config).
	KubeConfig string
	// Context is the kubeconfig context ("" = its current-context).
	Context string
	// APIServer is the API server URL ("" = the context's cluster).
	APIServer string
	// CAFile is a PEM file of CAs for the API server's certificate ("" =
	// the context cluster's).
	CAFile string

	once   sync.Once
	loader clientcmd.ClientConfig
}

// ClientConfig is the kubeconfig loader of the flags, built once.
func (f *KubeFlags) ClientConfig() clientcmd.ClientConfig {
	f.once.Do(func() {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = f.KubeConfig
		overrides := &clientcmd.ConfigOverrides{CurrentContext: f.Context}
		overrides.ClusterInfo.Server = f.APIServer
		overrides.ClusterInfo.CertificateAuthority = f.CAFile
		f.loader = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	})
	return f.loader
}

// RESTConfig is the client configuration the flags name. Errors are
// clientcmd's: a missing explicit file, an unknown context, a kubeconfig
// that does not parse, or no cluster at all (clientcmd.ErrEmptyConfig).
func (f *KubeFlags) RESTConfig() (*rest.Config, error) { return f.ClientConfig().ClientConfig() }
