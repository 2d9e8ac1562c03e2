package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/inventory"
)

// writeTestKubeconfig writes a kubeconfig of one cluster (server), one
// user holding token and one context, "trial", its current-context.
func writeTestKubeconfig(t *testing.T, server, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: trial-cluster
  cluster:
    server: %s
contexts:
- name: trial
  context:
    cluster: trial-cluster
    user: trial-user
current-context: trial
users:
- name: trial-user
  user:
    token: %s
`, server, token)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExplainUnauthorized (trial defect: a kubeconfig with a bogus token
// gave "read the installed inventory (...): Unauthorized", naming neither
// the server, the kubeconfig nor the fix): a 401 anywhere in the error's
// tree, behind a 403 in an errors.Join too, names the server, the
// kubeconfig file, context and user and 'oc login', never the token, and
// wraps the original; a 403 alone and other errors stay as they are.
func TestExplainUnauthorized(t *testing.T) {
	const server, token = "https://api.example.com:6443", "sha256~secret-test-token"
	kubeconfig := writeTestKubeconfig(t, server, token)
	s := &Session{Inventory: &inventory.Inventory{}, cfg: &rest.Config{Host: server, BearerToken: token}, opts: Options{Kube: &KubeFlags{KubeConfig: kubeconfig}}}
	forbidden := fmt.Errorf("read Namespace maasctl: %w", apierrors.NewForbidden(schema.GroupResource{Resource: "namespaces"}, "maasctl", errors.New("RBAC")))
	unauthorized := fmt.Errorf("read the installed inventory: %w", apierrors.NewUnauthorized("Unauthorized"))
	got := s.ExplainAPIServer(errors.Join(forbidden, unauthorized), "maasctl status")
	var ua *UnauthorizedError
	if !errors.As(got, &ua) || !apierrors.IsForbidden(got) {
		t.Fatalf("got %v, want an UnauthorizedError wrapping the original", got)
	}
	msg := got.Error()
	for _, w := range []string{"API server " + server + " answered 401 Unauthorized", "from kubeconfig " + kubeconfig, `context "trial" (its current-context)`, `user "trial-user"`,
		"expired, revoked or wrong", "'oc login " + server + "'", "--kubeconfig and --context", "run 'maasctl status' again"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q missing from:\n%s", w, msg)
		}
	}
	if strings.Contains(msg, token) {
		t.Errorf("the token is printed:\n%s", msg)
	}
	if again := s.ExplainAPIServer(got, "maasctl status"); again != got {
		t.Errorf("explained twice: %v", again)
	}
	for name, err := range map[string]error{
		"forbidden": forbidden,
		"other":     errors.New("Unauthorized"),
	} {
		if got := s.ExplainAPIServer(err, "maasctl status"); got != err {
			t.Errorf("%s: %v was rewritten to %v", name, err, got)
		}
	}
}

// TestUnauthorizedTokenFromVault: with the cluster token from Vault, the
// 401 names the Vault path and says to store a current token there.
func TestUnauthorizedTokenFromVault(t *testing.T) {
	s := &Session{cfg: &rest.Config{Host: "https://api.example.com:6443"}, opts: Options{Kube: &KubeFlags{}, KubeTokenFromVault: "kv/data/lab/deployer:token"}}
	msg := s.ExplainUnauthorized(apierrors.NewUnauthorized("Unauthorized"), "maasctl install").Error()
	for _, w := range []string{"token from Vault kv/data/lab/deployer:token", "store a current token there", "run 'maasctl install' again"} {
		if !strings.Contains(msg, w) {
			t.Errorf("%q missing from:\n%s", w, msg)
		}
	}
}
