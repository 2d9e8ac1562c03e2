// Package session is maasctl's front door, as clusterctl's client is
// clusterctl's: one call (Open) reads the inventory (YAML files or the
// Ansible role's variables, then --set values), builds the Vault client
// the inventory describes and, on first use, the cluster configuration
// from the kube flags, with the cluster's bearer token read from Vault
// when asked (--kube-token-from-vault or inventory vault.kubeTokenPath).
// Every command opens its session the same way, so every command takes
// the same inventory inputs and the same cluster credentials.
package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"
	authnv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/vault"
)

// Options are the inputs every command shares.
type Options struct {
	// Files are inventory YAML files or Ansible vars files with
	// rhoai_maas_* variables (-f, repeatable; later files win).
	Files []string
	// Sets are --set path=value overrides, applied after the files.
	Sets []string
	// VaultAddr overrides vault.address (--vault-addr).
	VaultAddr string
	// Kube are the kubectl flags (--kubeconfig, --context, --server,
	// --certificate-authority); nil means the defaults (KUBECONFIG).
	Kube *KubeFlags
	// KubeTokenFromVault is PATH:KEY of the cluster's bearer token in
	// Vault (--kube-token-from-vault); empty means vault.kubeTokenPath.
	KubeTokenFromVault string
	// Defaults (--defaults) asks for the default inventory (with Sets)
	// on purpose, even when the cluster was installed from another one.
	// It cannot be combined with Files.
	Defaults bool
	// Timeout (--timeout), when positive, bounds each wait of this run: it
	// replaces the inventory's waitTimeoutSeconds (rounded up to whole
	// seconds), which changes no object and is not part of the installed
	// inventory (inventory.Deployed). Under a second is a FlagError.
	Timeout time.Duration
	// ToolVersion is maasctl's version, for the checkpoints, the run
	// record and gather's archive.
	ToolVersion string
	// Stderr gets warnings that do not stop a command (a release layout
	// that cannot be read, a Vault token that can no longer be extended);
	// nil discards them.
	Stderr io.Writer
	// Log is the debug log (--log-file): every client the session builds
	// logs one line per API request to it (method, path, query, status;
	// never a body or a header), and the commands' libraries their debug
	// lines. Nil: none.
	Log *zap.Logger
}

// FlagError is a bad flag value (exit code 2, nothing changed).
type FlagError struct {
	Flag string
	Err  error
}

func (e *FlagError) Error() string { return e.Flag + ": " + e.Err.Error() }
func (e *FlagError) Unwrap() error { return e.Err }

// Session is an opened front door: the validated inventory, the Vault
// client (or why there is none) and, once asked for, the cluster config.
type Session struct {
	Inventory *inventory.Inventory
	opts      Options
	vault     *vault.Client
	vaultErr  error
	// cfg is Config's result, once asked for.
	cfg *rest.Config
	// installed is the installed inventory UseInstalled switched to (nil
	// when the session uses its own).
	installed *steps.InstalledInventory
	// against says which inventory the session compares the cluster
	// against (UseInstalled).
	against string
	// clients are Connect's clients of cfg.
	clients *kube.Clients
	// ownWaitTimeout is the inventory's waitTimeoutSeconds before
	// --timeout replaced it (applyTimeout); 0 without --timeout.
	ownWaitTimeout int
}

// LoadInventory reads files (inventory YAML or Ansible vars) and sets,
// applies vaultAddr and validates. Errors wrap steps.ErrInvalidInventory
// and name the field.
func LoadInventory(files, sets []string, vaultAddr string) (*inventory.Inventory, error) {
	inv, err := inventory.LoadWithAnsible(files, sets)
	if err != nil {
		return nil, steps.InvalidInventory(err)
	}
	if vaultAddr != "" {
		inv.Vault.Address = vaultAddr
	}
	if err := inv.Validate(); err != nil {
		return nil, steps.InvalidInventory(err)
	}
	return inv, nil
}

