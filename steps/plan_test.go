package steps

import (
	"errors"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/maasctl/maasctl/inventory"
)

func selected(t *testing.T, m map[string]bool) []string {
	t.Helper()
	var out []string
	for id := range m {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func TestSelectionResolve(t *testing.T) {
	reg, err := NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]bool{}
	for _, s := range reg.Steps {
		all[s.ID] = true
	}
	tests := []struct {
		name    string
		sel     Selection
		want    []string // nil: every step
		without []string // with want nil: every step except these
		err     string
	}{
		{name: "empty selects everything", sel: Selection{}},
		{name: "only one step keeps preflight", sel: Selection{Only: []string{"access/subscription"}},
			want: []string{"access/subscription", "preflight/checks"}},
		{name: "only a phase", sel: Selection{Only: []string{"access"}},
			want: []string{"access/auth-policy", "access/subscription", "preflight/checks"}},
		{name: "skip", sel: Selection{Skip: []string{"verify/status", "models"}},
			without: []string{"verify/status", "models/prepare", "models/provider", "models/model"}},
		{name: "skip preflight by name", sel: Selection{Only: []string{"verify/status"}, Skip: []string{"preflight"}},
			want: []string{"verify/status"}},
		{name: "from", sel: Selection{From: "models/model"},
			want: []string{"access/auth-policy", "access/subscription", "models/model", "preflight/checks", "verify/status"}},
		{name: "unknown only", sel: Selection{Only: []string{"platform/gatway"}}, err: "--only: unknown step platform/gatway (did you mean platform/gateway?); valid steps"},
		{name: "unknown skip", sel: Selection{Skip: []string{"nope"}}, err: "--skip: unknown step nope; valid steps"},
		{name: "two unknown", sel: Selection{Skip: []string{"databse", "nope"}}, err: "--skip: unknown step databse, nope (databse: did you mean database?); valid steps"},
		{name: "unknown from", sel: Selection{From: "x/y"}, err: "--from: unknown step x/y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.sel.Resolve(reg)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrUnknownStep) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				if !strings.Contains(err.Error(), "platform/gateway") {
					t.Errorf("the error should list the valid steps: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.want == nil && tt.without == nil:
				if got != nil {
					t.Errorf("got %v, want nil (all)", selected(t, got))
				}
			case tt.want != nil:
				if diff := cmp.Diff(tt.want, selected(t, got)); diff != "" {
					t.Errorf("selection (-want +got):\n%s", diff)
				}
			default:
				want := map[string]bool{}
				for id := range all {
					want[id] = true
				}
				for _, id := range tt.without {
					delete(want, id)
				}
				if diff := cmp.Diff(selected(t, want), selected(t, got)); diff != "" {
					t.Errorf("selection (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestDependencyErrorNamesWhatToRun(t *testing.T) {
	err := &DependencyError{Missing: map[string][]string{
		"access/subscription": {"models/model (never run)", "access/auth-policy (drifted: MaaSAuthPolicy missing)"},
	}}
	msg := err.Error()
	for _, want := range []string{"access/subscription needs models/model (never run)", "--only models/model,access/auth-policy", "nothing was changed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
}
