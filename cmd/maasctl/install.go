package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/vault"
)

type installOptions struct {
	files     []string
	sets      []string
	output    string
	vaultAddr string
	lease     time.Duration
}

func newInstallCmd(g *globalOptions) *cobra.Command {
	o := &installOptions{}
	c := &cobra.Command{
		Use:   "install",
		Short: "Install or converge RHOAI with Models-as-a-Service (idempotent, resumable)",
		Long: `Install runs every step of the install in dependency order, in parallel
where steps are independent. A re-run skips steps whose checkpoint matches and
whose live state is still as wanted, and continues after a failure from where
things stand. Run 'maasctl steps' to list the steps.

The database password is read from Vault (VAULT_ADDR, VAULT_TOKEN or
~/.vault-token, VAULT_CACERT, like the vault CLI) and generated once when absent.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runInstall(c, g, o) },
	}
	f := c.Flags()
	f.StringArrayVarP(&o.files, "file", "f", nil, "inventory YAML file (repeatable; later files win)")
	f.StringArrayVar(&o.sets, "set", nil, "override one inventory value, e.g. --set gateway.hostname=maas.apps.example.com (repeatable)")
	f.StringVarP(&o.output, "output", "o", "auto", "progress format: auto, tty, plain or json")
	f.StringVar(&o.vaultAddr, "vault-addr", "", "Vault address (default $VAULT_ADDR)")
	f.DurationVar(&o.lease, "lease-duration", 60*time.Second, "how long the run Lease of a killed run blocks others")
	return c
}

func runInstall(c *cobra.Command, g *globalOptions, o *installOptions) error {
	format, err := output.ParseFormat(o.output)
	if err != nil {
		return &usageError{err}
	}
	inv, err := inventory.Load(o.files, o.sets)
	if err != nil {
		return fmt.Errorf("%w: %w", steps.ErrInvalidInventory, err)
	}
	if o.vaultAddr != "" {
		inv.Vault.Address = o.vaultAddr
	}
	if err := inv.Validate(); err != nil {
		return fmt.Errorf("%w: %w", steps.ErrInvalidInventory, err)
	}
	cfg, err := g.kube.ToRESTConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	vc, err := vault.NewClient(vault.Options{Address: inv.Vault.Address})
	if err != nil {
		return err
	}
	log, sync, err := g.logger()
	if err != nil {
		return err
	}
	defer sync()
	_, err = steps.Install(c.Context(), steps.InstallOptions{
		Config:        cfg,
		Inventory:     inv,
		Secrets:       &steps.VaultSecrets{Client: vc, Inv: inv},
		Emit:          output.New(format, c.OutOrStdout()),
		Log:           log,
		ToolVersion:   version,
		LeaseDuration: o.lease,
	})
	if err != nil {
		return fmt.Errorf("%w\nfix the cause above and run 'maasctl install' again: finished steps are not repeated", err)
	}
	return nil
}
