package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newStatusCmd) }

// readOptions are the flags of the read-only lifecycle commands (status,
// plan, diff) beside the global inventory inputs; Vault is optional (only
// the steps whose objects carry the database password need it).
type readOptions struct {
	output string
}

func (o *readOptions) addFlags(c *cobra.Command, outputHelp string) {
	c.Flags().StringVarP(&o.output, "output", "o", "table", outputHelp)
}

// readSession opens the session of the global flags for plan, status
// and diff (and verify, doctor, gather): with --output checked first,
// and without -f, --set or --defaults on the inventory the cluster was
// installed from (session.UseInstalled). It returns which inventory that
// is, and connects.
func (o *readOptions) readSession(c *cobra.Command, g *globalOptions) (*session.Session, string, error) {
	if err := checkOutput(o.output); err != nil { // text is table
		return nil, "", err
	}
	return readSession(c, g)
}

func readSession(c *cobra.Command, g *globalOptions) (*session.Session, string, error) {
	s, err := g.open(c)
	if err != nil {
		return nil, "", err
	}
	against, err := s.UseInstalled(c.Context())
	if err != nil {
		return nil, "", err
	}
	if err := s.Connect(c.Context()); err != nil {
		return nil, "", err
	}
	return s, against, nil
}

func newStatusCmd(g *globalOptions) *cobra.Command {
	o := &readOptions{}
	c := &cobra.Command{
		Use:   "status",
		Short: "Show every step's state (done, pending, drifted, failed), the operators' CSVs, the endpoint and the last run",
		Long: `Status reads the checkpoints maasctl keeps in the cluster and checks each
step against the live state, the way a re-run decides what to skip:

  done     the checkpoint matches the inputs and the live state is as wanted
  pending  never run, or the inventory (or maasctl version) changed since
  drifted  it ran, but the live state no longer matches
  failed   its last run failed
  unknown  it could not be checked (for example without Vault access)

Without -f, --set or --defaults it compares against the inventory the
cluster was installed from (maasctl inventory show) and says so on its
first line. It changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, _, err := o.readSession(c, g)
			if err != nil {
				return err
			}
			rep, err := s.Status(c.Context())
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(c.OutOrStdout(), rep)
			}
			return writeStatus(c.OutOrStdout(), rep)
		},
	}
	o.addFlags(c, "output format: text (a table) or json")
	return c
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func shortDur(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return fmt.Sprintf("%.1fs", d.Seconds())
}

// writeStatus prints the status report as tables.
func writeStatus(w io.Writer, rep *session.StatusReport) error {
	writeAgainst(w, rep.Against)
	if u := rep.Uninstalled; u != nil {
		fmt.Fprintf(w, "MaaS was uninstalled: 'maasctl uninstall' finished at %s; the steps below are pending on purpose; '%s' installs MaaS again\n", u.At.UTC().Format(time.RFC3339), installCommand(rep))
		for _, k := range u.Kept {
			fmt.Fprintln(w, "  kept: "+k)
		}
	}
	if r := rep.Running; r != nil {
		fmt.Fprintf(w, "A maasctl run is in progress: %s (Lease last renewed %s): the states below may change as it goes on\n",
			r.Holder, r.RenewTime.UTC().Format(time.RFC3339))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tSTATE\tLAST RUN\tTOOK\tDETAIL")
	for _, s := range rep.Steps {
		last, took := "-", "-"
		if s.LastRun != nil {
			last = s.LastRun.StartedAt.UTC().Format(time.RFC3339)
			took = shortDur(time.Duration(s.LastRun.DurationMS) * time.Millisecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.ID, s.State, last, took, oneLine(s.Detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATOR\tNAMESPACE\tCHANNEL\tCSV\tVERSION\tPHASE")
	for _, op := range rep.Operators {
		csv := op.InstalledCSV
		if csv == "" {
			csv = "- (" + op.Detail + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", op.Package, op.Namespace, op.Channel, csv, dash(op.Version), dash(op.Phase))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rep.EndpointProblem != "" {
		fmt.Fprintf(w, "\nEndpoint:  %s UNREACHABLE: %s\n", rep.Endpoint, rep.EndpointProblem)
	} else {
		fmt.Fprintf(w, "\nEndpoint:  %s\n", rep.Endpoint)
	}
	if rep.LastRun != nil {
		fmt.Fprintf(w, "Last run:  %s to %s (%s recorded, %s of step time)\n",
			rep.LastRun.FirstStart.UTC().Format(time.RFC3339), rep.LastRun.LastEnd.UTC().Format(time.RFC3339),
			output.Count(rep.LastRun.Steps, "step", "steps"), shortDur(rep.LastRun.StepTime))
	} else {
		fmt.Fprintf(w, "Last run:  none recorded (run '%s')\n", installCommand(rep))
	}
	return nil
}

// installCommand is the install command that re-applies the inventory
// rep compares against.
func installCommand(rep *session.StatusReport) string {
	if rep.InstallCommand != "" {
		return rep.InstallCommand
	}
	return "maasctl install"
}

// writeAgainst prints which inventory a report compares against.
func writeAgainst(w io.Writer, against string) {
	if against != "" {
		fmt.Fprintf(w, "Comparing against %s.\n\n", against)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine is s on one table row: line breaks become spaces, and nothing
// is cut (a cut detail lost the field that drifted in a pipe or a CI log;
// a terminal wraps the last column).
func oneLine(s string) string {
	return strings.ReplaceAll(s, "\n", " ")
}
