package main

import (
	"cmp"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newInventoryCmd) }

func newInventoryCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "inventory",
		Short: "Work with inventories: show the installed or the default one, import the Ansible role's variables",
		Args:  cobra.NoArgs,
	}
	var out, oldOut string
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
			out = cmp.Or(out, oldOut)
			if out == "" || out == "-" {
				_, err = c.OutOrStdout().Write(y)
				return err
			}
			if err := os.WriteFile(out, y, 0o644); err != nil {
				return fmt.Errorf("write %s: %w", out, err)
			}
			fmt.Fprintf(c.ErrOrStderr(), "maasctl: wrote %s (%s imported, %s left out)\n", out, output.Count(len(res.Imported), "variable", "variables"), output.Count(len(res.Unmapped), "value", "values"))
			return nil
		},
	}
	imp.Flags().StringVar(&out, "to", "", "write the inventory to this file (default stdout)")
	imp.Flags().StringVarP(&oldOut, "output", "o", "", "write the inventory to this file")
	_ = imp.Flags().MarkDeprecated("output", "use --to FILE; -o/--output names an output format in every other command")
	c.AddCommand(imp, newInventoryShowCmd(g))
	return c
}

func newInventoryShowCmd(g *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "show",
		Short: "Print the inventory the cluster was installed from (YAML), or with --defaults the default inventory",
		Long: `Show prints, as YAML that 'maasctl install -f' accepts, the inventory the
cluster was installed from, as the last install run that applied a step
stored it (ConfigMap maasctl-installed-inventory in namespace maasctl),
headed by comments saying where it came from (the -f files, the --set
paths), when and its digest. It is the redacted form: vault.address is
never stored (it comes from VAULT_ADDR or --vault-addr on every run), and
the inventory holds no other secret.

With --defaults it prints the default inventory, to copy from, and reads
nothing from the cluster.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if g.in.defaults {
				return writeInventoryYAML(c.OutOrStdout(), "# the default inventory of maasctl "+version+"\n", inventory.Default())
			}
			s, err := g.open(c)
			if err != nil {
				return err
			}
			inst, err := s.Installed(c.Context())
			if err != nil {
				return err
			}
			if inst == nil {
				return fmt.Errorf("no installed inventory is recorded in this cluster (ConfigMap %s/%s): it was not installed by this maasctl yet; 'maasctl inventory show --defaults' prints the default inventory", session.StateNamespace, session.InstalledInventoryConfigMap)
			}
			return writeInventoryYAML(c.OutOrStdout(), fmt.Sprintf("# %s\n# by maasctl %s; vault.address is not stored\n", inst.Describe(), inst.Source.ToolVersion), inst.Inventory)
		},
	}
}

func writeInventoryYAML(w io.Writer, header string, inv *inventory.Inventory) error {
	y, err := inv.Redacted().YAML()
	if err != nil {
		return err
	}
	_, err = io.WriteString(w, header+string(y))
	return err
}
