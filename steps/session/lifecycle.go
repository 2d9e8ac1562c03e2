package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/vault"
)

// CheckSelection checks --only/--skip/--from against the registry of the
// session's inventory before anything talks to the cluster: an unknown
// step ID is a *UsageError listing the valid ones.
func (s *Session) CheckSelection(sel Selection) error {
	reg, err := steps.NewRegistry(s.Inventory)
	if err != nil {
		return err
	}
	if _, err := sel.Resolve(reg); err != nil {
		return &UsageError{err}
	}
	return nil
}

// selectionError turns a dependency problem of --only/--skip/--from into
// a *UsageError (exit 2: nothing was changed).
func selectionError(err error) error {
	var de *steps.DependencyError
	var ue *steps.UnknownStepError
	if errors.As(err, &de) || errors.As(err, &ue) {
		return &UsageError{err}
	}
	return err
}

// Steps lists the install steps of the inventory in dependency order.
func Steps(inv *inventory.Inventory) ([]*Step, error) {
	reg, err := steps.NewRegistry(inv)
	if err != nil {
		return nil, err
	}
	return reg.TopoOrder()
}

// InstallOptions are install's inputs beside the session's.
type InstallOptions struct {
	Emit          func(Event)
	Log           *zap.Logger
	LeaseDuration time.Duration
	Policy        Policy
	Selection     Selection
	Verify        VerifyOptions
}

// Install runs the install with the session's inventory, Vault and
// cluster. The Vault token is kept alive while it runs. A selection
// problem is a *UsageError; a plain run on a cluster installed from
// another inventory stops before any write (ErrInventoryChanged).
func (s *Session) Install(ctx context.Context, o InstallOptions) error {
	if s.vaultErr != nil {
		return s.vaultErr
	}
	cfg, err := s.Config(ctx)
	if err != nil {
		return err
	}
	o.Log = s.logTo(o.Log)
	defer keepVaultAlive(ctx, s.vault, o.Log, s.opts.Stderr)()
	_, err = steps.Install(ctx, steps.InstallOptions{
		Config:        cfg,
		Inventory:     s.Inventory,
		Secrets:       &steps.VaultSecrets{Client: s.vault, Inv: s.Inventory},
		Emit:          o.Emit,
		Log:           o.Log,
		ToolVersion:   s.opts.ToolVersion,
		LeaseDuration: o.LeaseDuration,
		Policy:        o.Policy,
		Selection:     o.Selection,
		Verify:        o.Verify,
		Source:        s.Source(), // a plain run stops when the installed inventory differs
	})
	return selectionError(err)
}

// keepVaultAlive renews the Vault token (or logs in again) in the
// background until the returned function is called. Renewals go to the
// debug log; a token that can no longer be extended is also a warning on
// stderr.
func keepVaultAlive(ctx context.Context, vc *vault.Client, log *zap.Logger, stderr io.Writer) (stop func()) {
	return vc.KeepAlive(ctx, func(ev vault.KeepAliveEvent) {
		switch ev.Kind {
		case vault.KeepAliveExpiring, vault.KeepAliveFailed:
			log.Warn("vault token", zap.String("event", ev.Kind), zap.String("message", ev.Message))
			fmt.Fprintln(stderr, "maasctl: warning:", ev.Message)
		default:
			log.Info("vault token", zap.String("event", ev.Kind), zap.String("message", ev.Message))
		}
	})
}

// UninstallOptions are uninstall's inputs beside the session's.
type UninstallOptions struct {
	Emit                  func(Event)
	Log                   *zap.Logger
	DeleteData            bool
	PurgeCRDs             bool
	ForceRemoveFinalizers bool
	DryRun                bool
	WaitTimeout           time.Duration
	LeaseDuration         time.Duration
}

