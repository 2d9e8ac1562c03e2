package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/steps/session"
)

func newStepsCmd(g *globalOptions) *cobra.Command {
	c := &cobra.Command{
		Use:   "steps",
		Short: "List the install steps in dependency order, with what each waits for",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			inv, err := g.inventory() // the same inputs as install, Ansible vars included
			if err != nil {
				return err
			}
			order, err := session.Steps(inv)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "STEP\tAFTER\tTITLE")
			for _, s := range order {
				after := strings.Join(s.After, ",")
				if after == "" {
					after = "-"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\n", s.ID, after, s.Title)
			}
			return w.Flush()
		},
	}
	return c
}
