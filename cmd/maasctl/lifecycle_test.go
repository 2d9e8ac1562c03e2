package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/steps/session"
)

func TestWriteDiffMasksSecrets(t *testing.T) {
	rep := &session.DiffReport{Objects: []session.ObjectDiff{
		{Step: "database/secret", Object: "Secret rhoai-maas-db/maas-postgres-secret", Action: session.DiffUpdate,
			Changes: []session.FieldChange{{Path: "data.password", Op: "~", Masked: true}}},
		{Step: "access/subscription", Object: "MaaSSubscription models-as-a-service/x", Action: session.DiffUpdate,
			Changes: []session.FieldChange{{Path: "spec.priority", Op: "~", Old: 1.0, New: 2.0}}},
		{Step: "access/auth-policy", Object: "Namespace models-as-a-service", Action: session.DiffCreate,
			Changes: []session.FieldChange{{Path: "kind", Op: "+", New: "Namespace"}, {Path: `metadata.labels["a/b"]`, Op: "+", New: "c"}}},
	}}
	var b strings.Builder
	if err := writeDiff(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `~ Secret rhoai-maas-db/maas-postgres-secret (database/secret)
    ~ data.password: (secret value hidden)
~ MaaSSubscription models-as-a-service/x (access/subscription)
    ~ spec.priority: 1 -> 2
+ Namespace models-as-a-service (access/auth-policy): would be created
    + metadata.labels["a/b"]: "c"

3 objects would change.
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestConfirmDeleteDataNeedsYesWithoutTerminal(t *testing.T) {
	var errw strings.Builder
	err := confirmDeleteData(strings.NewReader("delete\n"), &errw)
	var ue *usageError
	if err == nil || !strings.Contains(err.Error(), "--yes") {
		t.Fatalf("got %v, want a usage error asking for --yes", err)
	}
	if !errors.As(err, &ue) {
		t.Errorf("%T is not a usage error (exit 2)", err)
	}
	if errw.Len() != 0 {
		t.Errorf("prompted without a terminal: %q", errw.String())
	}
}

func TestWriteDiffSaysWhenNothingChanges(t *testing.T) {
	var b strings.Builder
	if err := writeDiff(&b, &session.DiffReport{}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "No object would change: the cluster matches the inventory.\n" {
		t.Errorf("got %q", got)
	}
}
