package inventory

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoad feeds arbitrary bytes to Load as an inventory file. Load and
// Validate must not panic, and whatever Load accepts must survive a round
// trip through YAML() unchanged. The seeds run in every go test.
func FuzzLoad(f *testing.F) {
	if golden, err := os.ReadFile(defaultGolden); err == nil {
		f.Add(golden)
	}
	for _, s := range []string{
		"",
		"null",
		"[]",
		"42",
		"gateway: {hostname: '*.apps.example.com'}",
		"externalModels: [{name: m, port: 99999999999999999999}]",
		"externalModels: [null, {}, [], 1]",
		"operators:\n- id: a\n  minVersion: v1\n- id: a\n",
		"subscriptions: [{modelRefs: [{tokenRateLimits: [{limit: -1, window: 0d}]}]}]",
		"database: {storageSize: '1e999999', vaultPath: /}",
		"rhoai: {managedComponents: [kserve, kserve], removedComponents: [kserve]}",
		"a: &a [*a]",
		"gateway: {name: x, name: y}",
		"waitTimeoutSeconds: 1.0e3",
		"vault: {address: 'http://[::1'}",
		"kuadrant: {operatorSelector: 'a in ('}",
		"? [a]\n: b\n",
		"1: 2",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "inv.yaml")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		inv, err := Load([]string{p}, nil)
		if err != nil {
			return
		}
		_ = inv.Validate()
		out, err := inv.YAML()
		if err != nil {
			t.Fatalf("YAML() of a loaded inventory: %v", err)
		}
		if err := os.WriteFile(p, out, 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := Load([]string{p}, nil)
		if err != nil {
			t.Fatalf("Load(YAML()) = %v\n%s", err, out)
		}
		if again.Hash() != inv.Hash() {
			t.Fatalf("round trip changed the inventory:\n%s", out)
		}
	})
}

// FuzzSet feeds arbitrary --set strings to Load; it must not panic.
func FuzzSet(f *testing.F) {
	for _, s := range []string{
		"externalModels[0].port=8081",
		"operators[rhoai].channel=stable-3.6",
		"subscriptions[llama-coder-default].modelRefs[0].tokenRateLimits[0].window=1h",
		"rhoai.managedComponents=[a,b]",
		"a[",
		"a[]]=",
		"[0]=1",
		"gateway.name.x[1]=2",
		"authPolicies[0].modelRefs=[{name: a}, null, 3]",
		"vault={address: x}",
		"=",
		"operators[99999999999999999999999].id=x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, set string) {
		inv, err := Load(nil, []string{set})
		if err != nil {
			return
		}
		_ = inv.Validate()
		_ = inv.Hash()
	})
}
