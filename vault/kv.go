package vault

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/vault/api"
)

// Location is where a logical KV path lives: its mount, the secret's path
// inside the mount, and the mount's KV version.
type Location struct {
	// Mount is the mount path without slashes, for example "kv".
	Mount string
	// Path is the secret's path inside the mount, without any data/ prefix,
	// for example "cloudnativepg/maas-postgres".
	Path string
	// KVVersion is 1 or 2.
	KVVersion int

	// Assumed says why KVVersion was assumed rather than read from Vault,
	// for messages; empty when Vault named the mount's version.
	Assumed string
}

// String is the logical path, mount/path.
func (l Location) String() string { return l.Mount + "/" + l.Path }

// DataPath is the API path (without /v1/) that reads and writes the secret,
// and the path a policy must name: <mount>/data/<path> on KV v2
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#read-secret-version),
// <mount>/<path> on KV v1
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1#read-secret).
func (l Location) DataPath() string {
	if l.KVVersion == 2 {
		return l.Mount + "/data/" + l.Path
	}
	return l.String()
}

// MetadataPath is the KV v2 metadata API path <mount>/metadata/<path>
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#read-secret-metadata),
// or "" on KV v1, which keeps no metadata.
func (l Location) MetadataPath() string {
	if l.KVVersion == 2 {
		return l.Mount + "/metadata/" + l.Path
	}
	return ""
}

// Resolve finds the mount and KV version of logicalPath the way the vault CLI
// does (its "kv preflight" request): GET /v1/sys/internal/ui/mounts/<path>
// (https://developer.hashicorp.com/vault/api-docs/system/internal-ui-mounts)
// answers with the mount's path and options.version. A 404 means a Vault too
// old to have the endpoint, which the CLI treats as KV v1, and so does
// Resolve.
//
// logicalPath is "<mount>/<path>" as given to `vault kv get`; on a KV v2 mount
// a "data/" right after the mount is accepted and removed, so
// "kv/data/cloudnativepg/maas-postgres" and "kv/cloudnativepg/maas-postgres"
// resolve to the same secret (a KV v2 secret whose own path starts with
// "data/" cannot be addressed). When the lookup answers 404, a path with
// "data/" after its first segment is taken for that KV v2 API path.
//
// Errors: a malformed path, *PermissionError (the lookup answers 403 when the
// token has no capability below the mount, and also when the mount does not
// exist), *TokenError when Vault refuses the token itself, *LoginError,
// *UnreachableError, or a mount that is not a KV secrets engine.
func (c *Client) Resolve(ctx context.Context, logicalPath string) (Location, error) {
	var loc Location
	err := c.withAuth(ctx, "resolve", func() error {
		var err error
		loc, err = c.resolve(ctx, logicalPath)
		return err
	})
	return loc, err
}

// opLookupMount is PermissionError.Op of a refused mount lookup.
const opLookupMount = "look up the mount of"

