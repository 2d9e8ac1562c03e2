package steps

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
)

// VaultSecrets reads the database password from Vault KV at
// inventory database.vaultPath, generating it once (check-and-set) when the
// secret does not exist. The value is cached for the run.
type VaultSecrets struct {
	Client *vault.Client
	Inv    *inventory.Inventory

	mu       sync.Mutex
	password string
}

// DBPassword implements Secrets.
func (v *VaultSecrets) DBPassword(ctx context.Context) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.password != "" {
		return v.password, nil
	}
	d := v.Inv.Database
	data, _, err := v.Client.EnsureSecret(ctx, d.VaultPath, func() (map[string]string, error) {
		pw, err := vault.GeneratePassword(d.PasswordLength)
		if err != nil {
			return nil, err
		}
		return map[string]string{"username": d.Owner, "password": pw}, nil
	})
	if err != nil {
		return "", err
	}
	pw := data["password"]
	switch {
	case pw == "":
		return "", fmt.Errorf("Vault secret %s has no key \"password\": add it, or delete the secret to let maasctl generate one", d.VaultPath)
	case strings.ContainsAny(pw, "\r\n"):
		// A trailing newline (echo > file; vault kv put) breaks CNPG's
		// initdb and the connection URL alike (case B07).
		return "", fmt.Errorf("the password in Vault %s contains a line break: store it without one (vault kv put ... password=@file with no trailing newline)", d.VaultPath)
	}
	v.password = pw
	return pw, nil
}
