package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newDatabaseCmd) }

func newDatabaseCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "database",
		Short: "Day-2 operations on the MaaS database",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newRotatePasswordCmd(g))
	return c
}

func newRotatePasswordCmd(g *globalOptions) *cobra.Command {
	var lease time.Duration
	var outFmt string
	c := &cobra.Command{
		Use:   "rotate-password",
		Short: "Rotate the database owner's password: Vault, the database, the Secrets, maas-api",
		Long: `Rotate-password gives the database owner role a new password, in this order,
each phase only once the one before it holds:

  vault           a new generated password as the next KV v2 version of
                  database.vaultPath (check-and-set on the version read; also
                  over a deleted latest version, which this command is the
                  explicit choice for)
  database        the new password is proven on the live database as the
                  owner by a short Job in the database namespace (psql to the
                  CNPG -rw Service, sslmode=require, the password from a
                  Secret); when the database refuses it, the Job first sets it
                  on the role, logging in with the current password
  secret          the basic-auth Secret CNPG's initdb reads
  maas-db-config  every copy of maas-db-config; then maas-api is restarted and
                  its rollout waited for

Killed at any point, run it (or install) again: it goes on with the password
Vault already holds instead of generating another, and maas-api only ever gets
a password the database has accepted. No password is printed or logged.
Its Vault token needs "update" on the database secret besides install's
rules: maasctl vault policy --rotate-password prints them.

With -o json it prints the run's events as 'maasctl install -o json' does (one
JSON object a line: run-started, started, progress, done or failed, run-done
with the summary), for step database/rotate-password.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkOutput(outFmt); err != nil {
				return err
			}
			s, err := g.open(c)
			if err != nil {
				return err
			}
			if err := s.RequireVault(); err != nil {
				return err
			}
			if err := s.Connect(c.Context()); err != nil {
				return err
			}
			log, sync, err := g.logger()
			if err != nil {
				return err
			}
			defer sync()
			out := c.OutOrStdout()
			ro := session.RotateOptions{Log: log, LeaseDuration: lease,
				Progress: func(id, msg string) { fmt.Fprintf(out, "%s: %s\n", id, msg) }}
			if outFmt == "json" {
				emit, end := output.New(output.JSON, out)
				defer end()
				ro.Progress, ro.Emit = nil, emit
			}
			res, err := s.RotatePassword(c.Context(), ro)
			if err != nil || outFmt == "json" {
				return err
			}
			fmt.Fprintf(out, "rotated: the database password is version %d of %s (resumed: %v)\n", res.Version, s.Inventory.Database.VaultPath, res.Resumed)
			return nil
		},
	}
	c.Flags().StringVarP(&outFmt, "output", "o", "text", "output format: text, or json (install's run events)")
	c.Flags().DurationVar(&lease, "lease-duration", 60*time.Second, "how long the run Lease of a killed run blocks others")
	return c
}