// Open loads the inventory and builds the Vault client it describes. A
// Vault that cannot be configured is not an error here (Vault() says
// why) unless the cluster token must come from it. Nothing is sent to the
// cluster or to Vault.
func Open(o Options) (*Session, error) {
	if o.Defaults && len(o.Files) > 0 {
		return nil, &FlagError{Flag: "--defaults", Err: errors.New("uses the default inventory, so it cannot be combined with -f; give one of them")}
	}
	if o.Timeout != 0 && o.Timeout < time.Second {
		return nil, &FlagError{Flag: "--timeout", Err: fmt.Errorf("%s is under a second; give a duration such as 90s or 15m", o.Timeout)}
	}
	inv, err := LoadInventory(o.Files, o.Sets, o.VaultAddr)
	if err != nil {
		return nil, err
	}
	if o.Kube == nil {
		o.Kube = &KubeFlags{}
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	s := &Session{Inventory: inv, opts: o}
	s.applyTimeout(inv)
	s.vault, s.vaultErr = VaultClient(inv)
	if s.vaultErr != nil {
		s.vault = nil
		if s.tokenSpec() != "" {
			return nil, s.vaultErr
		}
	}
	return s, nil
}

// VaultClient builds the Vault client the inventory describes: address
// (vault.address, else VAULT_ADDR), auth method and its settings; TLS,
// namespace and token come from the environment like the vault CLI.
func VaultClient(inv *inventory.Inventory) (*vault.Client, error) {
	a := inv.Vault.Auth
	c, err := vault.NewClient(vault.Options{
		Address: inv.Vault.Address,
		Auth: vault.AuthOptions{
			Method: a.Method, MountPath: a.MountPath, Role: a.Role, JWTFile: a.ServiceAccountTokenPath,
			RoleIDFile: a.RoleIDFile, SecretIDFile: a.SecretIDFile,
		},
	})
	switch {
	case errors.Is(err, vault.ErrNoAddress):
		// The library's "or pass an address" is its Options.Address:
		// name maasctl's ways to give one.
		return nil, &FlagError{Flag: "--vault-addr", Err: errors.New("no Vault address: give --vault-addr, set VAULT_ADDR or the inventory's vault.address (for example https://vault.example.com:8200)")}
	case errors.Is(err, vault.ErrNoToken):
		detail := strings.TrimPrefix(err.Error(), vault.ErrNoToken.Error()) // e.g. " (~/.vault-token is empty)"
		return nil, &FlagError{Flag: "vault.auth", Err: errors.New("no Vault token" + detail + ": set VAULT_TOKEN, run `vault login` (it writes ~/.vault-token), or set the inventory's vault.auth.method to kubernetes or approle; maasctl takes no token flag, as a flag would stay in the shell history")}
	}
	return c, err
}

func (s *Session) tokenSpec() string {
	if s.opts.KubeTokenFromVault != "" {
		return s.opts.KubeTokenFromVault
	}
	return s.Inventory.Vault.KubeTokenPath
}

// Config returns the cluster client configuration. Without a Vault token
// path it is the kubeconfig's. With one, it keeps only where the API
// server is and how to trust it (the kubeconfig context's cluster,
// --server, --certificate-authority, or the in-cluster config in a pod),
// drops every credential the kubeconfig names, and authenticates with the
// bearer token read from Vault, as the playbook's hashi_vault lookup did.
// The token stays in memory. It is checked with a SelfSubjectReview so a
// stale token fails here, naming the Vault path, instead of at the first
// step.
func (s *Session) Config(ctx context.Context) (*rest.Config, error) {
	if s.cfg != nil {
		return rest.CopyConfig(s.cfg), nil
	}
	cfg, err := s.config(ctx)
	if err != nil {
		return nil, err
	}
	s.cfg = cfg
	return rest.CopyConfig(cfg), nil
}

func (s *Session) config(ctx context.Context) (*rest.Config, error) {
	if err := noCluster(s.opts.Kube); err != nil {
		return nil, err
	}
	spec := s.tokenSpec()
	if spec == "" {
		cfg, err := s.opts.Kube.RESTConfig()
		if err != nil {
			// Loading the kubeconfig sends nothing: a --context it
			// lacks (named under --context, with the contexts it has),
			// a file that is not there or a malformed file (exit 2).
			if ctxErr := s.opts.Kube.unknownContext(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, &FlagError{Flag: "--kubeconfig", Err: fmt.Errorf("%w; check the path (--kubeconfig, KUBECONFIG) and the --context name ('oc config get-contexts' lists them)", err)}
		}
		return cfg, nil
	}
	path, key, err := vault.ParseKeyPath(spec)
	if err != nil {
		return nil, &FlagError{Flag: "--kube-token-from-vault", Err: err}
	}
	base, err := s.opts.Kube.RESTConfig()
	if err != nil {
		if ctxErr := s.opts.Kube.unknownContext(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("find the API server for the token from Vault %s (kubeconfig cluster or --server): %w", spec, err)
	}
	if s.vault == nil {
		return nil, errors.Join(fmt.Errorf("the cluster token comes from Vault %s, but Vault is not configured", spec), s.vaultErr)
	}
	token, err := s.vault.ReadKey(ctx, path, key)
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

// noCluster returns a FlagError when nothing names an API server: no
// --server, not in a pod (KUBERNETES_SERVICE_HOST), and no kubeconfig
// cluster. clientcmd would otherwise fail with "invalid configuration: no
// configuration has been provided", which names neither the flag nor the
// fix.
func noCluster(f *KubeFlags) error {
	if f.APIServer != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return nil
	}
	raw, err := f.ClientConfig().RawConfig()
	if err != nil || len(raw.Clusters) > 0 {
		return nil // a broken kubeconfig is reported by RESTConfig
	}
	return &FlagError{Flag: "--kubeconfig", Err: errors.New("no cluster to talk to: no kubeconfig names a cluster (KUBECONFIG, ~/.kube/config) and --server is not set; log in with 'oc login' or set KUBECONFIG")}
}

// RequireVault returns why there is no Vault client, for the commands
// that cannot work without one (install, database rotate-password).
func (s *Session) RequireVault() error { return s.vaultErr }

// Connect builds the cluster configuration (Config) and its clients once;
// the commands call it before anything they print, so that a cluster that
// cannot be reached fails first. Nothing is sent to the cluster but the
// SelfSubjectReview of a token from Vault.
func (s *Session) Connect(ctx context.Context) error {
	if s.clients != nil {
		return nil
	}
	cfg, err := s.Config(ctx)
	if err != nil {
		return err
	}
	s.clients, err = kube.NewWithOptions(cfg, kube.Options{Log: s.opts.Log})
	return err
}

// logTo is l, or the session's debug log when l is nil.
func (s *Session) logTo(l *zap.Logger) *zap.Logger {
	if l != nil {
		return l
	}
	return s.opts.Log
}

// connected is Connect's clients.
func (s *Session) connected(ctx context.Context) (*kube.Clients, error) {
	if err := s.Connect(ctx); err != nil {
		return nil, err
	}
	return s.clients, nil
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
		return &steps.Problem{
			Message: fmt.Sprintf("the API server %s rejects the token from Vault %s (401 Unauthorized): the ServiceAccount token has expired or was rotated", cfg.Host, spec),
			Fix:     "store a current one, e.g. `vault kv put ... token=$(oc create token rhoai-deployer -n <namespace> --duration=24h)`"}
	}
	return nil
}

// Source says where the session's inventory came from (the -f files, the
// --set paths, --defaults), for install and uninstall to check against
// and store as the installed inventory.
func (s *Session) Source() steps.InventorySource {
	return steps.NewInventorySource(s.opts.Files, s.opts.Sets, s.opts.Defaults).WithOwnWaitTimeout(s.ownWaitTimeout)
}

// Installed reads the inventory the cluster was installed from
// (steps.InstalledInventoryConfigMap); none is (nil, nil).
func (s *Session) Installed(ctx context.Context) (*steps.InstalledInventory, error) {
	c, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	return steps.LoadInstalledInventory(ctx, c)
}

// PlainRunStops reports whether a plain install or uninstall with this
// session's inventory (no -f, no --defaults) would stop on this cluster
// because it was installed from another inventory (ErrInventoryChanged),
// and names that inventory. Call it before UseInstalled.
func (s *Session) PlainRunStops(ctx context.Context) (bool, string, error) {
	inst, err := s.Installed(ctx)
	if err != nil {
		return false, "", err
	}
	if !steps.WouldStop(inst, s.Source(), s.Inventory) {
		return false, "", nil
	}
	return true, inst.Describe(), nil
}

// UseInstalled makes the session's inventory the installed one when the
// command named none (no -f, no --set, no --defaults) and the cluster
// has one, so that plan, status and diff compare the cluster against what
// it was installed from; vault.address stays the one of this run
// (--vault-addr or VAULT_ADDR), as it is never stored. It returns which
// inventory the session uses now, as a phrase: "the inventory installed
// from site.yaml at ... (digest ...)", "the inventory from -f site.yaml",
// "the default inventory (--defaults)", ...
func (s *Session) UseInstalled(ctx context.Context) (string, error) {
	against, err := s.useInstalled(ctx)
	s.against = against
	return against, err
}

func (s *Session) useInstalled(ctx context.Context) (string, error) {
	src := s.Source()
	switch {
	case len(src.Files) > 0:
		return "the inventory from -f " + src.Describe(), nil
	case src.Defaults:
		return src.Describe() + " (--defaults)", nil
	case len(src.Sets) > 0:
		// --set alone is laid over the default inventory; on a cluster
		// installed from another one, install with the same flags stops:
		// say so where plan, diff and status name their inventory.
		inst, err := s.Installed(ctx)
		if err != nil {
			return "", err
		}
		if steps.WouldStop(inst, src, s.Inventory) {
			return src.Describe() + ", not " + inst.Describe() + ": 'maasctl install' with these flags would stop and change nothing; give -f with the installed inventory and the same --set to change only what --set sets ('maasctl inventory show' prints it)", nil
		}
		return src.Describe(), nil
	}
	inst, err := s.Installed(ctx)
	if err != nil {
		return "", err
	}
	if inst == nil {
		return "the default inventory (no installed inventory is recorded in the cluster)", nil
	}
	inv := inst.Inventory
	inv.Vault.Address = s.Inventory.Vault.Address
	s.applyTimeout(inv)
	if err := inv.Validate(); err != nil {
		return "", steps.InvalidInventory(fmt.Errorf("the installed inventory: %w", err))
	}
	s.Inventory = inv
	s.installed = inst
	s.vault, s.vaultErr = VaultClient(inv)
	if s.vaultErr != nil {
		s.vault = nil
	}
	return inst.Describe(), nil
}

// InstallCommand is the maasctl install command line that re-applies the
// session's inventory, for fixes that tell the user to run it: "maasctl
// install -f <files>" for an inventory from files (this command's -f, or
// the installed inventory's when UseInstalled switched to it), "maasctl
// install --defaults" for --defaults, plain "maasctl install" for the
// default inventory. --set values are never repeated (they may hold
// anything): each is named by its path, "--set gateway.hostname=<value>".
func (s *Session) InstallCommand() string { return s.CommandFor("install") }

// CommandFor is InstallCommand for another lifecycle command
// ("uninstall"): "maasctl uninstall -f site.yaml".
func (s *Session) CommandFor(command string) string {
	src := s.Source()
	if s.installed != nil {
		src = s.installed.Source
	}
	cmd := "maasctl " + command
	switch {
	case len(src.Files) > 0:
		cmd += " -f " + strings.Join(src.Files, " -f ")
	case src.Defaults:
		cmd += " --defaults"
	}
	for _, p := range src.Sets {
		cmd += " --set " + p + "=<value>"
	}
	return cmd
}

// applyTimeout makes --timeout the inventory's waitTimeoutSeconds for this
// run and remembers the inventory's own value for the installed inventory
// (Source).
func (s *Session) applyTimeout(inv *inventory.Inventory) {
	if s.opts.Timeout > 0 {
		s.ownWaitTimeout = inv.WaitTimeoutSeconds
		inv.WaitTimeoutSeconds = int((s.opts.Timeout + time.Second - 1) / time.Second)
	}
}
