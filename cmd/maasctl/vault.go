package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/steps/session"
	"github.com/maasctl/maasctl/vault"
)

func init() { commands = append(commands, newVaultCmd) }

// keepVaultAlive renews the Vault token (or logs in again) in the background
// until the returned function is called. Renewals go to the debug log;
// a token that can no longer be extended is also a warning on stderr.
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

type vaultOptions struct {
	kvVersion string
	rotate    bool
}

func newVaultCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "vault",
		Short: "Vault helpers: the policy maasctl needs, and a check of the configured access",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newVaultPolicyCmd(g), newVaultStatusCmd(g))
	return c
}

func newVaultPolicyCmd(g *globalOptions) *cobra.Command {
	o := &vaultOptions{}
	c := &cobra.Command{
		Use:   "policy",
		Short: "Print the least-privilege Vault policy 'maasctl install' needs for the inventory",
		Long: `Policy prints, in Vault's HCL policy syntax, exactly the rules 'maasctl install'
uses for this inventory: the database secret, the cluster token from Vault
(--kube-token-from-vault or vault.kubeTokenPath) if any, and the token
self-service paths. KV v2 paths carry data/, as Vault's API (and so the
policy) requires.

With --kv-version auto, maasctl asks Vault for each mount's KV version when
it can (VAULT_ADDR and a token or the configured login); otherwise KV v2 is
assumed and a note goes to stderr.

  maasctl vault policy -f inventory.yaml | vault policy write maasctl -

'maasctl database rotate-password' writes a new version of the database
secret, which needs "update" too: add --rotate-password for the token that
rotates.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runVaultPolicy(c, g, o) },
	}
	c.Flags().StringVar(&o.kvVersion, "kv-version", "auto", "KV version of the mounts: auto (ask Vault), 1 or 2")
	c.Flags().BoolVar(&o.rotate, "rotate-password", false, "also grant what 'maasctl database rotate-password' needs (update on the database secret)")
	return c
}

func runVaultPolicy(c *cobra.Command, g *globalOptions, o *vaultOptions) error {
	inv, err := g.inventory() // the same inputs as install, Ansible vars included
	if err != nil {
		return err
	}
	ctx := c.Context()
	var locate func(string) (vault.Location, error)
	how := ""
	switch o.kvVersion {
	case "1", "2":
		n, _ := strconv.Atoi(o.kvVersion)
		locate = func(p string) (vault.Location, error) { return vault.LocationFor(p, n) }
		how = "KV v" + o.kvVersion + " (--kv-version)"
	case "auto":
		vc, cerr := session.VaultClient(inv)
		if cerr == nil {
			how = "as reported by Vault at " + vc.Address()
		}
		locate = func(p string) (vault.Location, error) {
			if cerr == nil {
				loc, err := vc.Resolve(ctx, p)
				if err == nil {
					return loc, nil
				}
				cerr = err
			}
			fmt.Fprintf(c.ErrOrStderr(), "maasctl: note: cannot ask Vault for the KV version of %s (%v); assuming KV v2, pass --kv-version 1 for a KV v1 mount\n", p, cerr)
			how = "KV v2 assumed (Vault could not be asked)"
			return vault.LocationFor(p, 2)
		}
	default:
		return &usageError{fmt.Errorf("--kv-version %q: want auto, 1 or 2", o.kvVersion)}
	}
	p, err := steps.VaultPolicy(inv, steps.VaultPolicyOptions{KubeTokenPath: g.kubeAuth.tokenFromVault, Locate: locate, RotatePassword: o.rotate})
	if err != nil {
		return err
	}
	p.Header += "\nKV versions: " + how + "."
	_, err = io.WriteString(c.OutOrStdout(), p.HCL())
	return err
}

func newVaultStatusCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "status",
		Short: "Log in to Vault as 'maasctl install' would and check the paths it uses (no values shown, nothing written)",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			inv, err := g.inventory() // the same inputs as install, Ansible vars included
			if err != nil {
				return err
			}
			return runVaultStatus(c.Context(), c.OutOrStdout(), g, inv)
		},
	}
	return c
}

func runVaultStatus(ctx context.Context, out io.Writer, g *globalOptions, inv *inventory.Inventory) error {
	vc, err := session.VaultClient(inv)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Vault:          %s\n", vc.Address())
	info, err := vc.LookupSelf(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Token:          %s\n", info)
	loc, err := vc.Resolve(ctx, inv.Database.VaultPath)
	if err != nil {
		return err
	}
	_, found, err := vc.ReadSecret(ctx, inv.Database.VaultPath)
	if err != nil {
		return err
	}
	state := "exists"
	if !found {
		state = "absent: the first install generates it (needs \"create\" on " + loc.DataPath() + ")"
	}
	fmt.Fprintf(out, "Database:       %s -> %s (KV v%d): %s\n", inv.Database.VaultPath, loc.DataPath(), loc.KVVersion, state)
	spec := g.kubeAuth.tokenFromVault
	if spec == "" {
		spec = inv.Vault.KubeTokenPath
	}
	if spec != "" {
		path, key, err := vault.ParseKeyPath(spec)
		if err != nil {
			return &usageError{err}
		}
		kl, err := vc.Resolve(ctx, path)
		if err != nil {
			return err
		}
		if _, err := vc.ReadKey(ctx, path, key); err != nil {
			return err
		}
		fmt.Fprintf(out, "Cluster token:  %s -> %s (KV v%d): key %q present\n", spec, kl.DataPath(), kl.KVVersion, key)
	}
	return nil
}
