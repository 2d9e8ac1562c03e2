package main

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the server goroutine and the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestRunServesUntilCancelled(t *testing.T) {
	const token = "root-token-from-env-5d1e"
	addrFile := filepath.Join(t.TempDir(), "vault.addr")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var stderr syncBuffer
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--addr-file", addrFile, "--mount", "kv=2", "--mount", "legacy=1",
			"--policy", "app=" + writePolicy(t, `path "kv/data/app/*" { capabilities = ["read"] }`), "--auth", "ci=approle"},
			env(map[string]string{envToken: token}), &stderr, func(a string) { ready <- a })
	}()

	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("run returned before serving: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("server not ready after 10s")
	}
	b, err := os.ReadFile(addrFile)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != addr || !strings.HasPrefix(got, "http://127.0.0.1:") {
		t.Errorf("address file %q, want %q (http://127.0.0.1:PORT)", got, addr)
	}

	tests := []struct {
		name   string
		path   string
		token  string
		status int
	}{
		{name: "health", path: "/v1/sys/health", status: 200},
		{name: "kv v2 mount", path: "/v1/sys/internal/ui/mounts/kv/x", token: token, status: 200},
		{name: "kv v1 mount", path: "/v1/legacy/x", token: token, status: 404},
		{name: "wrong token", path: "/v1/kv/data/x", token: "other", status: 403},
		{name: "policy loaded", path: "/v1/sys/policies/acl/app", token: token, status: 200},
		{name: "approle enabled (login needs no token; GET is not allowed)", path: "/v1/auth/ci/login", status: 405},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest("GET", addr+tt.path, nil)
			if tt.token != "" {
				req.Header.Set("X-Vault-Token", tt.token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
			}
		})
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return 10s after cancellation")
	}
	if strings.Contains(stderr.String(), token) {
		t.Error("the token was printed")
	}
}

func TestRunRejects(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantErr string
	}{
		{name: "no token", args: []string{"--listen", "127.0.0.1:0"}, wantErr: "no root token"},
		{name: "non-loopback", args: []string{"--listen", "0.0.0.0:0"}, env: map[string]string{envToken: "t"}, wantErr: "not a loopback"},
		{name: "bad mount", args: []string{"--mount", "kv=3"}, env: map[string]string{envToken: "t"}, wantErr: "PATH=1 or PATH=2"},
		{name: "duplicate mount", args: []string{"--mount", "kv=2", "--mount", "kv=1"}, env: map[string]string{envToken: "t"}, wantErr: "given twice"},
		{name: "same tokens", args: []string{"--token", "t", "--read-only-token", "t"}, wantErr: "must differ"},
		{name: "extra args", args: []string{"--token", "t", "serve"}, wantErr: "unexpected arguments"},
		{name: "policy file missing", args: []string{"--token", "t", "--policy", "p=/nonexistent.hcl"}, wantErr: "policy p"},
		{name: "policy not HCL", args: []string{"--token", "t", "--policy", "p=" + badPolicy(t)}, wantErr: "failed to parse policy"},
		{name: "policy without file", args: []string{"--token", "t", "--policy", "p"}, wantErr: "NAME=VALUE"},
		{name: "unknown auth type", args: []string{"--token", "t", "--auth", "ldap=ldap"}, wantErr: "approle or kubernetes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr syncBuffer
			// A run that wrongly starts serving returns nil when this expires.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := run(ctx, tt.args, env(tt.env), &stderr, nil)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("run error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func writePolicy(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "policy.hcl")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func badPolicy(t *testing.T) string { return writePolicy(t, `path "a" { capabilities = `) }
