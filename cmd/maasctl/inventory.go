package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/inventory"
)

func init() { commands = append(commands, newInventoryCmd) }

func newInventoryCmd(*globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "inventory",
		Short: "Work with inventories: import the Ansible role's variables",
		Args:  cobra.NoArgs,
	}
	var out string
	imp := &cobra.Command{
		Use:   "import FILE...",
		Short: "Convert Ansible group_vars/host_vars (rhoai_maas_* variables) into a maasctl inventory",
		Long: `Import reads the variables of the original Ansible role (rhoai_maas_*, see
"Configuration reference" and "Administer" in the deployment README) from
group_vars/host_vars YAML files and writes the equivalent maasctl inventory.
Give the files in Ansible's precedence order (group_vars before host_vars):
a later file wins per variable. Values only Ansible can evaluate (Jinja
expressions, lookups, vault ciphertext) and unknown variables or keys are
listed on stderr and in the file's header, and left out, never guessed.

'maasctl install -f' also accepts such a vars file directly, as long as it
holds nothing that needs to be left out.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			res, err := inventory.ImportAnsible(args...)
			if err != nil {
				return err
			}
			y, err := res.YAML()
			if err != nil {
				return err
			}
			for _, u := range res.Unmapped {
				fmt.Fprintln(c.ErrOrStderr(), "maasctl: not imported:", u)
			}
			if out == "" || out == "-" {
				_, err = c.OutOrStdout().Write(y)
				return err
			}
			if err := os.WriteFile(out, y, 0o644); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "maasctl: wrote %s (%d variables imported, %d values left out)\n", out, len(res.Imported), len(res.Unmapped))
			return nil
		},
	}
	imp.Flags().StringVarP(&out, "output", "o", "", "write the inventory to this file (default stdout)")
	c.AddCommand(imp)
	return c
}
