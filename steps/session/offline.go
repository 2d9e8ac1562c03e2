package session

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
	"github.com/maasctl/maasctl/vault"
)

// The commands below need no cluster: they take a loaded inventory
// (LoadInventory), the same inputs as every other command.

// RenderRequest are render's inputs beside the inventory.
type RenderRequest struct {
	// Options say how the Secrets that carry the password are rendered.
	Options RenderOptions
	// InCluster renders a least-privilege in-cluster run instead of the
	// manifests: Image is the maasctl image its Job runs, Version the
	// maasctl version it is labelled with.
	InCluster bool
	Image     string
	Version   string
}

// Render returns the manifests install applies for inv (or, with
// InCluster, the in-cluster run), numbered in apply order. An inventory
// without what an offline render needs (gateway.hostname) is a
// *UsageError.
func Render(inv *inventory.Inventory, o RenderRequest) ([]ManifestFile, error) {
	facts, err := steps.OfflineFacts(inv)
	if err != nil {
		return nil, &UsageError{err}
	}
	if o.InCluster {
		return steps.RenderInCluster(inv, facts, steps.InClusterOptions{Image: o.Image, Version: o.Version})
	}
	return steps.RenderManifestsWith(nil, inv, facts, o.Options)
}

// VaultPolicyRequest are vault policy's inputs beside the inventory.
type VaultPolicyRequest struct {
	// KVVersion is auto (ask Vault for each mount), 1 or 2; anything
	// else is a *UsageError.
	KVVersion string
	// KubeTokenPath is --kube-token-from-vault (empty: the inventory's).
	KubeTokenPath  string
	RotatePassword bool
	// Notes gets a note for each mount whose KV version Vault could not
	// be asked for.
	Notes io.Writer
}

// VaultPolicy returns, in Vault's HCL syntax, the least-privilege policy
// install needs for inv.
func VaultPolicy(ctx context.Context, inv *inventory.Inventory, o VaultPolicyRequest) (string, error) {
	var locate func(string) (vault.Location, error)
	how := ""
	switch o.KVVersion {
	case "1", "2":
		n, _ := strconv.Atoi(o.KVVersion)
		locate = func(p string) (vault.Location, error) { return vault.LocationFor(p, n) }
		how = "KV v" + o.KVVersion + " (--kv-version)"
	case "auto":
		vc, cerr := VaultClient(inv)
		if cerr == nil {
			how = "as reported by Vault at " + vc.Address()
		}
		locate = func(p string) (vault.Location, error) {
			if cerr == nil {
				loc, err := vc.Resolve(ctx, p)
				if err == nil {
					return loc, nil
				}
				cerr = err
			}
			fmt.Fprintf(o.Notes, "maasctl: note: cannot ask Vault for the KV version of %s (%v); assuming KV v2, pass --kv-version 1 for a KV v1 mount\n", p, cerr)
			how = "KV v2 assumed (Vault could not be asked)"
			return vault.LocationFor(p, 2)
		}
	default:
		return "", &UsageError{fmt.Errorf("--kv-version %q: want auto, 1 or 2", o.KVVersion)}
	}
	p, err := steps.VaultPolicy(inv, steps.VaultPolicyOptions{KubeTokenPath: o.KubeTokenPath, Locate: locate, RotatePassword: o.RotatePassword})
	if err != nil {
		return "", err
	}
	p.Header += "\nKV versions: " + how + "."
	return p.HCL(), nil
}

// VaultStatus logs in to Vault as install would and checks the paths it
// uses (the database secret; the cluster token of kubeTokenPath, else of
// the inventory), writing one line each to out. No value is shown and
// nothing is written.
func VaultStatus(ctx context.Context, out io.Writer, inv *inventory.Inventory, kubeTokenPath string) error {
	vc, err := VaultClient(inv)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Vault:          %s\n", vc.Address())
	info, err := vc.LookupSelf(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Token:          %s\n", info)
	loc, err := vc.Resolve(ctx, inv.Database.VaultPath)
	if err != nil {
		return err
	}
	_, found, err := vc.ReadSecret(ctx, inv.Database.VaultPath)
	if err != nil {
		return err
	}
	state := "exists"
	if !found {
		state = "absent: the first install generates it (needs \"create\" on " + loc.DataPath() + ")"
	}
	fmt.Fprintf(out, "Database:       %s -> %s (KV v%d): %s\n", inv.Database.VaultPath, loc.DataPath(), loc.KVVersion, state)
	spec := kubeTokenPath
	if spec == "" {
		spec = inv.Vault.KubeTokenPath
	}
	if spec == "" {
		return nil
	}
	path, key, err := vault.ParseKeyPath(spec)
	if err != nil {
		return &UsageError{err}
	}
	kl, err := vc.Resolve(ctx, path)
	if err != nil {
		return err
	}
	if _, err := vc.ReadKey(ctx, path, key); err != nil {
		return err
	}
	fmt.Fprintf(out, "Cluster token:  %s -> %s (KV v%d): key %q present\n", spec, kl.DataPath(), kl.KVVersion, key)
	return nil
}
