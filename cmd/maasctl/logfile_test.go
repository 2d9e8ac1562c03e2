package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

// TestLogFileKeepsEveryLine: the --log-file debug log is not sampled; a
// run's hundreds of "api request" lines within a second all reach it
// (zap's production config would keep the first 100 and then one in 100).
func TestLogFileKeepsEveryLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "maasctl.log")
	g := &globalOptions{logFile: path}
	log, sync, err := g.logger()
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	for i := range n {
		log.Debug("api request", zap.Int("i", i))
	}
	sync()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), `"msg":"api request"`); got != n {
		t.Errorf("%d of %d debug lines in the log file", got, n)
	}
}

// fakeAPIServer is an API server on loopback that answers every request
// 403 Forbidden, as a cluster where the user may do nothing. Each request
// first logs an error through klog, as client-go's reflectors do when a
// wait ends ("Failed to watch ... context canceled"), while the command
// runs. It returns a kubeconfig that names it, with a bearer token.
func fakeAPIServer(t *testing.T) (url, kubeconfig string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		klog.ErrorS(errors.New("context canceled"), "Failed to watch", "reflector", "maasctl-logfile-test", "path", r.URL.Path)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden: %s"}`, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, writeKubeconfig(t, srv.URL)
}

// testToken is the bearer token of writeKubeconfig's user; it must never
// reach a debug log.
const testToken = "sha256~maasctl-test-token-not-for-logs"

// writeKubeconfig writes a kubeconfig whose context "trial" names server.
func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: trial
  cluster:
    server: %s
contexts:
- name: trial
  context:
    cluster: trial
    user: trial
current-context: trial
users:
- name: trial
  user:
    token: %s
`, server, testToken)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// captureStderr runs f with os.Stderr a pipe and returns what was written
// to it (klog without a logger writes there).
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	orig := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	defer func() {
		os.Stderr = orig
		_ = w.Close()
	}()
	f()
	os.Stderr = orig
	_ = w.Close()
	return <-done
}

// TestEveryClusterCommandWritesLogFile (trial defects: status, plan,
// verify and doctor ignored --log-file, uninstall left it empty, and
// client-go's klog lines reached stderr): every command that talks to
// the cluster writes its JSON debug log to --log-file, one "api request"
// line per request and no token, and client-go's klog lines go to that
// log, never to the command's stderr nor the process's.
func TestEveryClusterCommandWritesLogFile(t *testing.T) {
	url, kubeconfig := fakeAPIServer(t)
	// Vault is the fake server as well: it answers 403 at once.
	t.Setenv("VAULT_ADDR", url)
	t.Setenv("VAULT_TOKEN", "maasctl-test-vault-token")
	t.Cleanup(klog.ClearLogger)
	for _, args := range [][]string{
		{"install"},
		{"uninstall"},
		{"status"},
		{"plan"},
		{"diff"},
		{"verify", "--live-only", "--settle", "0"},
		{"doctor", "--live-only", "--settle", "0"},
		{"preflight"},
		{"inventory", "show"},
		{"gather", "--archive", filepath.Join(t.TempDir(), "gather.tar.gz")},
		{"migrate", "platform-config", "--dry-run"},
		{"database", "rotate-password"},
	} {
		t.Run(strings.Join(args[:min(2, len(args))], " "), func(t *testing.T) {
			logFile := filepath.Join(t.TempDir(), "maasctl.log")
			root := newRootCmd()
			var out, errb bytes.Buffer
			root.SetOut(&out)
			root.SetErr(&errb)
			root.SetArgs(append(args, "--kubeconfig", kubeconfig, "--log-file", logFile))
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			stderr := captureStderr(t, func() { _ = root.ExecuteContext(ctx) })
			if s := errb.String() + stderr; strings.Contains(s, "Failed to watch") {
				t.Errorf("client-go's klog line reached stderr:\n%s", s)
			}
			b, err := os.ReadFile(logFile)
			if err != nil {
				t.Fatalf("--log-file: %v", err)
			}
			log := string(b)
			if !strings.Contains(log, `"msg":"api request"`) {
				t.Errorf("no \"api request\" line in the debug log:\n%s", log)
			}
			if !strings.Contains(log, `"msg":"Failed to watch"`) || !strings.Contains(log, `"logger":"client-go"`) {
				t.Errorf("client-go's klog line is not in the debug log:\n%s", log)
			}
			if strings.Contains(log, testToken) {
				t.Errorf("the debug log holds the kubeconfig's token")
			}
			for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
				if !json.Valid([]byte(line)) {
					t.Errorf("debug log line is not JSON: %s", line)
				}
			}
		})
	}
}
