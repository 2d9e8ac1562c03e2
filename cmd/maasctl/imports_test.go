package main

import (
	"go/build"
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
