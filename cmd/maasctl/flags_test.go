package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// walk calls f on c and every command below it.
func walk(c *cobra.Command, f func(*cobra.Command)) {
	f(c)
	for _, s := range c.Commands() {
		walk(s, f)
	}
}

// TestFlagMeanings (issue 17): -o/--output names an output format in every
// command (its help says "format"; a directory or file has its own flag,
// the old -o spelling only deprecated), and every wait is bounded by the
// one global --timeout: no command has a timeout flag of its own beyond
// the per-request --request-timeout of verify and doctor and the
// deprecated --wait-timeout.
func TestFlagMeanings(t *testing.T) {
	root := newRootCmd()
	if root.PersistentFlags().Lookup("timeout") == nil {
		t.Fatal("no global --timeout")
	}
	walk(root, func(c *cobra.Command) {
		c.LocalNonPersistentFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "output" && f.Deprecated == "" && !strings.Contains(f.Usage, "format") {
				t.Errorf("%s: -o/--output is %q, not an output format", c.CommandPath(), f.Usage)
			}
			if strings.Contains(f.Name, "timeout") && f.Deprecated == "" && f.Name != "request-timeout" {
				t.Errorf("%s: --%s is a timeout flag of its own; use the global --timeout", c.CommandPath(), f.Name)
			}
		})
	})
}

// TestTimeoutFlag: --timeout under a second is refused naming the flag,
// before anything is read from a cluster.
func TestTimeoutFlag(t *testing.T) {
	for _, args := range [][]string{{"status", "--timeout", "10ms"}, {"migrate", "tiers", "--timeout", "-1s", "--dry-run"}} {
		root := newRootCmd()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(append(args, "--kubeconfig", "/nonexistent"))
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), "--timeout") || !strings.Contains(err.Error(), "under a second") {
			t.Errorf("%v: error %v, want one naming --timeout", args, err)
		}
	}
}

// TestAsPlugin: installed as kubectl-maas or oc-maas, help and usage lines
// show "kubectl maas" / "oc maas"; as maasctl they stay "maasctl".
func TestAsPlugin(t *testing.T) {
	for argv0, want := range map[string]string{"/usr/local/bin/kubectl-maas": "kubectl maas", "oc-maas": "oc maas", "/opt/bin/maasctl": "maasctl"} {
		root := newRootCmd()
		asPlugin(root, argv0)
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs([]string{"install", "--help"})
		if err := root.Execute(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "\n  "+want+" install") {
			t.Errorf("%s: usage does not read %q install:\n%s", argv0, want, out.String())
		}
	}
}

// TestArgumentMistakesAreUsageErrors: an unknown command or subcommand,
// an argument a command takes none of, and a kubeconfig that is not there
// exit 2 (invalid flags) before anything is sent; a command group alone
// prints its help and exits 0.
func TestArgumentMistakesAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want int
		msg  string
	}{
		{[]string{"nosuchcmd"}, exitBadInput, `unknown command "nosuchcmd" for "maasctl"`},
		{[]string{"instal"}, exitBadInput, "did you mean install?"},
		{[]string{"install", "extra-arg"}, exitBadInput, `unknown command "extra-arg" for "maasctl install"`},
		{[]string{"database", "nosuch"}, exitBadInput, `unknown command "nosuch" for "maasctl database"`},
		{[]string{"status", "--kubeconfig", "/nonexistent"}, exitBadInput, "--kubeconfig: stat /nonexistent"},
		{[]string{"database"}, exitOK, ""},
		// Before any connection: no kubeconfig is needed to be told.
		{[]string{"verify", "--settle", "-1s", "--kubeconfig", "/nonexistent"}, exitBadInput, "--settle -1s: want a duration of 0 or more"},
		{[]string{"doctor", "--settle", "-1s", "--kubeconfig", "/nonexistent"}, exitBadInput, "--settle -1s: want a duration of 0 or more"},
	} {
		root := newRootCmd()
		var out, errb bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errb)
		root.SetArgs(tc.args)
		err := root.ExecuteContext(t.Context())
		if got := exitCode(t.Context(), err); got != tc.want || (tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg))) {
			t.Errorf("%v: exit %d, error %v; want exit %d and an error holding %q", tc.args, got, err, tc.want, tc.msg)
		}
	}
}

// TestVersionFlag: --version prints what the version command prints.
func TestVersionFlag(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}} {
		root := newRootCmd()
		var out bytes.Buffer
		root.SetOut(&out)
		root.SetArgs(args)
		if err := root.ExecuteContext(t.Context()); err != nil || out.String() != "maasctl "+version+"\n" {
			t.Errorf("%v: error %v, output %q; want %q", args, err, out.String(), "maasctl "+version+"\n")
		}
	}
}
