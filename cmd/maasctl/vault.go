package main

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newVaultCmd) }

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
	hcl, err := session.VaultPolicy(c.Context(), inv, session.VaultPolicyRequest{
		KVVersion: o.kvVersion, KubeTokenPath: g.kubeAuth.tokenFromVault, RotatePassword: o.rotate, Notes: c.ErrOrStderr(),
	})
	if err != nil {
		return err
	}
	_, err = io.WriteString(c.OutOrStdout(), hcl)
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
			return session.VaultStatus(c.Context(), c.OutOrStdout(), inv, g.kubeAuth.tokenFromVault)
		},
	}
	return c
}
