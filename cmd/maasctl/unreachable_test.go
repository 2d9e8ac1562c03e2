package main

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// closedPort returns https://127.0.0.1:<port> for a loopback port nothing
// listens on (it was listened on and closed).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "https://" + addr
}

// TestUnreachableAPIServer (trial defect: against a kubeconfig whose
// server was https://127.0.0.1:1, install said "read Namespace maasctl:
// ... connection refused" and "fix the cause above and run 'maasctl
// install' again", naming neither the server nor the kubeconfig): the
// first failure to reach the API server names the server URL, where it
// came from (kubeconfig file and context, or --server), the transport
// error and the fix; the exit code stays 1.
func TestUnreachableAPIServer(t *testing.T) {
	server := closedPort(t)
	kubeconfig := writeKubeconfig(t, server)
	t.Setenv("VAULT_ADDR", closedPort(t))
	t.Setenv("VAULT_TOKEN", "maasctl-test-vault-token")
	fromKubeconfig := []string{"from kubeconfig " + kubeconfig, `context "trial" (its current-context)`}
	for _, tc := range []struct {
		args []string
		from []string
	}{
		{[]string{"install", "--kubeconfig", kubeconfig}, fromKubeconfig},
		// --defaults: no installed inventory is read first; the first
		// request is the run's own.
		{[]string{"install", "--defaults", "-o", "plain", "--kubeconfig", kubeconfig}, fromKubeconfig},
		{[]string{"uninstall", "--kubeconfig", kubeconfig}, fromKubeconfig},
		{[]string{"status", "--kubeconfig", kubeconfig, "--context", "trial"}, []string{"from kubeconfig " + kubeconfig, `context "trial" (--context)`}},
		{[]string{"verify", "--kubeconfig", kubeconfig}, fromKubeconfig},
		{[]string{"doctor", "--kubeconfig", kubeconfig}, fromKubeconfig},
		// Their first request is then the release layout's: they stop
		// there instead of failing every check with the same error.
		{[]string{"verify", "--defaults", "--live-only", "--kubeconfig", kubeconfig}, fromKubeconfig},
		{[]string{"doctor", "--defaults", "--live-only", "--kubeconfig", kubeconfig}, fromKubeconfig},
		{[]string{"plan", "--kubeconfig", writeKubeconfig(t, "https://127.0.0.1:6443"), "--server", server}, []string{"from --server"}},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			msg, rerun, _, _ := failedRun(t, tc.args)
			want := append([]string{"cannot reach the Kubernetes API server " + server + " (", "connection refused",
				"--kubeconfig, --context or --server", "oc login", "run '" + rerun + "' again"}, tc.from...)
			for _, w := range want {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "fix the cause above") {
				t.Errorf("error still points at a step:\n%s", msg)
			}
		})
	}
}

// failedRun runs the root command with args (for a minute at most),
// checks that it failed with exitFailed, and returns its error's text,
// the command line that error should say to run again (the inventory
// flags kept, --defaults; never the connection's: those are what to
// fix), and what it wrote to stdout and stderr.
func failedRun(t *testing.T, args []string) (msg, rerun, stdout, stderr string) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errb)
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := root.ExecuteContext(ctx)
	if got := exitCode(ctx, err); got != exitFailed {
		t.Errorf("exit code %d, want %d", got, exitFailed)
	}
	if err == nil {
		t.Fatal("no error")
	}
	rerun = root.Name() + " " + args[0]
	if slices.Contains(args, "--defaults") {
		rerun += " --defaults"
	}
	return err.Error(), rerun, out.String(), errb.String()
}
