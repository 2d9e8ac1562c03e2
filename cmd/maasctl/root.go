package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// commands holds the constructors of further subcommands; each command file
// registers its own in an init function, so adding a command touches one file.
var commands []func(*globalOptions) *cobra.Command

type globalOptions struct {
	kube    *genericclioptions.ConfigFlags
	logFile string
	// kubeAuth holds --kube-token-from-vault (kubeconfig.go).
	kubeAuth kubeAuthOptions
}

func newRootCmd() *cobra.Command {
	g := &globalOptions{kube: genericclioptions.NewConfigFlags(true)}
	root := &cobra.Command{
		Use:   "maasctl",
		Short: "Install and operate Red Hat OpenShift AI Models-as-a-Service",
		Long: `maasctl installs Red Hat OpenShift AI 3.5 with Models-as-a-Service and
publishes an OpenAI-compatible model server behind one authenticated,
rate-limited endpoint. Runs are idempotent and resumable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err} })
	fs := root.PersistentFlags()
	fs.StringVar(g.kube.KubeConfig, "kubeconfig", "", "path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(g.kube.Context, "context", "", "kubeconfig context to use")
	fs.StringVar(&g.logFile, "log-file", "", "write the debug log (JSON) to this file; it never contains secrets")
	g.kubeAuth.addFlags(fs, g)
	root.AddCommand(newInstallCmd(g), newStepsCmd(), newVersionCmd())
	for _, add := range commands {
		root.AddCommand(add(g))
	}
	return root
}

func (g *globalOptions) logger() (*zap.Logger, func(), error) {
	if g.logFile == "" {
		return zap.NewNop(), func() {}, nil
	}
	cfg := zap.NewProductionConfig()
	cfg.OutputPaths = []string{g.logFile}
	cfg.ErrorOutputPaths = []string{g.logFile}
	cfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	l, err := cfg.Build()
	if err != nil {
		return nil, nil, fmt.Errorf("--log-file %s: %w", g.logFile, err)
	}
	return l, func() { _ = l.Sync() }, nil
}

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Print the maasctl version",
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprintln(c.OutOrStdout(), "maasctl", version)
			return nil
		},
	}
}
