package inventory

import (
	"regexp"
	"testing"
)

func TestHash(t *testing.T) {
	base := Default().Hash()
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(base) {
		t.Fatalf("Hash() = %q, want 64 lowercase hex digits", base)
	}
	loaded, err := Load(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(*Inventory)
		same   bool
	}{
		{"unchanged", func(*Inventory) {}, true},
		{"nil and empty list hash the same", func(i *Inventory) { i.AuthPolicies[0].Users = []string{} }, true},
		{"empty optional string is the same as unset", func(i *Inventory) { i.Gateway.Hostname = "" }, true},
		{"string changed", func(i *Inventory) { i.Gateway.Hostname = "maas.apps.example.com" }, false},
		{"bool changed", func(i *Inventory) { i.Kuadrant.AuthorinoTLS = false }, false},
		{"int changed", func(i *Inventory) { i.WaitTimeoutSeconds++ }, false},
		{"list order matters", func(i *Inventory) {
			c := i.RHOAI.ManagedComponents
			c[0], c[1] = c[1], c[0]
		}, false},
		{"list emptied", func(i *Inventory) { i.RHOAI.RemovedComponents = nil }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := Default()
			tt.modify(inv)
			if got := inv.Hash(); (got == base) != tt.same {
				t.Errorf("Hash() = %s, base %s, want same=%t", got, base, tt.same)
			}
		})
	}
	if got := loaded.Hash(); got != base {
		t.Errorf("Load(nil, nil).Hash() = %s, want Default().Hash() = %s", got, base)
	}
}
