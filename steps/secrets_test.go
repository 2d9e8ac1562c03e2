package steps

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// TestVaultPolicyGolden renders `maasctl vault policy` for the default
// inventory with and without the cluster token from Vault, on KV v2 and v1.
func TestVaultPolicyGolden(t *testing.T) {
	tests := []struct {
		name    string
		kube    string
		mutate  func(*inventory.Inventory)
		version int
	}{
		{name: "default-kv2", version: 2},
		{name: "kube-token-kv2", kube: "kv/data/lab/rhoai-deployer:token", version: 2},
		{name: "inventory-kube-token-kv1", mutate: func(i *inventory.Inventory) {
			i.Database.VaultPath = "secret/maas/db"
			i.Vault.KubeTokenPath = "secret/lab/deployer:token"
		}, version: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := inventory.Default()
			if tt.mutate != nil {
				tt.mutate(inv)
			}
			p, err := VaultPolicy(inv, VaultPolicyOptions{KubeTokenPath: tt.kube, Locate: func(p string) (vault.Location, error) {
				return vault.LocationFor(p, tt.version)
			}})
			if err != nil {
				t.Fatal(err)
			}
			got := p.HCL()
			file := filepath.Join("testdata", "vault-policy-"+tt.name+".golden.hcl")
			if *update {
				if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("policy differs from %s (-want +got); rerun with -update if intended:\n%s", file, diff)
			}
		})
	}
}

func TestVaultPolicyRules(t *testing.T) {
	locate := func(p string) (vault.Location, error) { return vault.LocationFor(p, 2) }
	inv := inventory.Default()
	p, err := VaultPolicy(inv, VaultPolicyOptions{KubeTokenPath: "kv/lab/rhoai-deployer:token", Locate: locate})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, r := range p.Rules {
		got[r.Path] = r.Capabilities
	}
	want := map[string][]string{
		// KV v2 policies name data/ (case B11); no update: never overwritten.
		"kv/data/cloudnativepg/maas-postgres": {"create", "read"},
		"kv/data/lab/rhoai-deployer":          {"read"},
		"auth/token/lookup-self":              {"read"},
		"auth/token/renew-self":               {"update"},
		"sys/capabilities-self":               {"update"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules (-want +got):\n%s", diff)
	}

	// The same secret for both: one stanza, capabilities merged.
	inv.Vault.KubeTokenPath = inv.Database.VaultPath + ":token"
	p, err = VaultPolicy(inv, VaultPolicyOptions{Locate: locate})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 4 || !cmp.Equal(p.Rules[0].Capabilities, []string{"create", "read"}) {
		t.Errorf("shared path: rules %+v", p.Rules)
	}

	boom := errors.New("vault sealed")
	if _, err := VaultPolicy(inv, VaultPolicyOptions{Locate: func(string) (vault.Location, error) { return vault.Location{}, boom }}); !errors.Is(err, boom) ||
		!strings.Contains(err.Error(), "database.vaultPath") {
		t.Errorf("locate error: %v", err)
	}
	if _, err := VaultPolicy(inv, VaultPolicyOptions{KubeTokenPath: "no-key", Locate: locate}); err == nil {
		t.Error("a kube token path without :KEY was accepted")
	}
}

// TestVaultPolicyRotatePassword: the policy for rotate-password adds
// "update" on the database secret's data path (a new version of an
// existing secret) and nothing else; install's policy has no "update"
// there.
func TestVaultPolicyRotatePassword(t *testing.T) {
	for _, kv := range []int{1, 2} {
		locate := func(p string) (vault.Location, error) { return vault.LocationFor(p, kv) }
		inv := inventory.Default()
		caps := func(rotate bool) map[string][]string {
			p, err := VaultPolicy(inv, VaultPolicyOptions{Locate: locate, RotatePassword: rotate})
			if err != nil {
				t.Fatal(err)
			}
			out := map[string][]string{}
			for _, r := range p.Rules {
				out[r.Path] = r.Capabilities
			}
			return out
		}
		loc, _ := locate(inv.Database.VaultPath)
		install, rotate := caps(false), caps(true)
		if slices.Contains(install[loc.DataPath()], "update") {
			t.Errorf("KV v%d: install's policy grants update on %s: %v", kv, loc.DataPath(), install[loc.DataPath()])
		}
		if got := rotate[loc.DataPath()]; !slices.Contains(got, "update") || !slices.Contains(got, "read") || !slices.Contains(got, "create") {
			t.Errorf("KV v%d: rotate-password's policy on %s = %v, want create, read, update", kv, loc.DataPath(), got)
		}
		for path, c := range rotate {
			if path != loc.DataPath() && !slices.Equal(c, install[path]) {
				t.Errorf("KV v%d: --rotate-password changes %s: %v -> %v", kv, path, install[path], c)
			}
		}
		if len(rotate) != len(install) {
			t.Errorf("KV v%d: --rotate-password adds paths: %v", kv, rotate)
		}
		p, _ := VaultPolicy(inv, VaultPolicyOptions{Locate: locate, RotatePassword: true})
		if !strings.Contains(p.HCL(), "rotate-password") {
			t.Errorf("KV v%d: the HCL does not say why update is granted:\n%s", kv, p.HCL())
		}
	}
}