func (c *Client) resolve(ctx context.Context, logicalPath string) (Location, error) {
	clean, err := cleanPath(logicalPath)
	if err != nil {
		return Location{}, err
	}
	lookup := "sys/internal/ui/mounts/" + clean
	resp, err := c.api.Logical().ReadRawWithContext(ctx, lookup)
	if resp != nil {
		defer resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusNotFound {
			// No lookup: KV v1, as the vault CLI assumes, unless the path
			// names the KV v2 API path (data/ right after the first
			// segment), which is what the warning of a KV v2 mount read
			// as KV v1 advises (InvalidPathError).
			first, rest, _ := strings.Cut(clean, "/")
			if strings.HasPrefix(rest, "data/") {
				loc, err := locate(clean, first, 2)
				loc.Assumed = "GET /v1/" + lookup + " answered 404 and the path names data/ after the mount"
				return loc, err
			}
			loc, err := locate(clean, first, 1)
			loc.Assumed = "GET /v1/" + lookup + " answered 404, which the vault CLI also takes for KV v1"
			return loc, err
		}
		if isForbidden(err) {
			guess, gerr := locate(clean, firstSegment(clean), 2)
			policyPath, hint := clean, ""
			if gerr == nil {
				policyPath = guess.DataPath()
				v1 := guess
				v1.KVVersion = 1
				hint = fmt.Sprintf("assuming the mount is %s/: a KV v2 policy names %s, a KV v1 policy %s", guess.Mount, guess.DataPath(), v1.DataPath())
			}
			return Location{}, c.permission(err, &PermissionError{
				Op:          opLookupMount,
				LogicalPath: clean,
				APIPath:     lookup,
				PolicyPath:  policyPath,
				Capability:  "read",
				Needed:      []string{"create", "read"},
				Reason:      "the token is invalid or expired, the mount does not exist, or the token's policies grant nothing below the mount",
				Hint:        hint,
			})
		}
		return Location{}, c.wrap(err, "look up the vault mount of "+clean)
	}

	secret, err := api.ParseSecret(resp.Body)
	if err != nil {
		return Location{}, c.wrap(err, "parse the vault mount of "+clean)
	}
	if secret == nil || secret.Data == nil {
		return Location{}, fmt.Errorf("look up the vault mount of %s: empty answer from %s", clean, lookup)
	}
	mountPath, _ := secret.Data["path"].(string)
	if typ, _ := secret.Data["type"].(string); typ != "" && typ != "kv" && typ != "generic" {
		return Location{}, fmt.Errorf("vault mount %s holding %s is a %q secrets engine, not kv", mountPath, clean, typ)
	}
	version := 1
	if opts, ok := secret.Data["options"].(map[string]any); ok {
		if v, _ := opts["version"].(string); v == "2" {
			version = 2
		}
	}
	return locate(clean, mountPath, version)
}

func firstSegment(p string) string {
	first, _, _ := strings.Cut(p, "/")
	return first
}

// cleanPath trims surrounding slashes and rejects empty, ".", ".." segments
// and control characters, which Vault would resolve differently from what
// the caller wrote.
func cleanPath(p string) (string, error) {
	clean := strings.Trim(p, "/")
	if clean == "" {
		return "", fmt.Errorf("empty vault path %q", p)
	}
	for _, r := range clean {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("vault path %q contains a control character", p)
		}
	}
	for _, seg := range strings.Split(clean, "/") {
		switch seg {
		case "", ".", "..":
			return "", fmt.Errorf("vault path %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return clean, nil
}

// locate splits a clean logical path at mountPath. When mountPath carries a
// namespace prefix the path does not (Vault Enterprise answers with
// "ns1/kv/" to a request made in namespace ns1), leading segments of the
// mount are dropped until it matches, as the vault CLI does.
func locate(clean, mountPath string, version int) (Location, error) {
	mount := strings.Trim(mountPath, "/")
	if mount == "" {
		return Location{}, fmt.Errorf("vault named no mount for %s", clean)
	}
	rel, ok := underMount(clean, mount)
	for !ok {
		_, rest, found := strings.Cut(mount, "/")
		if !found {
			return Location{}, fmt.Errorf("vault path %s is not below its mount %s/", clean, strings.Trim(mountPath, "/"))
		}
		mount = rest
		rel, ok = underMount(clean, mount)
	}
	if version == 2 {
		switch {
		case rel == "data":
			rel = ""
		case strings.HasPrefix(rel, "data/"):
			rel = strings.TrimPrefix(rel, "data/")
		}
	}
	if rel == "" {
		return Location{}, fmt.Errorf("vault path %s names the mount %s/, not a secret below it", clean, mount)
	}
	return Location{Mount: mount, Path: rel, KVVersion: version}, nil
}

func underMount(clean, mount string) (string, bool) {
	if clean == mount {
		return "", true
	}
	if rest, ok := strings.CutPrefix(clean, mount+"/"); ok {
		return rest, true
	}
	return "", false
}
