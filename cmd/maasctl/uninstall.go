package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newUninstallCmd) }

type uninstallOptions struct {
	output      string
	lease       time.Duration
	waitTimeout time.Duration
	deleteData  bool
	yes         bool
	dryRun      bool
	purgeCRDs   bool
	forceFinal  bool
}

func newUninstallCmd(g *globalOptions) *cobra.Command {
	o := &uninstallOptions{}
	c := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what maasctl installed, in the documented order; the database stays unless --delete-data",
		Long: `Uninstall removes, in the reverse order of the install steps (the "Remove"
section of the deployment README), every object maasctl's install created:
subscriptions and auth policies, model objects, DSC, DSCI, Route, Gateway,
Kuadrant, then the operators (Subscription, then its CSVs), then the
Namespaces it created. Each object is deleted while the operator that
finalises it still runs, and watched until it is gone; an object that does
not go (a finalizer nobody clears, a Terminating namespace) stops the
uninstall and is named.

Objects that existed before maasctl first ran are left in place (only
maasctl's managed-by label is removed). The openshift-default GatewayClass
stays while other Gateways use it. CRDs stay unless --purge-crds.

The database (CNPG Cluster, its PVCs, its Secret and the password in Vault)
and its operator stay unless --delete-data, which deletes every MaaS API key
and asks for confirmation on a terminal (--yes for scripts).

It ends with a scan for objects labelled app.kubernetes.io/managed-by=maasctl
that are still there. When it kept anything (the database), it leaves
maasctl's state and a mark (ConfigMap maasctl/maasctl-uninstalled) so that
status and doctor say MaaS was uninstalled and what was kept; the next
install deletes the mark. --dry-run prints the order and changes nothing.

Without -f, on a cluster installed from another inventory (maasctl
inventory show), uninstall stops before any write and names it: give -f
with that inventory, or --defaults to uninstall with the default one.
--dry-run without -f there shows what the installed inventory's uninstall
removes, says that the plain one stops, and names the command to run.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runUninstall(c, g, o) },
	}
	f := c.Flags()
	f.StringVarP(&o.output, "output", "o", "auto", "progress format: auto, tty, plain or json")
	f.DurationVar(&o.lease, "lease-duration", 60*time.Second, "how long the run Lease of a killed run blocks others")
	f.DurationVar(&o.waitTimeout, "wait-timeout", 0, "how long to wait for each step's objects to be gone")
	_ = f.MarkDeprecated("wait-timeout", "use --timeout, which bounds every wait of every command")
	f.BoolVar(&o.deleteData, "delete-data", false, "also delete the database: CNPG Cluster, PVCs, Secret, the password in Vault (every API key is lost)")
	f.BoolVar(&o.yes, "yes", false, "do not ask for confirmation of --delete-data")
	f.BoolVar(&o.dryRun, "dry-run", false, "print the order and what would be deleted or kept; change nothing")
	f.BoolVar(&o.purgeCRDs, "purge-crds", false, "also delete the CRDs of the operators removed, when no object of them is left")
	f.BoolVar(&o.forceFinal, "force-remove-finalizers", false, "when an object is stuck on a finalizer, clear its finalizers (skipping the cleanup they guard) and go on")
	return c
}

func runUninstall(c *cobra.Command, g *globalOptions, o *uninstallOptions) error {
	// Every run checks -o; a dry run prints its plan as text unless the
	// format is json.
	format := output.Format("")
	f, err := output.ParseFormat(o.output)
	if err != nil {
		return &usageError{err}
	}
	if !o.dryRun || f == output.JSON {
		format = f
	}
	if o.deleteData && !o.yes && !o.dryRun {
		if err := confirmDeleteData(c.InOrStdin(), c.ErrOrStderr()); err != nil {
			return err
		}
	}
	s, err := g.open(c)
	if err != nil {
		return err
	}
	if err := s.Connect(c.Context()); err != nil {
		return err
	}
	if verr := s.RequireVault(); o.deleteData && verr != nil && !o.dryRun {
		return &usageError{fmt.Errorf("--delete-data deletes the password in Vault too, but Vault is not configured: %w", verr)}
	}
	// A dry run without -f previews what the uninstall of this cluster
	// removes: on a cluster installed from another inventory, where a
	// plain uninstall stops, the installed inventory's plan (as plan and
	// status compare against it), with the command that runs it.
	stopped := ""
	if o.dryRun && len(g.in.files) == 0 && !g.in.defaults && len(g.in.sets) == 0 {
		stops, from, err := s.PlainRunStops(c.Context())
		if err != nil {
			return err
		}
		if stops {
			if _, err := s.UseInstalled(c.Context()); err != nil {
				return err
			}
			stopped = "a plain 'maasctl uninstall' stops on this cluster without changing anything: it was installed from " + strings.TrimPrefix(from, "the inventory installed from ") + ", and the default inventory deploys other objects"
		}
	}
	log, sync, err := g.logger()
	if err != nil {
		return err
	}
	defer sync()
	opts := session.UninstallOptions{
		Log:        log,
		DeleteData: o.deleteData, PurgeCRDs: o.purgeCRDs, ForceRemoveFinalizers: o.forceFinal,
		DryRun: o.dryRun, WaitTimeout: cmp.Or(o.waitTimeout, g.in.timeout), LeaseDuration: o.lease,
	}
	if !o.dryRun {
		emit, end := output.New(format, c.OutOrStdout())
		defer end() // the live view ends before the error is printed
		opts.Emit = emit
	}
	rep, err := s.Uninstall(c.Context(), opts)
	if err != nil {
		if rep == nil {
			return err
		}
		var extra []string
		if o.deleteData {
			extra = append(extra, "--delete-data")
		}
		if o.purgeCRDs {
			extra = append(extra, "--purge-crds")
		}
		if session.IsTimeout(err) && o.waitTimeout == 0 {
			extra = append(extra, timeoutHint(g, s.Inventory.WaitTimeoutSeconds, &err)...)
		}
		return fmt.Errorf("%w\nfix the cause above and run '%s' again: what is gone stays gone", err, rerunCommand("uninstall", g.in.files, g.in.sets, g.in.defaults, extra...))
	}
	if o.dryRun {
		if stopped != "" {
			// The command whose plan this is, with the flags that shaped it.
			rep.Stopped, rep.Command = stopped, s.CommandFor("uninstall")
			if o.deleteData {
				rep.Command += " --delete-data"
			}
			if o.purgeCRDs {
				rep.Command += " --purge-crds"
			}
		}
		if format == output.JSON {
			return writeJSON(c.OutOrStdout(), rep)
		}
		return writeUninstallPlan(c.OutOrStdout(), rep, o.deleteData)
	}
	if format != output.JSON {
		writeLeftovers(c.OutOrStdout(), rep)
	}
	return nil
}

// confirmDeleteData asks on a terminal; elsewhere --yes is required.
func confirmDeleteData(in io.Reader, errw io.Writer) error {
	f, ok := in.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return &usageError{errors.New("--delete-data deletes the database and every MaaS API key; without a terminal to confirm on, add --yes")}
	}
	fmt.Fprint(errw, "This deletes the MaaS database, its volumes and its password in Vault: every API key is lost.\nType 'delete' to continue: ")
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && line == "" {
		return &usageError{errors.New("--delete-data not confirmed")}
	}
	if strings.TrimSpace(line) != "delete" {
		return &usageError{errors.New("--delete-data not confirmed: nothing was changed")}
	}
	return nil
}

func writeUninstallPlan(w io.Writer, rep *session.UninstallReport, deleteData bool) error {
	if rep.Stopped != "" {
		fmt.Fprintf(w, "Note: %s.\n'%s' would run these steps in this order (dry run: nothing changed):\n", rep.Stopped, rep.Command)
	} else {
		fmt.Fprintln(w, "maasctl uninstall would run these steps in this order (dry run: nothing changed):")
	}
	n := 0
	for _, st := range rep.Steps {
		n++
		fmt.Fprintf(w, "%2d. %s\n", n, st.ID)
		if len(st.Actions) == 0 {
			fmt.Fprintln(w, "      nothing to remove")
		}
		for _, a := range st.Actions {
			line := fmt.Sprintf("      %-6s %s", a.Verb, a.Object)
			if a.Reason != "" {
				line += " (" + a.Reason + ")"
			}
			fmt.Fprintln(w, line)
		}
	}
	if !deleteData {
		fmt.Fprintln(w, "The database and its data are kept; --delete-data removes them (every API key is lost).")
	}
	return nil
}

func writeLeftovers(w io.Writer, rep *session.UninstallReport) {
	if len(rep.Kept) > 0 {
		fmt.Fprintln(w, "Kept on purpose:")
		for _, k := range rep.Kept {
			fmt.Fprintln(w, "  "+k)
		}
	}
	if len(rep.Orphans) > 0 {
		fmt.Fprintln(w, "Orphans (labelled app.kubernetes.io/managed-by=maasctl, not in maasctl's record; check and delete by hand):")
		for _, k := range rep.Orphans {
			fmt.Fprintln(w, "  "+k)
		}
	}
}
