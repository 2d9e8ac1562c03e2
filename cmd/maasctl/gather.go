package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

func init() { commands = append(commands, newGatherCmd) }

type gatherOptions struct {
	archive   string
	debugLogs []string
	tail      int64
}

func newGatherCmd(g *globalOptions) *cobra.Command {
	o := &gatherOptions{}
	c := &cobra.Command{
		Use:   "gather",
		Short: "Collect objects, conditions, events, logs and checkpoints into a tar.gz for a support case",
		Long: `Gather writes one tar.gz with everything a support engineer needs: the
deployment's objects as YAML (Secrets keep only their key names), the
conditions of every object, the events of the namespaces involved, the last
log lines of operator, Kuadrant, database and maas-api pods where the API
server can reach them, maasctl's checkpoints, the read-only verify and doctor
reports, and the debug logs you name with --debug-log. Every file is scrubbed
of API keys, bearer and Vault tokens and database passwords. What could not
be collected is listed in errors.txt inside the archive.

Exit codes: 0 the archive was written (possibly with parts missing), 1 it
could not be written, 2 invalid flags or inventory, 130 interrupted.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runGather(c, g, o) },
	}
	f := c.Flags()
	f.StringVar(&o.archive, "archive", "", "archive path (default ./maasctl-gather-<UTC time>.tar.gz)")
	f.StringArrayVar(&o.debugLogs, "debug-log", nil, "a maasctl debug log (--log-file output) to include (repeatable)")
	f.Int64Var(&o.tail, "tail-lines", 500, "log lines per container")
	return c
}

func runGather(c *cobra.Command, g *globalOptions, o *gatherOptions) error {
	if o.tail <= 0 {
		return &usageError{fmt.Errorf("--tail-lines %d: must be positive", o.tail)}
	}
	s, err := connect(c, g)
	if err != nil {
		return err
	}
	res, err := s.Gather(c.Context(), session.GatherRequest{Archive: o.archive, DebugLogs: o.debugLogs, TailLines: o.tail})
	if err != nil {
		return err
	}
	fmt.Fprintf(c.OutOrStdout(), "wrote %s: %s", res.Path, output.Count(len(res.Files), "file", "files"))
	if n := len(res.Problems); n > 0 {
		fmt.Fprintf(c.OutOrStdout(), ", %d part(s) not collected (see errors.txt in the archive)", n)
	}
	fmt.Fprintln(c.OutOrStdout())
	return nil
}
