package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newDiffCmd) }

// exitDiffChanged is diff's exit code when something would change (like
// diff(1) and 'kubectl diff', so a CI gate can tell it from an error).
const exitDiffChanged = 2

func newDiffCmd(g *globalOptions) *cobra.Command {
	o := &readOptions{}
	sel := &selectionFlags{}
	c := &cobra.Command{
		Use:   "diff",
		Short: "Show, object by object and field by field, what 'maasctl install' would change (exit 2 when anything would)",
		Long: `Diff applies every object the install steps write with server-side apply in
dry-run mode and compares the result with the live object, field by field
(managedFields, status and server-maintained metadata are left out; Secret
values are masked). Objects whose kind is not served yet, because an
earlier step installs its operator, are reported as unknown instead of
passing silently.

Exit codes: 0 nothing would change (and nothing is printed), 2 something
would change or cannot be known yet, 1 an error. It changes nothing.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			s, err := o.selectedSession(c, g, sel)
			if err != nil {
				return err
			}
			rep, err := s.Diff(c.Context(), sel.selection())
			if err != nil {
				return err
			}
			if !rep.Changed() {
				if o.output == "json" {
					return writeJSON(c.OutOrStdout(), rep)
				}
				return nil
			}
			if o.output == "json" {
				err = writeJSON(c.OutOrStdout(), rep)
			} else {
				err = writeDiff(c.OutOrStdout(), rep)
			}
			if err != nil {
				return err
			}
			os.Exit(exitDiffChanged)
			return nil
		},
	}
	o.addFlags(c, "output format: table (text) or json")
	sel.addFlags(c)
	return c
}

func value(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

var identityField = map[string]bool{"apiVersion": true, "kind": true, "metadata.name": true, "metadata.namespace": true}

// writeDiff prints one block per object:
//
//	~ MaaSSubscription models-as-a-service/llama-coder-default (access/subscription)
//	    ~ spec.modelRefs[0].tokenRateLimits[0].limit: 5 -> 200000
//	- MaaSSubscription models-as-a-service/team-b (access/subscription): would be removed: no longer in the inventory
func writeDiff(w io.Writer, rep *session.DiffReport) error {
	mark := map[string]string{session.DiffCreate: "+", session.DiffUpdate: "~", session.DiffUnknown: "?", session.DiffDelete: "-"}
	if len(rep.Objects) > 0 {
		writeAgainst(w, rep.Against) // as plan says it
	}
	for _, d := range rep.Objects {
		fmt.Fprintf(w, "%s %s (%s)", mark[d.Action], d.Object, d.Step)
		switch d.Action {
		case session.DiffCreate:
			fmt.Fprint(w, ": would be created")
		case session.DiffDelete:
			fmt.Fprint(w, ": would be removed")
		}
		if d.Note != "" {
			fmt.Fprint(w, ": "+d.Note)
		}
		fmt.Fprintln(w)
		for _, ch := range d.Changes {
			if d.Action == session.DiffCreate && identityField[ch.Path] {
				continue // the header names the object
			}
			switch {
			case ch.Masked:
				fmt.Fprintf(w, "    %s %s: (secret value hidden)\n", ch.Op, ch.Path)
			case ch.Op == "+":
				fmt.Fprintf(w, "    + %s: %s\n", ch.Path, value(ch.New))
			case ch.Op == "-":
				fmt.Fprintf(w, "    - %s: %s\n", ch.Path, value(ch.Old))
			default:
				fmt.Fprintf(w, "    ~ %s: %s -> %s\n", ch.Path, value(ch.Old), value(ch.New))
			}
		}
	}
	if len(rep.Objects) == 0 {
		fmt.Fprintln(w, "No object would change: the cluster matches the inventory.")
		return nil
	}
	fmt.Fprintf(w, "\n%s would change.\n", output.Count(len(rep.Objects), "object", "objects"))
	return nil
}
