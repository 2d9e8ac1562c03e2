package session

import (
	"fmt"
	"sort"
	"strings"
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

// unknownContext returns a *FlagError for --context when it names a
// context that the kubeconfig files (--kubeconfig, else KUBECONFIG's, else
// ~/.kube/config) do not define, naming the files and the contexts they
// do define (with their clusters, and which is the current-context); nil
// without --context, when the context exists, or when the files do not
// load (that is a --kubeconfig error). It names no credential.
func (f *KubeFlags) unknownContext() error {
	if f.Context == "" {
		return nil
	}
	raw, err := f.ClientConfig().RawConfig()
	if err != nil || raw.Contexts[f.Context] != nil {
		return nil
	}
	files := "the kubeconfig"
	if paths := f.ClientConfig().ConfigAccess().GetLoadingPrecedence(); len(paths) > 0 {
		files = strings.Join(paths, ", ")
	}
	if len(raw.Contexts) == 0 {
		return &FlagError{Flag: "--context", Err: fmt.Errorf("context %q does not exist in %s, which defines no context; log in with 'oc login <API server URL>' (it writes one), or give --kubeconfig with the file that has it", f.Context, files)}
	}
	names := make([]string, 0, len(raw.Contexts))
	for name := range raw.Contexts {
		names = append(names, name)
	}
	sort.Strings(names)
	list := make([]string, len(names))
	for i, name := range names {
		list[i] = fmt.Sprintf("%s (cluster %q", name, raw.Contexts[name].Cluster)
		if name == raw.CurrentContext {
			list[i] += ", the current-context"
		}
		list[i] += ")"
	}
	return &FlagError{Flag: "--context", Err: fmt.Errorf("context %q does not exist in %s; the contexts there: %s; give one of them, or leave --context out for the current-context ('oc config get-contexts' lists them)", f.Context, files, strings.Join(list, ", "))}
}
