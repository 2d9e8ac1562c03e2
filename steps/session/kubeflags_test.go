package session

import (
	"errors"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/inventory"
)

// TestUnknownContext (trial defect: 'maasctl status --context nosuch'
// said "--kubeconfig: context "nosuch" does not exist"): a --context the
// kubeconfig lacks is a FlagError of --context naming the file and the
// contexts it has; a kubeconfig that is not there stays a --kubeconfig
// error.
func TestUnknownContext(t *testing.T) {
	const token = "sha256~secret-test-token"
	kubeconfig := writeTestKubeconfig(t, "https://api.example.com:6443", token)
	s := &Session{Inventory: &inventory.Inventory{}, opts: Options{Kube: &KubeFlags{KubeConfig: kubeconfig, Context: "nosuch"}}}
	_, err := s.Config(t.Context())
	var fe *FlagError
	if !errors.As(err, &fe) || fe.Flag != "--context" {
		t.Fatalf("got %v, want a FlagError of --context", err)
	}
	want := `--context: context "nosuch" does not exist in ` + kubeconfig + `; the contexts there: trial (cluster "trial-cluster", the current-context)`
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got:\n%s\nwant it to start with:\n%s", err, want)
	}
	if strings.Contains(err.Error(), token) {
		t.Errorf("the token is printed: %s", err)
	}

	missing := &Session{Inventory: &inventory.Inventory{}, opts: Options{Kube: &KubeFlags{KubeConfig: kubeconfig + ".missing", Context: "nosuch"}}}
	_, err = missing.Config(t.Context())
	if !errors.As(err, &fe) || fe.Flag != "--kubeconfig" {
		t.Errorf("a missing kubeconfig: got %v, want a FlagError of --kubeconfig", err)
	}
}
