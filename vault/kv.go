package vault

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// "data/" cannot be addressed).
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
			first, _, _ := strings.Cut(clean, "/")
			return locate(clean, first, 1)
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

// ReadSecret reads the secret at logicalPath (see Resolve for the path
// rules). found is false when nothing is stored there. On KV v2 it reads the
// latest version.
//
// Errors: those of Resolve, *PermissionError naming "read" on
// Location.DataPath(), ErrSecretDeleted when the latest KV v2 version is
// deleted or destroyed, or a non-string value in the secret.
func (c *Client) ReadSecret(ctx context.Context, logicalPath string) (data map[string]string, found bool, err error) {
	err = c.withAuth(ctx, "read", func() error {
		loc, err := c.resolve(ctx, logicalPath)
		if err != nil {
			return err
		}
		data, found, err = c.read(ctx, loc)
		return err
	})
	return data, found, err
}

func (c *Client) read(ctx context.Context, loc Location) (map[string]string, bool, error) {
	var raw map[string]any
	switch loc.KVVersion {
	case 2:
		s, err := c.api.KVv2(loc.Mount).Get(ctx, loc.Path)
		if errors.Is(err, api.ErrSecretNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, c.readError(err, loc)
		}
		if s.Data == nil {
			v := 0
			if s.VersionMetadata != nil {
				v = s.VersionMetadata.Version
			}
			return nil, false, fmt.Errorf("read %s: version %d of %s: %w; restore it with `vault kv undelete -versions=%d %s`, or remove all versions with `vault kv metadata delete %s` so a new password is generated",
				loc, v, loc.DataPath(), ErrSecretDeleted, v, loc, loc)
		}
		raw = s.Data
	default:
		s, err := c.api.KVv1(loc.Mount).Get(ctx, loc.Path)
		if errors.Is(err, api.ErrSecretNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, c.readError(err, loc)
		}
		raw = s.Data
	}
	data, err := toStrings(raw)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", loc, err)
	}
	return data, true, nil
}

func (c *Client) readError(err error, loc Location) error {
	if isForbidden(err) {
		return c.permission(err, &PermissionError{
			Op:          "read",
			LogicalPath: loc.String(),
			APIPath:     loc.DataPath(),
			PolicyPath:  loc.DataPath(),
			Capability:  "read",
			Needed:      []string{"create", "read"},
			Hint:        pathHint(loc),
		})
	}
	return c.wrap(err, "read "+loc.String())
}

// pathHint explains case B11: a KV v2 policy written for the logical path
// matches nothing the API uses.
func pathHint(loc Location) string {
	if loc.KVVersion != 2 {
		return ""
	}
	return fmt.Sprintf("KV v2 policies must name %s, not %s", loc.DataPath(), loc)
}

// toStrings converts KV data to strings. Values are never put in the error.
func toStrings(raw map[string]any) (map[string]string, error) {
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("value of key %q is a %T, want a string", k, v)
		}
		out[k] = s
	}
	return out, nil
}

// EnsureSecret returns the secret at logicalPath, creating it first with
// generate if nothing is stored there. created is true only when this call's
// generated data is what Vault now holds.
//
// On KV v2 the write uses check-and-set 0 ("write only if the key does not
// exist", https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-secret),
// so two runs racing on an absent secret store exactly one version: the loser
// gets HTTP 400 "check-and-set parameter did not match the current version",
// re-reads and returns the winner's data with created=false.
//
// KV v1 (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1) has
// no check-and-set: EnsureSecret writes, re-reads and returns what is stored
// then. Two racing runs on KV v1 can each get a different password; use KV v2.
//
// The content of existing data is returned as is; validating it (for example
// a password with a trailing newline, case B07) is the caller's job.
//
// Errors: those of Resolve and ReadSecret, *PermissionError naming "create"
// on Location.DataPath() when the write is denied (nothing is written then),
// an error from generate, or an empty generated map. No token or secret
// value appears in an error.
func (c *Client) EnsureSecret(ctx context.Context, logicalPath string, generate func() (map[string]string, error)) (data map[string]string, created bool, err error) {
	err = c.withAuth(ctx, "ensure", func() error {
		data, created, err = c.ensureSecret(ctx, logicalPath, generate)
		return err
	})
	return data, created, err
}

func (c *Client) ensureSecret(ctx context.Context, logicalPath string, generate func() (map[string]string, error)) (data map[string]string, created bool, err error) {
	loc, err := c.resolve(ctx, logicalPath)
	if err != nil {
		return nil, false, err
	}
	data, found, err := c.read(ctx, loc)
	if err != nil || found {
		return data, false, err
	}

	gen, err := generate()
	if err != nil {
		return nil, false, fmt.Errorf("generate secret for %s: %w", loc, err)
	}
	if len(gen) == 0 {
		return nil, false, fmt.Errorf("generate secret for %s: no keys", loc)
	}
	values := make([]string, 0, len(gen))
	payload := make(map[string]any, len(gen))
	for k, v := range gen {
		if k == "" {
			return nil, false, fmt.Errorf("generate secret for %s: empty key", loc)
		}
		if !publicKeys[k] {
			values = append(values, v)
		}
		payload[k] = v
	}

	switch loc.KVVersion {
	case 2:
		_, err = c.api.KVv2(loc.Mount).Put(ctx, loc.Path, payload, api.WithCheckAndSet(0))
		if err == nil {
			return maps.Clone(gen), true, nil
		}
		if !isCASMismatch(err) {
			return nil, false, c.writeError(err, loc, values)
		}
		// Another run created it first (or our own write was applied and
		// its answer lost, then retried): the stored data wins.
	default:
		if err := c.api.KVv1(loc.Mount).Put(ctx, loc.Path, payload); err != nil {
			return nil, false, c.writeError(err, loc, values)
		}
	}

	stored, found, err := c.read(ctx, loc)
	if err != nil {
		return nil, false, err
	}
	if !found {
		return nil, false, fmt.Errorf("write %s: the secret is absent right after the write", loc)
	}
	return stored, maps.Equal(stored, gen), nil
}

// publicKeys are keys whose values EnsureSecret does not scrub from error
// messages: a user name such as "maas" is no secret, and redacting every
// occurrence of a short common word would garble paths and messages.
var publicKeys = map[string]bool{"username": true, "user": true}

func (c *Client) writeError(err error, loc Location, secrets []string) error {
	if isForbidden(err) {
		return c.permission(err, &PermissionError{
			Op:          "create",
			LogicalPath: loc.String(),
			APIPath:     loc.DataPath(),
			PolicyPath:  loc.DataPath(),
			Capability:  "create",
			Needed:      []string{"create", "read"},
			Hint:        pathHint(loc),
		}, secrets...)
	}
	return c.wrap(err, "write "+loc.String(), secrets...)
}
