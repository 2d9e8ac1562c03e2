package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/maasctl/maasctl/internal/output"
	"github.com/maasctl/maasctl/steps/session"
)

type installOptions struct {
	output  string
	lease   time.Duration
	ignore  []string
	approve bool
	sel     selectionFlags
	verify  session.VerifyOptions
}

func newInstallCmd(g *globalOptions) *cobra.Command {
	o := &installOptions{}
	c := &cobra.Command{
		Use:   "install",
		Short: "Install or converge RHOAI with Models-as-a-Service (idempotent, resumable)",
		Long: `Install runs every step of the install in dependency order, in parallel
where steps are independent. A re-run skips steps whose checkpoint matches and
whose live state is still as wanted (a step that only checks, like preflight,
runs and reports its warnings on every run), and continues after a failure
from where things stand. Run 'maasctl steps' to list the steps.

The inventory a run applies is remembered in the cluster (maasctl inventory
show prints it). Without -f, on a cluster installed from another inventory,
install stops before any write and names that inventory and the changes:
give -f with the inventory to install, or --defaults to go back to the
default inventory.

The database password is read from Vault (VAULT_ADDR, VAULT_TOKEN or
~/.vault-token, VAULT_CACERT, like the vault CLI) and generated once when absent.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runInstall(c, g, o) },
	}
	f := c.Flags()
	f.StringVarP(&o.output, "output", "o", "auto", "progress format: auto, tty, plain or json")
	f.DurationVar(&o.lease, "lease-duration", 60*time.Second, "how long the run Lease of a killed run blocks others")
	f.StringSliceVar(&o.ignore, "ignore-preflight", nil, "report the errors of these preflight checks as warnings (check names, or all; see maasctl preflight)")
	f.BoolVar(&o.approve, "approve-installplans", false, "approve a Manual InstallPlan when it installs exactly the expected CSV (startingCSV or the channel head)")
	o.sel.addFlags(c)
	f.StringVar(&o.verify.Endpoint, "verify-endpoint", "", "MaaS base URL: the last step then also proves the request path (key, models, chat, 401; see maasctl verify)")
	f.StringVar(&o.verify.CAFile, "verify-ca-file", "", "PEM CA bundle to trust for --verify-endpoint")
	f.BoolVar(&o.verify.InsecureSkipTLSVerify, "verify-insecure-skip-tls-verify", false, "do not verify the certificate of --verify-endpoint")
	f.BoolVar(&o.verify.ProbeQuota, "verify-probe-quota", false, "with --verify-endpoint, also expect 429 from a temporary low-limit probe subscription")
	return c
}

func runInstall(c *cobra.Command, g *globalOptions, o *installOptions) error {
	format, err := output.ParseFormat(o.output)
	if err != nil {
		return &usageError{err}
	}
	if err := session.ValidateIgnore(o.ignore); err != nil {
		return &usageError{err}
	}
	s, err := g.open(c) // inventory or Ansible vars, --set, Vault
	if err != nil {
		return err
	}
	if err := s.CheckSelection(o.sel.selection()); err != nil {
		return err
	}
	if err := s.RequireVault(); err != nil { // the auth method of the inventory
		return err
	}
	if err := s.Connect(c.Context()); err != nil { // kube flags, --kube-token-from-vault
		return err
	}
	log, sync, err := g.logger()
	if err != nil {
		return err
	}
	defer sync()
	emit, end := output.New(format, c.OutOrStdout())
	defer end() // the live view ends before the error is printed
	err = s.Install(c.Context(), session.InstallOptions{
		Emit:          emit,
		Log:           log,
		LeaseDuration: o.lease,
		Policy:        session.Policy{IgnorePreflight: o.ignore, ApproveInstallPlans: o.approve},
		Selection:     o.sel.selection(),
		Verify:        o.verify,
	})
	var usage *session.UsageError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &usage):
		return err // --only/--skip/--from: nothing was changed (exit 2)
	case session.IsLockHeld(err) || errors.Is(err, session.ErrInventoryChanged):
		return err // its message already says what to run
	}
	var extra []string
	if session.IsTimeout(err) {
		extra = timeoutHint(g, s.Inventory.WaitTimeoutSeconds, &err)
	}
	return fmt.Errorf("%w\nfix the cause above and run '%s' again: finished steps are not repeated", err, rerunCommand("install", g.in.files, g.in.sets, g.in.defaults, extra...))
}

// timeoutHint adds to a run's error, when a wait ran out of time, how
// long each wait may take and where that bound came from (--timeout, or
// the inventory's waitTimeoutSeconds), and returns the --timeout flag the
// re-run command repeats (none when it was not given): an operator that is
// only slow gets more time that way, not by editing the inventory.
func timeoutHint(g *globalOptions, seconds int, err *error) []string {
	if g.in.timeout > 0 {
		*err = fmt.Errorf("%w\neach wait may take %s (--timeout); if the objects named are only slow, not stuck, give a longer --timeout", *err, g.in.timeout)
		return []string{"--timeout", g.in.timeout.String()}
	}
	*err = fmt.Errorf("%w\neach wait may take %ds (the inventory's waitTimeoutSeconds); if the objects named are only slow, not stuck, add --timeout 30m (it changes no object)", *err, seconds)
	return nil
}

// rerunCommand is the command line that runs cmd again on the same
// inventory: its -f files, --set values and --defaults as given (a plain
// 'maasctl install' refuses on a cluster installed from another
// inventory), then extra (the command's own flags that change what it
// does). Values with spaces or shell characters are single-quoted.
// Inventory values never hold a secret (the password lives in Vault).
func rerunCommand(cmd string, files, sets []string, defaults bool, extra ...string) string {
	parts := append([]string{"maasctl", cmd}, extra...)
	for _, f := range files {
		parts = append(parts, "-f", shellQuote(f))
	}
	if defaults {
		parts = append(parts, "--defaults")
	}
	for _, s := range sets {
		parts = append(parts, "--set", shellQuote(s))
	}
	return strings.Join(parts, " ")
}

// shellQuote single-quotes s when a POSIX shell would split or expand it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\n'\"\\$`*?[]{}()<>|&;#~!") {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
