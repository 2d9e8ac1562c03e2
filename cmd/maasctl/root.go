package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"k8s.io/klog/v2"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/session"
)

// version is set with -ldflags "-X main.version=...".
var version = "dev"

// commands holds the constructors of further subcommands; each command file
// registers its own in an init function, so adding a command touches one file.
var commands []func(*globalOptions) *cobra.Command

type globalOptions struct {
	kube    *session.KubeFlags
	logFile string
	// kubeAuth holds --kube-token-from-vault (kubeconfig.go).
	kubeAuth kubeAuthOptions
	// in are the inventory inputs every command takes: -f, --set,
	// --vault-addr, registered once on the root command.
	in inputs
	// session is the session open opened last: a command's error is
	// explained with it when the API server could not be reached or did
	// not accept the credentials (explainUnreachable).
	session *session.Session
	// log is the debug log of --log-file, built once (logger).
	log     *zap.Logger
	logSync func()
	logErr  error
}

// inputs are the inventory inputs of session.Options.
type inputs struct {
	files, sets []string
	vaultAddr   string
	defaults    bool
	// timeout is --timeout, the bound of each wait (zero: the
	// inventory's waitTimeoutSeconds).
	timeout time.Duration
}

// open opens the front door with the global flags (session.Open); the
// session's warnings go to the command's stderr.
// The session logs to the debug log of --log-file (logger), so every
// command that talks to the cluster writes it.
func (g *globalOptions) open(c *cobra.Command) (*session.Session, error) {
	log, _, err := g.logger()
	if err != nil {
		return nil, err
	}
	s, err := session.Open(session.Options{
		Files: g.in.files, Sets: g.in.sets, VaultAddr: g.in.vaultAddr, Defaults: g.in.defaults,
		Kube: g.kube, KubeTokenFromVault: g.kubeAuth.tokenFromVault, Timeout: g.in.timeout,
		ToolVersion: version, Stderr: c.ErrOrStderr(), Log: log,
	})
	if err == nil {
		g.session = s
	}
	return s, err
}

// inventory loads and validates the inventory of the global flags
// without opening a session (session.LoadInventory).
func (g *globalOptions) inventory() (*inventory.Inventory, error) {
	return session.LoadInventory(g.in.files, g.in.sets, g.in.vaultAddr)
}

