package main

import (
	"go/build"
	"os/exec"
	"strings"
	"testing"
)

// TestCommandsUseOnlyTheFrontDoor holds the layout rule of issue 13: the
// commands are flags plus one call of the front door each, so cmd/maasctl
// imports, of this module, only the front door (steps/session), the
// inventory and the output renderers (internal/output). Anything else it
// needs belongs in steps/session.
func TestCommandsUseOnlyTheFrontDoor(t *testing.T) {
	const module = "github.com/maasctl/maasctl"
	allowed := map[string]bool{
		module + "/steps/session":   true,
		module + "/inventory":       true,
		module + "/internal/output": true,
	}
	pkg, err := build.ImportDir(".", 0) // the files go build compiles, tests left out
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found: the test no longer reads cmd/maasctl")
	}
	for _, imp := range pkg.Imports {
		if (imp == module || strings.HasPrefix(imp, module+"/")) && !allowed[imp] {
			t.Errorf("cmd/maasctl imports %s: the commands may use only steps/session, inventory and internal/output; offer what the command needs in steps/session", imp)
		}
	}
}

// TestNoPluginPackage keeps Go's plugin package out of maasctl: a binary
// that imports it (k8s.io/cli-runtime's genericclioptions did, through its
// resource builder and kustomize) keeps every exported method, which made
// maasctl 101 MB instead of 76 MB and its code pages 59 MB of resident set
// instead of 42 MB (steps/session.KubeFlags says more).
func TestNoPluginPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 {
		t.Fatalf("go list -deps listed %d packages: the test no longer reads maasctl's dependencies", len(deps))
	}
	for _, d := range deps {
		if d == "plugin" || strings.HasPrefix(d, "sigs.k8s.io/kustomize/") {
			t.Errorf("maasctl depends on %s: find the import that pulls it in (go list -deps -f '{{.ImportPath}} {{.Imports}}' .) and drop it", d)
		}
	}
}
