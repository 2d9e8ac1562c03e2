package steps

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/vault"
)

// VaultSecrets reads the database password from Vault KV at inventory
// database.vaultPath, generating it once (check-and-set) when the secret
// does not exist.
//
// Vault is read once per run: the first call (the database/secret step, or
// the first Check that needs the password) creates or reads the password,
// and later calls in the same run (the maas-db-config step, after the long
// wait for the database) reuse that value, so every Secret one run writes
// carries the same password and no later step needs Vault: a token that
// expires or is revoked after the database step does not fail the run
// (case B11, test 3). A token that has expired by the next run fails that
// run's preflight (or the step that first reads Vault) with a
// *vault.TokenError naming the token and how to log in again; the run
// after logging in continues from the checkpoints. A password changed in
// Vault during a run is picked up by the next run, whose database/secret
// Check compares the Secret with Vault. Keep the token alive during long
// waits with (*vault.Client).KeepAlive.
type VaultSecrets struct {
	Client *vault.Client
	Inv    *inventory.Inventory

	mu       sync.Mutex
	password string   // the value read or generated in this run
	version  int      // its KV v2 version (0 on KV v1)
	notes    []string // vault.EnsureResult.Notes not yet reported
}

// TakeNotes returns and forgets what the Vault write reported for the user
// (a lost check-and-set race, a KV v1 mount without write protection).
func (v *VaultSecrets) TakeNotes() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.notes
	v.notes = nil
	return n
}

// DBPassword implements Secrets.
func (v *VaultSecrets) DBPassword(ctx context.Context) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.password != "" {
		return v.password, nil
	}
	d := v.Inv.Database
	res, err := v.Client.EnsureSecretWith(ctx, d.VaultPath, func() (map[string]string, error) {
		pw, err := vault.GeneratePassword(d.PasswordLength)
		if err != nil {
			return nil, err
		}
		return map[string]string{"username": d.Owner, "password": pw}, nil
	}, vault.WriteOptions{AllowKVv1: d.VaultAllowUnprotectedKVv1})
	var de *vault.DeletedError
	if errors.As(err, &de) {
		de.Rotate = RotateAdvice(de.Version)
	}
	if err != nil {
		return "", err
	}
	v.notes = append(v.notes, res.Notes...)
	pw := res.Data["password"]
	switch {
	case pw == "":
		return "", fmt.Errorf("Vault secret %s has no key \"password\": add it, or delete the secret to let maasctl generate one", d.VaultPath)
	case strings.ContainsAny(pw, "\r\n"):
		// A trailing newline (echo > file; vault kv put) breaks CNPG's
		// initdb and the connection URL alike (case B07).
		return "", fmt.Errorf("the password in Vault %s contains a line break: store it without one (vault kv put ... password=@file with no trailing newline)", d.VaultPath)
	}
	v.password, v.version = pw, res.Version
	return pw, nil
}

// DBPasswordVersion is the KV v2 version DBPassword read (0 before it, or
// on KV v1), for messages.
func (v *VaultSecrets) DBPasswordVersion() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.version
}

// VaultPolicyOptions are the inputs of VaultPolicy besides the inventory.
type VaultPolicyOptions struct {
	// KubeTokenPath is the PATH:KEY of the cluster token read from Vault
	// (--kube-token-from-vault); empty means inventory vault.kubeTokenPath.
	KubeTokenPath string
	// Locate turns a logical path into its mount, secret path and KV
	// version: (*vault.Client).Resolve, or vault.LocationFor with a known
	// version when Vault cannot be asked.
	Locate func(logicalPath string) (vault.Location, error)
	// RotatePassword adds what `maasctl database rotate-password` needs:
	// "update" on the database secret, since it writes the next version
	// of an existing secret (check-and-set on the version it read; Vault
	// asks "update" for a write to an existing path, "create" only for a
	// new one).
	RotatePassword bool
}

// VaultPolicy returns the least-privilege Vault ACL policy `maasctl
// install` needs for inv: "create" and "read" on the database secret's API
// path (create for the first run's check-and-set write; no "update", since
// an existing password is never overwritten), "read" on the cluster token's
// path when one is configured, and the token self-service paths the run
// uses (lookup-self, renew-self, capabilities-self). The KV paths are the
// API paths a policy must name: <mount>/data/<path> on KV v2 (case B11).
//
// Errors: a malformed KubeTokenPath, or an error from Locate.
func VaultPolicy(inv *inventory.Inventory, o VaultPolicyOptions) (vault.Policy, error) {
	p := vault.Policy{Header: `Vault ACL policy for "maasctl install" with this inventory (least privilege).
Write it:   maasctl vault policy -f inventory.yaml | vault policy write maasctl -
Attach "maasctl" to the token, AppRole or Kubernetes role maasctl runs with.
Not listed on purpose: sys/internal/ui/mounts/<path>, which maasctl reads to
detect the KV version, is answered for any token holding a capability below
the mount (https://developer.hashicorp.com/vault/api-docs/system/internal-ui-mounts);
AppRole and Kubernetes logins need no policy.`}
	rules := map[string]int{}
	add := func(path string, caps []string, why string) {
		if i, ok := rules[path]; ok {
			r := &p.Rules[i]
			for _, c := range caps {
				if !slices.Contains(r.Capabilities, c) {
					r.Capabilities = append(r.Capabilities, c)
				}
			}
			r.Comment += "\n" + why
			return
		}
		rules[path] = len(p.Rules)
		p.Rules = append(p.Rules, vault.PolicyRule{Path: path, Capabilities: caps, Comment: why})
	}

	db, err := o.Locate(inv.Database.VaultPath)
	if err != nil {
		return vault.Policy{}, fmt.Errorf("database.vaultPath %s: %w", inv.Database.VaultPath, err)
	}
	add(db.DataPath(), []string{"create", "read"}, fmt.Sprintf(
		"Database password, database.vaultPath %s (KV v%d):\nread it, and create it on the first run; an existing password is never\noverwritten, so no \"update\".",
		inv.Database.VaultPath, db.KVVersion))
	if o.RotatePassword {
		add(db.DataPath(), []string{"update"}, "maasctl database rotate-password writes the next version of it\n(check-and-set on the version it read): \"update\".")
	}

	kube := o.KubeTokenPath
	if kube == "" {
		kube = inv.Vault.KubeTokenPath
	}
	if kube != "" {
		path, key, err := vault.ParseKeyPath(kube)
		if err != nil {
			return vault.Policy{}, err
		}
		loc, err := o.Locate(path)
		if err != nil {
			return vault.Policy{}, fmt.Errorf("cluster token %s: %w", kube, err)
		}
		add(loc.DataPath(), []string{"read"}, fmt.Sprintf("Cluster credentials, %s (KV v%d):\nkey %q is the bearer token maasctl uses for the Kubernetes API.", path, loc.KVVersion, key))
	}

	add("auth/token/lookup-self", []string{"read"}, "Token lifetime: preflight checks the remaining TTL; a refused request is\nreported as an expired token or as a missing policy rule.")
	add("auth/token/renew-self", []string{"update"}, "Renew the token during long waits.")
	add("sys/capabilities-self", []string{"update"}, "Preflight: may the token create the database secret? (asked before any\nchange to the cluster)")
	return p, nil
}