func newRootCmd() *cobra.Command {
	g := &globalOptions{kube: &session.KubeFlags{}}
	root := &cobra.Command{
		Use:   "maasctl",
		Short: "Install and operate Red Hat OpenShift AI Models-as-a-Service",
		Long: `maasctl installs Red Hat OpenShift AI 3.5 with Models-as-a-Service and
publishes an OpenAI-compatible model server behind one authenticated,
rate-limited endpoint. Runs are idempotent and resumable.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// --version prints what the version command prints.
		Version: version,
	}
	root.SetVersionTemplate("maasctl {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return &usageError{err} })
	fs := root.PersistentFlags()
	fs.StringVar(&g.kube.KubeConfig, "kubeconfig", "", "path to the kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&g.kube.Context, "context", "", "kubeconfig context to use")
	fs.StringVar(&g.logFile, "log-file", "", "write the debug log (JSON) to this file; it never contains secrets")
	g.kubeAuth.addFlags(fs, g)
	fs.StringArrayVarP(&g.in.files, "file", "f", nil, "inventory YAML file, or Ansible vars with rhoai_maas_* variables (repeatable; later files win)")
	fs.StringArrayVar(&g.in.sets, "set", nil, "override one inventory value, e.g. --set gateway.hostname=maas.apps.example.com (repeatable)")
	fs.BoolVar(&g.in.defaults, "defaults", false, "use the default inventory (with --set) on purpose, although the cluster was installed from another one (see maasctl inventory show); without -f, install and uninstall stop when the installed inventory differs")
	fs.StringVar(&g.in.vaultAddr, "vault-addr", "", "Vault address (default $VAULT_ADDR); Vault holds the database password and, with --kube-token-from-vault, the cluster token")
	fs.DurationVar(&g.in.timeout, "timeout", 0, "how long each wait may take: an install or uninstall step's objects, a migration's objects, verify's cluster probes (default: the inventory's waitTimeoutSeconds, 900s; migrate: 10m); it changes no object, so it is not part of the installed inventory")
	root.AddCommand(newInstallCmd(g), newStepsCmd(g), newVersionCmd())
	for _, add := range commands {
		root.AddCommand(add(g))
	}
	strictArgs(root)
	explainUnreachable(root, g)
	return root
}

// explainUnreachable makes the error of every command under c that could
// not reach the API server say so (session.UnreachableError): the server
// URL, where it came from (kubeconfig file and context, or --server), the
// transport error and the fix, in place of the request that happened to
// fail first. So does the error of one whose credentials the API server
// did not accept, 401 Unauthorized (session.UnauthorizedError): the
// server, where the credentials came from (kubeconfig file, context and
// user; the token from Vault; the in-cluster configuration) and the fix
// ('oc login' again). Neither message repeats the command's own (install's
// "finished steps are not repeated" among it). The exit code stays the
// command's (1).
func explainUnreachable(c *cobra.Command, g *globalOptions) {
	for _, sub := range c.Commands() {
		explainUnreachable(sub, g)
	}
	if run := c.RunE; run != nil {
		c.RunE = func(c *cobra.Command, args []string) error {
			err := run(c, args)
			if err != nil && g.session != nil {
				// The same inventory flags again: a plain 'maasctl
				// install' refuses on a cluster installed from -f.
				cmd := strings.TrimPrefix(c.CommandPath(), c.Root().Name()+" ")
				err = g.session.ExplainAPIServer(err, rerunCommand(cmd, g.in.files, g.in.sets, g.in.defaults))
			}
			return err
		}
	}
}

// strictArgs makes every argument mistake under c a usage error (exit code
// 2, nothing changed): a command's own argument check, and an unknown
// subcommand of a command group. cobra returns its "unknown command"
// errors as plain errors (exit 1), and below the root a group given an
// unknown subcommand prints its help and exits 0.
func strictArgs(c *cobra.Command) {
	for _, sub := range c.Commands() {
		strictArgs(sub)
	}
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = unknownSubcommand
		c.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		return
	}
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				return &usageError{err}
			}
			return nil
		}
	}
}

// unknownSubcommand is the argument check of a command group: any
// argument names a subcommand it does not have.
func unknownSubcommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], c.CommandPath())
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += " (did you mean " + strings.Join(s, " or ") + "?)"
	}
	return &usageError{fmt.Errorf("%s; '%s --help' lists its commands", msg, c.CommandPath())}
}

// logger is the debug log of --log-file (a no-op logger without it),
// built on first use; later calls return the same logger. client-go's
// own log (klog: "Failed to watch", "Couldn't get current server API
// group list", API warnings, throttling) goes to it as well (routeKlog),
// never to stderr.
func (g *globalOptions) logger() (*zap.Logger, func(), error) {
	if g.log == nil && g.logErr == nil {
		g.log, g.logSync, g.logErr = g.buildLogger()
		if g.logErr == nil {
			routeKlog(g.log)
		}
	}
	return g.log, g.logSync, g.logErr
}

// routeKlog makes klog (k8s.io/klog/v2, client-go's logger) write to l,
// named "client-go", through its logr API (zapr), both its global
// functions and the contextual loggers client-go takes from a context.
// Its lines are diagnosis, not user output: a reflector that stops
// watching when a wait ends logs "Failed to watch ... context canceled",
// an unreachable API server "Couldn't get current server API group list",
// and on stderr they would break the live view and alarm for nothing. A
// no-op l discards them.
func routeKlog(l *zap.Logger) {
	// No stack traces: a klog error line is one line of the debug log.
	kl := l.Named("client-go").WithOptions(zap.AddStacktrace(zapcore.FatalLevel + 1))
	klog.SetLoggerWithOptions(zapr.NewLogger(kl), klog.ContextualLogger(true))
}

func (g *globalOptions) buildLogger() (*zap.Logger, func(), error) {
	if g.logFile == "" {
		return zap.NewNop(), func() {}, nil
	}
	cfg := zap.NewProductionConfig()
	cfg.OutputPaths = []string{g.logFile}
	cfg.ErrorOutputPaths = []string{g.logFile}
	cfg.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	// The production config samples (after 100 entries of one message in
	// a second, one in 100): the debug log would then drop most of a
	// run's "api request" lines. It is written for diagnosis; keep all.
	cfg.Sampling = nil
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
