package inventory_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// updateGolden reads the package's -update flag (declared by the
// in-package tests).
func updateGolden() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func render(t *testing.T, inv *inventory.Inventory) string {
	t.Helper()
	if err := inv.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	r, err := assets.Render(inv, assets.Facts{Host: "maas.apps.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, id := range sortedIDs(r) {
		y, err := assets.YAML(r[id])
		if err != nil {
			t.Fatal(err)
		}
		b.WriteString("## " + id + "\n")
		b.Write(y)
	}
	return b.String()
}

func sortedIDs(r assets.Rendered) []string {
	var ids []string
	for id := range r {
		ids = append(ids, id)
	}
	for i := range ids {
		for j := i + 1; j < len(ids); j++ {
			if ids[j] < ids[i] {
				ids[i], ids[j] = ids[j], ids[i]
			}
		}
	}
	return ids
}

// TestImportGrantAccessRendersLikeNative: the "Grant access to specific
// groups" example of DEPLOYMENT.md (two auth policy groups, two
// subscriptions) imported from Ansible vars renders exactly the objects the
// hand-written native inventory renders, both through the written inventory
// file and through install -f reading the vars file directly.
func TestImportGrantAccessRendersLikeNative(t *testing.T) {
	vars := filepath.Join("testdata", "ansible", "grant-access.yml")
	native, err := inventory.Load([]string{filepath.Join("testdata", "ansible", "grant-access.native.yaml")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := render(t, native)
	if want == render(t, inventory.Default()) {
		t.Fatal("the native inventory renders like the default one; the test would prove nothing")
	}

	imp, err := inventory.ImportAnsible(vars)
	if err != nil {
		t.Fatal(err)
	}
	if len(imp.Unmapped) != 0 {
		t.Errorf("unmapped: %v", imp.Unmapped)
	}
	if diff := cmp.Diff([]string{"rhoai_maas_auth_policies", "rhoai_maas_subscriptions"}, imp.Imported); diff != "" {
		t.Errorf("imported variables (-want +got):\n%s", diff)
	}
	y, err := imp.YAML()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(file, y, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		load func() (*inventory.Inventory, error)
	}{
		{"written inventory file", func() (*inventory.Inventory, error) { return inventory.Load([]string{file}, nil) }},
		{"vars file given to -f", func() (*inventory.Inventory, error) { return inventory.LoadWithAnsible([]string{vars}, nil) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv, err := tt.load()
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, render(t, inv)); diff != "" {
				t.Errorf("rendering differs from the native inventory's (-native +imported):\n%s", diff)
			}
		})
	}
}

// TestImportUnmappable: Jinja, lookups, vault ciphertext, unknown
// variables and unknown item keys are listed, never guessed; a variable
// with such a value inside is left out whole; the rest is imported.
func TestImportUnmappable(t *testing.T) {
	file := filepath.Join("testdata", "ansible", "unmappable.yml")
	imp, err := inventory.ImportAnsible(file)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, u := range imp.Unmapped {
		paths = append(paths, u.Path)
		if u.File != file {
			t.Errorf("%s: file %q, want %q", u.Path, u.File, file)
		}
	}
	wantPaths := []string{
		"rhoai_maas_external_models[0].timeout",
		"rhoai_maas_gateway_cert_issuer",
		"rhoai_maas_hostname",
		"rhoai_maas_subscriptions[0].groups[0]",
		"rhoai_maas_tiers",
	}
	if diff := cmp.Diff(wantPaths, paths); diff != "" {
		t.Errorf("unmapped paths (-want +got):\n%s", diff)
	}
	for _, u := range imp.Unmapped {
		if strings.Contains(u.Reason, "61366464316635613733303835") {
			t.Errorf("the vault ciphertext is echoed in %q", u.Reason)
		}
	}
	inv, err := inventory.Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	y, err := imp.YAML()
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "inv.yaml")
	if err := os.WriteFile(f, y, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := inventory.Load([]string{f}, nil)
	if err != nil {
		t.Fatalf("load the imported file: %v\n%s", err, y)
	}
	inv.Gateway.ServiceType = "LoadBalancer"
	inv.Gateway.CreateRoute = false
	inv.WaitTimeoutSeconds = 1200
	inv.DBConfig.SSLMode = "verify-full"
	if diff := cmp.Diff(inv, got); diff != "" {
		t.Errorf("imported inventory (-want +got):\n%s", diff)
	}

	golden := filepath.Join("testdata", "ansible", "unmappable.golden.yaml")
	if updateGolden() {
		if err := os.WriteFile(golden, y, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if diff := cmp.Diff(string(want), string(y)); diff != "" {
		t.Errorf("import output differs from %s (-want +got):\n%s", golden, diff)
	}

	_, err = inventory.LoadWithAnsible([]string{file}, nil)
	var ue *inventory.UnmappedError
	if !errors.As(err, &ue) || len(ue.Unmapped) != len(wantPaths) {
		t.Errorf("LoadWithAnsible: got %v, want an UnmappedError listing %d values", err, len(wantPaths))
	}
}

func TestIsAnsibleVars(t *testing.T) {
	tests := []struct {
		name string
		data string
		want bool
	}{
		{"role variables", "rhoai_maas_hostname: maas.example.com\n", true},
		{"role variable among others", "other: 1\nrhoai_maas_wait_timeout: 5\n", true},
		{"maasctl inventory", "gateway:\n  hostname: maas.example.com\n", false},
		{"empty", "", false},
		{"not a mapping", "- rhoai_maas_hostname\n", false},
		{"prefix only inside", "gateway:\n  rhoai_maas_hostname: x\n", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inventory.IsAnsibleVars([]byte(tt.data)); got != tt.want {
				t.Errorf("IsAnsibleVars = %t, want %t", got, tt.want)
			}
		})
	}
}

// TestImportLaterFileWins: host_vars given after group_vars override a
// variable whole.
func TestImportLaterFileWins(t *testing.T) {
	dir := t.TempDir()
	group := filepath.Join(dir, "group.yml")
	host := filepath.Join(dir, "host.yml")
	if err := os.WriteFile(group, []byte("rhoai_maas_gateway_service_type: ClusterIP\nrhoai_maas_wait_timeout: 60\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(host, []byte("rhoai_maas_gateway_service_type: LoadBalancer\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.LoadWithAnsible([]string{group, host}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// LoadWithAnsible reads each file on its own, later overlays win.
	if inv.Gateway.ServiceType != "LoadBalancer" || inv.WaitTimeoutSeconds != 60 {
		t.Errorf("serviceType %q waitTimeoutSeconds %d, want LoadBalancer 60", inv.Gateway.ServiceType, inv.WaitTimeoutSeconds)
	}
	imp, err := inventory.ImportAnsible(group, host)
	if err != nil {
		t.Fatal(err)
	}
	if got := imp.Overlay["gateway"].(map[string]any)["serviceType"]; got != "LoadBalancer" {
		t.Errorf("ImportAnsible serviceType %v, want LoadBalancer", got)
	}
}

// TestImportOperators: an entry of rhoai_maas_operators overrides the
// default operator of the same package (the role's variable has no
// OperatorGroup shape); the other defaults stay only if listed.
func TestImportOperators(t *testing.T) {
	f := filepath.Join(t.TempDir(), "ops.yml")
	data := `rhoai_maas_operators:
  - {name: rhcl-operator, channel: stable-1.4, namespace: openshift-operators, source: redhat-operators}
  - {name: rhods-operator, channel: stable-3.6, install_plan_approval: Manual, starting_csv: rhods-operator.3.6.0}
`
	if err := os.WriteFile(f, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.LoadWithAnsible([]string{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	def := inventory.Default()
	want := []inventory.Operator{*def.Operator("rhcl"), *def.Operator("rhoai")}
	want[1].Channel, want[1].Approval, want[1].StartingCSV = "stable-3.6", "Manual", "rhods-operator.3.6.0"
	if diff := cmp.Diff(want, inv.Operators); diff != "" {
		t.Errorf("operators (-want +got):\n%s", diff)
	}
}
