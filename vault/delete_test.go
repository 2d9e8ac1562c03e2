package vault

import (
	"testing"

	"github.com/maasctl/maasctl/e2e/vaultserver"
)

// TestDeleteSecret: KV v2 loses every version (a later EnsureSecret starts
// again at version 1), deleting an absent secret succeeds, and a token
// without "delete" on the metadata path gets a permission error.
func TestDeleteSecret(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	path := b.secretPath(t)
	logical := b.kv2Mount + "/" + path
	var g passwordGenerator
	if _, _, err := c.EnsureSecret(ctx, logical, g.generate); err != nil {
		t.Fatal(err)
	}
	if got := b.versions(t, path); got != 1 {
		t.Fatalf("before delete: %d versions, want 1", got)
	}

	ro := b.client(t, b.tokenWith(t, []vaultserver.Rule{
		{Path: b.kv2Mount + "/data/" + path, Capabilities: []string{"read"}},
		{Path: b.kv2Mount + "/metadata/" + path, Capabilities: []string{"read"}},
	}))
	if err := ro.DeleteSecret(ctx, logical); err == nil {
		t.Error("DeleteSecret with a read-only token succeeded")
	}
	if got := b.versions(t, path); got != 1 {
		t.Fatalf("after the refused delete: %d versions, want 1", got)
	}

	if err := c.DeleteSecret(ctx, logical); err != nil {
		t.Fatalf("DeleteSecret: %v", err)
	}
	if got := b.versions(t, path); got != 0 {
		t.Errorf("after delete: %d versions, want 0", got)
	}
	if _, found, err := c.ReadSecret(ctx, logical); err != nil || found {
		t.Errorf("ReadSecret after delete: found=%t err=%v", found, err)
	}
	if err := c.DeleteSecret(ctx, logical); err != nil {
		t.Errorf("DeleteSecret of an absent secret: %v", err)
	}
	if _, created, err := c.EnsureSecret(ctx, logical, g.generate); err != nil || !created {
		t.Errorf("EnsureSecret after delete: created=%t err=%v", created, err)
	}
	if got := b.versions(t, path); got != 1 {
		t.Errorf("after re-create: %d versions, want 1", got)
	}
}
