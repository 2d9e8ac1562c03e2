package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// unauthorizedAPIServer is a loopback fake API server that answers every
// request 401 with the Kubernetes Status an API server sends for
// credentials it does not accept.
func unauthorizedAPIServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestUnauthorizedAPIServer (trial defect: with a bogus token in the
// kubeconfig, status said "read the installed inventory (ConfigMap
// maasctl/maasctl-installed-inventory): Unauthorized", and install
// added "fix the cause above and run 'maasctl install' again: finished
// steps are not repeated" though no step ran): the first 401 names the
// API server, where the credentials came from (kubeconfig file, context
// and user), that they are not accepted, and the fix ('oc login' again,
// --kubeconfig/--context), then the command to run again; never the
// token. The exit code stays 1.
func TestUnauthorizedAPIServer(t *testing.T) {
	server := unauthorizedAPIServer(t)
	kubeconfig := writeKubeconfig(t, server)
	t.Setenv("VAULT_ADDR", closedPort(t))
	t.Setenv("VAULT_TOKEN", "maasctl-test-vault-token")
	current := `context "trial" (its current-context)`
	for _, tc := range []struct {
		args    []string
		context string
	}{
		{[]string{"status", "--kubeconfig", kubeconfig}, current},
		{[]string{"status", "--kubeconfig", kubeconfig, "--context", "trial"}, `context "trial" (--context)`},
		{[]string{"plan", "--kubeconfig", kubeconfig}, current},
		{[]string{"verify", "--kubeconfig", kubeconfig}, current},
		{[]string{"doctor", "--kubeconfig", kubeconfig}, current},
		{[]string{"install", "--kubeconfig", kubeconfig}, current},
		// --defaults: no installed inventory is read first; the first
		// request is the run's own (install's Namespace; verify's and
		// doctor's release layout, where they stop instead of failing
		// every check with "Unauthorized").
		{[]string{"install", "--defaults", "-o", "plain", "--kubeconfig", kubeconfig}, current},
		{[]string{"verify", "--defaults", "--live-only", "--kubeconfig", kubeconfig}, current},
		{[]string{"doctor", "--defaults", "--live-only", "--kubeconfig", kubeconfig}, current},
		{[]string{"uninstall", "--kubeconfig", kubeconfig}, current},
		{[]string{"preflight", "--kubeconfig", kubeconfig}, current},
	} {
		t.Run(strings.Join(tc.args[:2], " "), func(t *testing.T) {
			msg, rerun, stdout, stderr := failedRun(t, tc.args)
			for _, w := range []string{"the Kubernetes API server " + server + " answered 401 Unauthorized",
				"from kubeconfig " + kubeconfig, tc.context, `user "trial"`, "expired, revoked or wrong",
				"'oc login " + server + "'", "--kubeconfig and --context", "run '" + rerun + "' again"} {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q:\n%s", w, msg)
				}
			}
			if strings.Contains(msg, "fix the cause above") || strings.Contains(msg, "finished steps") {
				t.Errorf("error speaks of steps though none ran:\n%s", msg)
			}
			for what, s := range map[string]string{"error": msg, "stdout": stdout, "stderr": stderr} {
				if strings.Contains(s, testToken) {
					t.Errorf("the %s holds the kubeconfig's token:\n%s", what, s)
				}
			}
		})
	}
}
