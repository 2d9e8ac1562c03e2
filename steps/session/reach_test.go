package session

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"

	"k8s.io/client-go/rest"
)

// TestExplainUnreachable: only a request to the session's own API server
// that got no answer is explained; a request to another host (Vault, the
// MaaS endpoint), an interrupted one and other errors are left as they
// are, and the explained error still wraps the original.
func TestExplainUnreachable(t *testing.T) {
	s := &Session{cfg: &rest.Config{Host: "https://api.example.com:6443"}, opts: Options{Kube: &KubeFlags{APIServer: "https://api.example.com:6443"}}}
	refused := func(u string) error {
		return fmt.Errorf("read Namespace maasctl: %w", &url.Error{Op: "Get", URL: u, Err: syscall.ECONNREFUSED})
	}
	own := refused("https://api.example.com:6443/api/v1/namespaces/maasctl")
	got := s.ExplainUnreachable(errors.Join(errors.New("other step"), own), "maasctl install")
	var u *UnreachableError
	if !errors.As(got, &u) || !errors.Is(got, syscall.ECONNREFUSED) {
		t.Fatalf("own server: %v, want an UnreachableError wrapping the original", got)
	}
	for _, w := range []string{"https://api.example.com:6443 (from --server)", "connection refused", "oc login", "run 'maasctl install' again"} {
		if !strings.Contains(got.Error(), w) {
			t.Errorf("%q missing from %q", w, got.Error())
		}
	}
	for name, err := range map[string]error{
		"vault":       refused("https://vault.example.com:8200/v1/kv/data/x"),
		"interrupted": &url.Error{Op: "Get", URL: "https://api.example.com:6443/api", Err: context.Canceled},
		"http error":  errors.New("namespaces \"maasctl\" is forbidden"),
	} {
		if got := s.ExplainUnreachable(err, "maasctl install"); got != err {
			t.Errorf("%s: %v was rewritten to %v", name, err, got)
		}
	}
}
