package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/maasctl/maasctl/steps"
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

func TestWriteDiffOneObjectSingular(t *testing.T) {
	rep := &session.DiffReport{Objects: []session.ObjectDiff{
		{Step: "access/subscription", Object: "MaaSSubscription models-as-a-service/x", Action: session.DiffUpdate,
			Changes: []session.FieldChange{{Path: "spec.priority", Op: "~", Old: 1.0, New: 2.0}}},
	}}
	var b strings.Builder
	if err := writeDiff(&b, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(b.String(), "\n1 object would change.\n") {
		t.Errorf("got:\n%s\nwant it to end with \"1 object would change.\"", b.String())
	}
}

func TestWritePlanSingularPlural(t *testing.T) {
	step := func(id string, run bool) steps.StepStatus {
		return steps.StepStatus{ID: id, Selected: true, WouldRun: run, Reason: "not done"}
	}
	for _, tc := range []struct {
		steps []steps.StepStatus
		want  string
	}{
		{[]steps.StepStatus{step("a", false)}, "Nothing to do: the one step is done and matches the live state.\n"},
		{[]steps.StepStatus{step("a", false), step("b", false)}, "Nothing to do: all 2 steps are done and match the live state.\n"},
		{[]steps.StepStatus{step("a", true)}, "\nThe one step would run.\n"},
		{[]steps.StepStatus{step("a", true), step("b", true)}, "\nAll 2 steps would run.\n"},
		{[]steps.StepStatus{step("a", true), step("b", false)}, "\n1 of 2 steps would run; the other is done.\n"},
		{[]steps.StepStatus{step("a", true), step("b", false), step("c", false)}, "\n1 of 3 steps would run; the others are done.\n"},
	} {
		var b strings.Builder
		if err := writePlan(&b, &session.PlanReport{Steps: tc.steps}); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(b.String(), tc.want) {
			t.Errorf("got:\n%s\nwant it to end with %q", b.String(), tc.want)
		}
	}
}

// TestWriteDiffNamesInventoryAndRemovals: diff says which inventory it
// compares against, as plan does (the trial of 2026-12-07: 'diff --set'
// on a cluster installed from site.yaml compared against the default
// inventory without saying so), and marks an object install removes.
func TestWriteDiffNamesInventoryAndRemovals(t *testing.T) {
	rep := &session.DiffReport{Against: "the default inventory with --set gateway.hostname", Objects: []session.ObjectDiff{
		{Step: "access/subscription", Object: "MaaSSubscription models-as-a-service/team-b", Action: session.DiffDelete, Note: "no longer in the inventory"},
	}}
	var b strings.Builder
	if err := writeDiff(&b, rep); err != nil {
		t.Fatal(err)
	}
	want := `Comparing against the default inventory with --set gateway.hostname.

- MaaSSubscription models-as-a-service/team-b (access/subscription): would be removed: no longer in the inventory

1 object would change.
`
	if b.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", b.String(), want)
	}
}
