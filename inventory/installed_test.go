package inventory

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDiff: paths as in --set, list elements by index when the lengths
// and names match, named elements by name when not, any other list whole
// when it differs, empty and missing the same.
func TestDiff(t *testing.T) {
	grant := Default()
	grant.AuthPolicies[0].Groups = []string{"developers", "platform-admins"}
	grant.Database.StorageSize = "10Gi"
	longer := Default()
	longer.Subscriptions = append(longer.Subscriptions, Subscription{Name: "premium", Priority: 20, Groups: []string{"admins"}})
	longerLimit := Default()
	longerLimit.Subscriptions = append(longerLimit.Subscriptions, Subscription{Name: "premium", Priority: 20, Groups: []string{"admins"}})
	longerLimit.Subscriptions[0].ModelRefs[0].TokenRateLimits[0].Limit = 50000
	moreRemoved := Default()
	moreRemoved.RHOAI.RemovedComponents = append(moreRemoved.RHOAI.RemovedComponents, "trustyai-extra")
	emptied := Default()
	emptied.RHOAI.RemovedComponents = []string{}
	nilled := Default()
	nilled.RHOAI.RemovedComponents = nil
	tests := []struct {
		name     string
		from, to *Inventory
		want     []Change
	}{
		{name: "equal", from: Default(), to: Default()},
		{name: "nil and empty list", from: emptied, to: nilled},
		{name: "element fields", from: grant, to: Default(), want: []Change{
			{Path: "authPolicies[0].groups", From: `["developers","platform-admins"]`, To: `["system:authenticated"]`},
			{Path: "database.storageSize", From: "10Gi", To: "5Gi"},
		}},
		{name: "named element added", from: Default(), to: longer, want: []Change{
			{Path: "subscriptions[premium]", From: "(not listed)", To: "(listed)"},
		}},
		{name: "named element removed, another changed", from: longerLimit, to: Default(), want: []Change{
			{Path: "subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].limit", From: "50000", To: "200000"},
			{Path: "subscriptions[premium]", From: "(listed)", To: "(not listed)"},
		}},
		{name: "list of another length without names", from: Default(), to: moreRemoved, want: []Change{{
			Path: "rhoai.removedComponents",
			From: flowOf(t, Default().RHOAI.RemovedComponents),
			To:   flowOf(t, moreRemoved.RHOAI.RemovedComponents),
		}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, Diff(tt.from, tt.to)); d != "" {
				t.Errorf("Diff (-want +got):\n%s", d)
			}
		})
	}
	set := Default()
	set.Gateway.Hostname = "maas.example.com"
	got := Diff(Default(), set)
	if len(got) != 1 || got[0].String() != "gateway.hostname: (unset) -> maas.example.com" {
		t.Errorf("a value set where the default has none: %v", got)
	}
}

func flowOf(t *testing.T, v any) string {
	t.Helper()
	g, err := toGeneric(v)
	if err != nil {
		t.Fatal(err)
	}
	return flow(canonical(g))
}

// TestRedactedAndDeployed: Redacted drops only vault.address and leaves
// the original alone; Deployed also drops what changes no object.
func TestRedactedAndDeployed(t *testing.T) {
	inv := Default()
	inv.Vault.Address = "https://vault.example.com:8200"
	inv.Vault.Auth = VaultAuth{Method: "approle", MountPath: "ci"}
	inv.WaitTimeoutSeconds = 60
	r := inv.Redacted()
	if r.Vault.Address != "" || inv.Vault.Address == "" {
		t.Errorf("Redacted: address %q, original %q", r.Vault.Address, inv.Vault.Address)
	}
	y, err := r.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "vault.example.com") {
		t.Errorf("redacted YAML holds the Vault address:\n%s", y)
	}
	if d := Diff(inv, r); len(d) != 1 || d[0].Path != "vault.address" {
		t.Errorf("Redacted changed more than vault.address: %v", d)
	}
	if d := Diff(inv.Deployed(), Default().Deployed()); len(d) != 0 {
		t.Errorf("Deployed of inventories that differ only in Vault and waitTimeoutSeconds: %v", d)
	}
	other := Default()
	other.AuthPolicies[0].Groups = []string{"team-a"}
	if d := Diff(other.Deployed(), Default().Deployed()); len(d) != 1 {
		t.Errorf("Deployed hides an access change: %v", d)
	}
}

// TestParseStored: YAML of an inventory parses back to it, comments
// included; unknown keys and invalid values are errors.
func TestParseStored(t *testing.T) {
	inv := Default()
	inv.AuthPolicies[0].Groups = []string{"developers"}
	inv.Database.StorageClass = ""
	y, err := inv.YAML()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseStored(append([]byte("# a header\n"), y...))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(inv, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	if _, err := ParseStored(append(y, []byte("bogus: 1\n")...)); err == nil {
		t.Error("an unknown key was accepted")
	}
	bad := Default()
	bad.Database.Instances = 0
	by, _ := bad.YAML()
	if _, err := ParseStored(by); err == nil || !strings.Contains(err.Error(), "database.instances") {
		t.Errorf("invalid stored inventory: %v, want an error naming database.instances", err)
	}
}
