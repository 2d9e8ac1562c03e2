package main

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/maasctl/maasctl/steps/session"
)

// TestNoInternalCaseIDsInUserText: the field-case ids (B01, N05, ...) name
// test cases of this project; they mean nothing to a user, so no string
// literal of the product's code (what reaches output, errors and fixes)
// quotes them. Comments and tests may.
func TestNoInternalCaseIDsInUserText(t *testing.T) {
	caseID := regexp.MustCompile(`\bcase [BN][0-9]{2}\b`)
	fset := token.NewFileSet()
	for _, dir := range []string{"../../cmd", "../../internal", "../../steps", "../../inventory", "../../waiters", "../../assets"} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			ast.Inspect(f, func(n ast.Node) bool {
				if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && caseID.MatchString(lit.Value) {
					t.Errorf("%s: user text quotes an internal case id: %s", fset.Position(lit.Pos()), caseID.FindString(lit.Value))
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestRerunCommand: the re-run advice after a failed install names the
// inventory the run used (a plain 'maasctl install' refuses on a cluster
// installed from -f site.yaml), quoted for a shell where needed.
func TestRerunCommand(t *testing.T) {
	for _, tc := range []struct {
		files, sets []string
		defaults    bool
		want        string
	}{
		{want: "maasctl install"},
		{files: []string{"site.yaml"}, want: "maasctl install -f site.yaml"},
		{files: []string{"a.yaml", "my site.yaml"}, sets: []string{"gateway.hostname=maas.apps.example.com"},
			want: "maasctl install -f a.yaml -f 'my site.yaml' --set gateway.hostname=maas.apps.example.com"},
		{defaults: true, sets: []string{"subscriptions[0].groups=[it's]"}, want: `maasctl install --defaults --set 'subscriptions[0].groups=[it'\''s]'`},
	} {
		if got := rerunCommand("install", tc.files, tc.sets, tc.defaults); got != tc.want {
			t.Errorf("rerunCommand(%v, %v, %v) = %q, want %q", tc.files, tc.sets, tc.defaults, got, tc.want)
		}
	}
	if got, want := rerunCommand("uninstall", []string{"site.yaml"}, nil, false, "--delete-data"), "maasctl uninstall --delete-data -f site.yaml"; got != want {
		t.Errorf("uninstall re-run = %q, want %q", got, want)
	}
}

// TestTimeoutHint: a run stopped by a wait's timeout says how long each
// wait could take and where that came from, and the re-run command keeps
// the --timeout given (the second new-user trial saw a timeout that named
// neither).
func TestTimeoutHint(t *testing.T) {
	base := errors.New("timed out waiting for Kuadrant kuadrant-system/kuadrant (Ready=False)")
	err := base
	g := &globalOptions{}
	if extra := timeoutHint(g, 900, &err); len(extra) != 0 {
		t.Errorf("without --timeout the re-run repeats %v, want nothing", extra)
	}
	if !errors.Is(err, base) || !strings.Contains(err.Error(), "each wait may take 900s (the inventory's waitTimeoutSeconds)") || !strings.Contains(err.Error(), "add --timeout 30m") {
		t.Errorf("without --timeout: %v", err)
	}
	err = base
	g.in.timeout = 5 * time.Minute
	extra := timeoutHint(g, 300, &err)
	if got := rerunCommand("install", []string{"site.yaml"}, nil, false, extra...); got != "maasctl install --timeout 5m0s -f site.yaml" {
		t.Errorf("re-run with --timeout 5m: %q", got)
	}
	if !errors.Is(err, base) || !strings.Contains(err.Error(), "each wait may take 5m0s (--timeout)") {
		t.Errorf("with --timeout: %v", err)
	}
}

// TestUninstallPlanStopped: a dry run without -f on a cluster installed
// from another inventory leads with the note that the plain uninstall
// stops and the command whose plan it shows (the second new-user trial
// got a refusal from the dry run); otherwise the usual first line.
func TestUninstallPlanStopped(t *testing.T) {
	steps := []session.UninstallStep{{ID: "access/auth-policy", Actions: []session.UninstallAction{{Verb: "delete", Object: "MaaSAuthPolicy models-as-a-service/llama-coder-access"}}}}
	var b strings.Builder
	if err := writeUninstallPlan(&b, &session.UninstallReport{Steps: steps, Stopped: "a plain 'maasctl uninstall' stops on this cluster", Command: "maasctl uninstall -f site.yaml"}, false); err != nil {
		t.Fatal(err)
	}
	first, rest, _ := strings.Cut(b.String(), "\n")
	if first != "Note: a plain 'maasctl uninstall' stops on this cluster." || !strings.HasPrefix(rest, "'maasctl uninstall -f site.yaml' would run these steps in this order") ||
		!strings.Contains(rest, "delete MaaSAuthPolicy models-as-a-service/llama-coder-access") {
		t.Errorf("dry-run plan:\n%s", b.String())
	}
	b.Reset()
	_ = writeUninstallPlan(&b, &session.UninstallReport{Steps: steps}, false)
	if !strings.HasPrefix(b.String(), "maasctl uninstall would run these steps in this order (dry run: nothing changed):\n") {
		t.Errorf("plain dry-run plan:\n%s", b.String())
	}
}
