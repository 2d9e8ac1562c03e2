package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newPlanCmd) }

// selectionFlags are --only, --skip and --from (install, plan, diff).
type selectionFlags struct {
	only, skip []string
	from       string
}

func (s *selectionFlags) addFlags(c *cobra.Command) {
	f := c.Flags()
	f.StringSliceVar(&s.only, "only", nil, "select only these steps (IDs or phase names, comma-separated; see maasctl steps); their dependencies must be done")
	f.StringSliceVar(&s.skip, "skip", nil, "leave these steps out (IDs or phase names); steps that depend on them need them done")
	f.StringVar(&s.from, "from", "", "select this step and every later one; earlier ones must be done")
}

func (s *selectionFlags) selection() session.Selection {
	return session.Selection{Only: s.only, Skip: s.skip, From: s.from}
}

func newPlanCmd(g *globalOptions) *cobra.Command {
	o := &readOptions{}
	sel := &selectionFlags{}
	c := &cobra.Command{
		Use:   "plan",
		Short: "List the steps 'maasctl install' would run and why (not done, inputs changed, drifted)",
		Long: `Plan evaluates every step the way install does before running it: a step
is skipped only when its checkpoint matches the current inputs (inventory and
maasctl version) and its live state is as wanted. It prints the steps that
would run with the reason, and changes nothing. Use 'maasctl diff' for the
object fields a run would change. Without -f, --set or --defaults it
compares against the inventory the cluster was installed from (maasctl
inventory show) and says so on its first line.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := o.selectedSession(c, g, sel)
			if err != nil {
				return err
			}
			rep, err := s.Plan(c.Context(), sel.selection())
			if err != nil {
				return err
			}
			if o.output == "json" {
				return writeJSON(c.OutOrStdout(), rep)
			}
			return writePlan(c.OutOrStdout(), rep)
		},
	}
	o.addFlags(c, "output format: text (a table) or json")
	sel.addFlags(c)
	return c
}

func writePlan(w io.Writer, rep *session.PlanReport) error {
	writeAgainst(w, rep.Against)
	run := rep.Run()
	if len(run) == 0 {
		if len(rep.Steps) == 1 {
			fmt.Fprintln(w, "Nothing to do: the one step is done and matches the live state.")
		} else {
			fmt.Fprintf(w, "Nothing to do: all %d steps are done and match the live state.\n", len(rep.Steps))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREASON\tDETAIL")
	for _, s := range run {
		detail := s.Detail
		if s.Reason == "drifted: "+s.Detail || s.Reason == "inputs changed; drifted: "+s.Detail {
			detail = ""
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, oneLine(s.Reason), oneLine(detail))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch done := len(rep.Steps) - len(run); {
	case done == 0 && len(run) == 1:
		fmt.Fprintln(w, "\nThe one step would run.")
	case done == 0:
		fmt.Fprintf(w, "\nAll %d steps would run.\n", len(run))
	case done == 1:
		fmt.Fprintf(w, "\n%d of %d steps would run; the other is done.\n", len(run), len(rep.Steps))
	default:
		fmt.Fprintf(w, "\n%d of %d steps would run; the others are done.\n", len(run), len(rep.Steps))
	}
	return nil
}

// selectedSession is readSession for plan and diff, with the
// --only/--skip/--from selection checked against the registry: an
// unknown step ID is a usage error (exit 2) listing the valid ones.
func (o *readOptions) selectedSession(c *cobra.Command, g *globalOptions, sel *selectionFlags) (*session.Session, error) {
	s, _, err := o.readSession(c, g)
	if err != nil {
		return nil, err
	}
	if err := s.CheckSelection(sel.selection()); err != nil {
		return nil, err
	}
	return s, nil
}