// Uninstall removes what the install of the session's inventory created.
// Vault is needed only to delete the password (DeleteData).
func (s *Session) Uninstall(ctx context.Context, o UninstallOptions) (*UninstallReport, error) {
	cfg, err := s.Config(ctx)
	if err != nil {
		return nil, err
	}
	opts := steps.UninstallOptions{
		Config: cfg, Inventory: s.Inventory, Log: s.logTo(o.Log), Emit: o.Emit,
		DeleteData: o.DeleteData, PurgeCRDs: o.PurgeCRDs, ForceRemoveFinalizers: o.ForceRemoveFinalizers,
		DryRun: o.DryRun, WaitTimeout: o.WaitTimeout, LeaseDuration: o.LeaseDuration,
		Source: s.Source(), // a plain run stops when the installed inventory differs
	}
	if s.vault != nil {
		opts.Vault = s.vault
	}
	return steps.Uninstall(ctx, opts)
}

// planOptions are the read-only lifecycle commands' options: Vault is
// optional (only the steps whose objects carry the database password
// need it).
func (s *Session) planOptions(ctx context.Context, sel Selection) (steps.PlanOptions, error) {
	cfg, err := s.Config(ctx)
	if err != nil {
		return steps.PlanOptions{}, err
	}
	return steps.PlanOptions{
		Config: cfg, Inventory: s.Inventory, ToolVersion: s.opts.ToolVersion, Against: s.against,
		Secrets:   &steps.ReadOnlySecrets{Client: s.vault, Inv: s.Inventory, Err: s.vaultErr},
		Selection: sel, Log: s.opts.Log,
	}, nil
}

// Status is every step's state, the operators and the last run.
func (s *Session) Status(ctx context.Context) (*StatusReport, error) {
	po, err := s.planOptions(ctx, Selection{})
	if err != nil {
		return nil, err
	}
	rep, err := steps.Status(ctx, po)
	if rep != nil {
		// What it says to run names the install command that re-applies
		// the inventory status compared against, as doctor's fixes do.
		rep.InstallCommand = s.InstallCommand()
		rep.EndpointProblem = verify.NameInstallCommand(rep.EndpointProblem, rep.InstallCommand)
	}
	return rep, err
}

// Plan lists the steps an install would run and why.
func (s *Session) Plan(ctx context.Context, sel Selection) (*PlanReport, error) {
	po, err := s.planOptions(ctx, sel)
	if err != nil {
		return nil, err
	}
	rep, err := steps.Plan(ctx, po)
	return rep, selectionError(err)
}

// Diff lists the object fields an install would change.
func (s *Session) Diff(ctx context.Context, sel Selection) (*DiffReport, error) {
	po, err := s.planOptions(ctx, sel)
	if err != nil {
		return nil, err
	}
	rep, err := steps.Diff(ctx, po)
	return rep, selectionError(err)
}

// PreflightOptions are preflight's inputs beside the session's.
type PreflightOptions struct {
	Policy Policy
	Log    *zap.Logger
}

// Preflight runs install's first step's checks; it only reads. Without
// a Vault client the vault check reports why.
func (s *Session) Preflight(ctx context.Context, o PreflightOptions) (*PreflightReport, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return nil, err
	}
	var secrets steps.Secrets
	if s.vaultErr != nil {
		secrets = steps.UnavailableSecrets(s.vaultErr)
	} else {
		secrets = &steps.VaultSecrets{Client: s.vault, Inv: s.Inventory}
	}
	env, err := steps.NewEnv(ctx, clients, s.Inventory, secrets, s.logTo(o.Log))
	if err != nil {
		return nil, err
	}
	env.Policy = o.Policy
	return steps.Preflight(ctx, env), nil
}

// RotateOptions are rotate-password's inputs beside the session's.
type RotateOptions struct {
	Log           *zap.Logger
	LeaseDuration time.Duration
	// Progress reports each phase and wait (never a value).
	Progress func(stepID, msg string)
	// Emit, when set, gets the run's events as install emits them.
	Emit func(Event)
}

// RotatePassword rotates the database owner's password (Vault, the
// database, the Secrets, maas-api). It needs Vault.
func (s *Session) RotatePassword(ctx context.Context, o RotateOptions) (RotateResult, error) {
	clients, err := s.connected(ctx)
	if err != nil {
		return RotateResult{}, err
	}
	return steps.RotateDBPassword(ctx, steps.RotateOptions{
		Clients: clients, Inventory: s.Inventory, Vault: s.vault, Log: s.logTo(o.Log),
		LeaseDuration: o.LeaseDuration, Progress: o.Progress, Emit: o.Emit,
	})
}
