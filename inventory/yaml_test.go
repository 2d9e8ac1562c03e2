package inventory

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

const defaultGolden = "testdata/default.golden.yaml"

func TestDefaultYAMLGolden(t *testing.T) {
	got, err := Default().YAML()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(defaultGolden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(defaultGolden)
	if err != nil {
		t.Fatalf("read golden file (run go test ./inventory/ -run TestDefaultYAMLGolden -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), string(got)); diff != "" {
		t.Errorf("Default().YAML() differs from %s (-want +got); rerun with -update if the change is intended:\n%s", defaultGolden, diff)
	}
}

func TestYAMLRoundTrip(t *testing.T) {
	inv := Default()
	inv.Gateway.Hostname = "maas.apps.example.com"
	inv.Operators[0].Channel = "1.10" // would become a float if unquoted
	inv.Database.Owner = "yes"        // would become a bool if unquoted
	inv.AuthPolicies[0].Users = []string{"alice"}
	out, err := inv.YAML()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "effective.yaml")
	if err := os.WriteFile(f, out, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := Load([]string{f}, nil)
	if err != nil {
		t.Fatalf("Load(YAML()) = %v\n%s", err, out)
	}
	if diff := cmp.Diff(inv, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
	if !bytes.Contains(out, []byte("channel: \"1.10\"")) {
		t.Errorf("YAML() does not quote the numeric-looking channel:\n%s", out)
	}
}
