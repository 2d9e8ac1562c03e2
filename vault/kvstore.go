package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"time"

	"github.com/hashicorp/vault/api"
)

// KV reads and writes go through the api client's Logical() raw calls
// rather than its KVv1/KVv2 helpers, because those helpers lose what this
// package must act on: KVv2.Get answers a soft-deleted latest version with
// no error and nil data (its doc says so; case N11), KVv1.Get answers a
// 404 that carries only a warning with no error and no data, and
// KVv2.Put/KVv1.Put drop the warnings of a 404 (case B10). The request
// shapes are those of the KV API pages:
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2 and
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1.

// SecretState is what a read of a KV secret found.
type SecretState struct {
	// Location is where the secret lives.
	Location Location
	// Found is true when the latest version is readable; Data holds it.
	Found bool
	Data  map[string]string
	// Version is the KV v2 current_version: the latest version's number,
	// also when that version is deleted or destroyed (Vault never rolls it
	// back), 0 when nothing was ever written. Always 0 on KV v1.
	Version int
	// Deleted is true when the latest KV v2 version is soft-deleted (by
	// `vault kv delete` or because its delete_version_after passed);
	// DeletionTime is then its deletion_time. Destroyed is true when the
	// latest version's data was removed for good (`vault kv destroy`).
	Deleted      bool
	Destroyed    bool
	DeletionTime time.Time
}

// Gone reports a KV v2 secret whose latest version exists but cannot be
// read (deleted or destroyed): "never written" and "deleted" are
// different states, and only the first lets maasctl generate a password.
func (s SecretState) Gone() bool { return s.Deleted || s.Destroyed }

// Inspect reads the secret at logicalPath (see Resolve for the path rules)
// and says whether it is absent, readable, or deleted or destroyed in its
// latest KV v2 version, with the version number. It never writes.
//
// Errors: those of Resolve, *PermissionError naming "read" on
// Location.DataPath(), *InvalidPathError when Vault answers 404 with only
// warnings, or a non-string value in the secret.
func (c *Client) Inspect(ctx context.Context, logicalPath string) (SecretState, error) {
	var st SecretState
	err := c.withAuth(ctx, "read", func() error {
		loc, err := c.resolve(ctx, logicalPath)
		if err != nil {
			return err
		}
		st, err = c.readState(ctx, loc)
		return err
	})
	return st, err
}

// ReadSecret reads the secret at logicalPath (see Resolve for the path
// rules). found is false when nothing was ever stored there. On KV v2 it
// reads the latest version.
//
// Errors: those of Inspect, and *DeletedError (errors.Is ErrSecretDeleted)
// when the latest KV v2 version is deleted or destroyed: that is not "no
// secret" (case N11).
func (c *Client) ReadSecret(ctx context.Context, logicalPath string) (data map[string]string, found bool, err error) {
	st, err := c.Inspect(ctx, logicalPath)
	if err != nil {
		return nil, false, err
	}
	if st.Gone() {
		return nil, false, deletedError(st)
	}
	return st.Data, st.Found, nil
}

// readState reads loc once.
func (c *Client) readState(ctx context.Context, loc Location) (SecretState, error) {
	st := SecretState{Location: loc}
	resp, err := c.api.Logical().ReadRawWithContext(ctx, loc.DataPath())
	if resp != nil {
		defer resp.Body.Close()
	}
	status := 0
	if resp != nil {
		status = resp.StatusCode
	}
	var body *api.Secret
	if resp != nil {
		var perr error
		body, perr = api.ParseSecret(resp.Body)
		if perr != nil && !errors.Is(perr, io.EOF) && err == nil {
			return st, fmt.Errorf("read %s: parse the answer of GET /v1/%s: %v", loc, loc.DataPath(), perr)
		}
	}
	switch {
	case err == nil:
	case status == http.StatusNotFound:
		if loc.KVVersion == 2 && body != nil {
			if md, ok := body.Data["metadata"].(map[string]any); ok {
				// 404 with data null and the version's metadata: deleted
				// or destroyed (read-secret-version; hashicorp/vault#24499).
				st.Version = intOf(md["version"])
				st.Destroyed, _ = md["destroyed"].(bool)
				if t, ok := md["deletion_time"].(string); ok && t != "" {
					st.DeletionTime, _ = time.Parse(time.RFC3339Nano, t)
				}
				st.Deleted = !st.Destroyed
				return st, nil
			}
		}
		if body != nil && len(body.Warnings) > 0 {
			return st, c.invalidPath(http.MethodGet, loc, body.Warnings)
		}
		return st, nil // never written
	default:
		return st, c.readError(withWarnings(err, body), loc)
	}
	if body == nil {
		return st, fmt.Errorf("read %s: empty answer from GET /v1/%s", loc, loc.DataPath())
	}
	raw := body.Data
	if loc.KVVersion == 2 {
		if md, ok := body.Data["metadata"].(map[string]any); ok {
			st.Version = intOf(md["version"])
		}
		inner, ok := body.Data["data"].(map[string]any)
		if !ok {
			// 200 without data.data: not a KV v2 answer.
			return st, fmt.Errorf("read %s: GET /v1/%s answered without data.data; is %s/ a KV v2 mount?", loc, loc.DataPath(), loc.Mount)
		}
		raw = inner
	}
	data, err := toStrings(raw)
	if err != nil {
		return st, fmt.Errorf("read %s: %w", loc, err)
	}
	st.Data, st.Found = data, true
	return st, nil
}

// intOf reads a JSON number (json.Number from api.ParseSecret, or
// float64).
func intOf(v any) int {
	switch t := v.(type) {
	case json.Number:
		n, _ := t.Int64()
		return int(n)
	case float64:
		return int(t)
	case int:
		return t
	}
	return 0
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

// WriteOptions are the explicit choices a caller makes about writes that
// Vault cannot protect by itself. The zero value is the safe default.
type WriteOptions struct {
	// AllowKVv1 accepts a KV v1 mount, which has no check-and-set: a write
	// always overwrites (the vault CLI's -cas is ignored there,
	// hashicorp/vault#19368), so "create only if absent" cannot be
	// guaranteed and two runs racing on an absent secret may each keep a
	// different password. Without it, EnsureSecretWith and ReplaceSecret
	// refuse a KV v1 mount with *KVv1Error before writing.
	AllowKVv1 bool
	// ReplaceDeleted lets EnsureSecretWith write a newly generated secret
	// over a KV v2 secret whose latest version is deleted or destroyed,
	// with check-and-set on that version's number. Without it that state
	// is a *DeletedError: the deleted value may still be what the database
	// uses (case N11). Set it only for an explicit rotation.
	ReplaceDeleted bool
}

// EnsureResult is what EnsureSecretWith did.
type EnsureResult struct {
	// Location is where the secret lives.
	Location Location
	// Data is the secret Vault holds now.
	Data map[string]string
	// Created is true only when this call's generated data is what Vault
	// holds now.
	Created bool
	// Version is the KV v2 version Data is (0 on KV v1).
	Version int
	// LostRace is true when another writer stored the secret between this
	// call's read and its check-and-set write: the generated data was
	// discarded and Data is the winner's.
	LostRace bool
	// Notes are messages for the user (never a secret value): a lost race,
	// or the missing write protection of a KV v1 mount.
	Notes []string
}

// EnsureSecret is EnsureSecretWith with the zero WriteOptions, returning
// the data and whether this call created it.
func (c *Client) EnsureSecret(ctx context.Context, logicalPath string, generate func() (map[string]string, error)) (data map[string]string, created bool, err error) {
	r, err := c.EnsureSecretWith(ctx, logicalPath, generate, WriteOptions{})
	return r.Data, r.Created, err
}

// EnsureSecretWith returns the secret at logicalPath, creating it first
// with generate if nothing was ever stored there.
//
// KV v2: the latest version is read first (GET <mount>/data/<path>); its
// metadata gives current_version even when that version is deleted. A
// readable secret is returned as is. An absent one is written with
// {"data": ..., "options": {"cas": 0}} ("write only if the key does not
// exist", https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-secret).
// cas is always sent, so mounts and keys with cas_required work. A latest
// version that is deleted or destroyed is a *DeletedError unless
// opts.ReplaceDeleted, which writes with cas = that version's number
// (cas=0 would fail there: current_version counts deleted versions,
// hashicorp/vault#15676). When the write loses a check-and-set race (HTTP
// 400 "check-and-set parameter did not match the current version"), the
// secret is read again and the winner's data returned with LostRace set
// and a note: never two passwords.
//
// KV v1 (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1)
// has no check-and-set. Without opts.AllowKVv1 it is a *KVv1Error after
// the read, and nothing is written (also when the secret exists). With it, an absent secret is written and
// read back; data that differs from what was written (another writer was
// later) is returned with LostRace set. A note says the mount has no write
// protection.
//
// The content of existing data is returned as is; validating it (for example
// a password with a trailing newline, case B07) is the caller's job.
//
// Errors: those of Inspect, *DeletedError, *KVv1Error, *PermissionError
// naming "create" on Location.DataPath() when the write is denied (nothing
// is written then), *InvalidPathError for a 404 that carries only warnings
// (a KV v2 mount addressed without data/), an error from generate, or an
// empty generated map. No token or secret value appears in an error.
func (c *Client) EnsureSecretWith(ctx context.Context, logicalPath string, generate func() (map[string]string, error), opts WriteOptions) (EnsureResult, error) {
	var r EnsureResult
	err := c.withAuth(ctx, "ensure", func() error {
		var err error
		r, err = c.ensureSecret(ctx, logicalPath, generate, opts)
		return err
	})
	return r, err
}

func (c *Client) ensureSecret(ctx context.Context, logicalPath string, generate func() (map[string]string, error), opts WriteOptions) (EnsureResult, error) {
	loc, err := c.resolve(ctx, logicalPath)
	if err != nil {
		return EnsureResult{}, err
	}
	r := EnsureResult{Location: loc}
	// Read first, also on KV v1: a KV v2 mount taken for KV v1 (the mount
	// lookup answered 404) shows itself by the read's warning, which is
	// then the error to report, not the KV v1 refusal.
	st, err := c.readState(ctx, loc)
	if err != nil {
		return r, err
	}
	if loc.KVVersion == 1 {
		if !opts.AllowKVv1 {
			return r, &KVv1Error{Location: loc}
		}
		r.Notes = append(r.Notes, kvV1Note(loc))
	}
	switch {
	case st.Found:
		r.Data, r.Version = st.Data, st.Version
		return r, nil
	case st.Gone() && !opts.ReplaceDeleted:
		return r, deletedError(st)
	}

	gen, values, err := generated(loc, generate)
	if err != nil {
		return r, err
	}
	err = c.put(ctx, loc, gen, st.Version, values)
	if err != nil && !isCASMismatch(err) {
		return r, err
	}

	// Read back: after a lost check-and-set the winner's data, on KV v1
	// whatever the last writer stored.
	after, err := c.readState(ctx, loc)
	switch {
	case err != nil:
		return r, err
	case after.Gone():
		return r, deletedError(after)
	case !after.Found:
		return r, fmt.Errorf("write %s: the secret is absent right after the write", loc)
	}
	r.Data, r.Version = after.Data, after.Version
	// A lost check-and-set with our own data stored is our write, applied
	// and then retried by the client: created, no race.
	r.Created = maps.Equal(after.Data, gen)
	r.LostRace = !r.Created
	if r.LostRace {
		r.Notes = append(r.Notes, lostRaceNote(loc, st.Version, after.Version))
	}
	return r, nil
}

// generated calls generate and checks its result; values are the secret
// values to scrub from errors.
func generated(loc Location, generate func() (map[string]string, error)) (map[string]string, []string, error) {
	gen, err := generate()
	if err != nil {
		return nil, nil, fmt.Errorf("generate secret for %s: %w", loc, err)
	}
	if len(gen) == 0 {
		return nil, nil, fmt.Errorf("generate secret for %s: no keys", loc)
	}
	values := make([]string, 0, len(gen))
	for k, v := range gen {
		if k == "" {
			return nil, nil, fmt.Errorf("generate secret for %s: empty key", loc)
		}
		if !publicKeys[k] {
			values = append(values, v)
		}
	}
	return gen, values, nil
}

// ReplaceSecret writes data as the next version of the secret at
// logicalPath, over whatever is current (readable, deleted or destroyed),
// with check-and-set expectVersion: the SecretState.Version the caller read
// (0 when it found nothing). It is the write of an explicit rotation; the
// caller proves the new value where it is used (the database, case B08)
// before or after, as its protocol needs. It returns the new version.
//
// A check-and-set mismatch is a *CASConflictError (errors.Is
// ErrCASConflict) naming the version Vault holds now, and nothing is
// written: the caller must read again and decide. On KV v1, which has no
// check-and-set, it refuses with *KVv1Error unless opts.AllowKVv1, and then
// overwrites (returning version 0). opts.ReplaceDeleted is not needed.
//
// Errors: those of Resolve, *CASConflictError, *KVv1Error,
// *PermissionError naming "update" (or "create") on Location.DataPath(),
// *InvalidPathError, or an empty data map. No token or value of data
// appears in an error.
func (c *Client) ReplaceSecret(ctx context.Context, logicalPath string, expectVersion int, data map[string]string, opts WriteOptions) (int, error) {
	var version int
	err := c.withAuth(ctx, "replace", func() error {
		loc, err := c.resolve(ctx, logicalPath)
		if err != nil {
			return err
		}
		if loc.KVVersion == 1 && !opts.AllowKVv1 {
			return &KVv1Error{Location: loc}
		}
		gen, values, err := generated(loc, func() (map[string]string, error) { return data, nil })
		if err != nil {
			return err
		}
		err = c.put(ctx, loc, gen, expectVersion, values)
		if isCASMismatch(err) {
			now, rerr := c.readState(ctx, loc)
			if rerr != nil {
				return rerr
			}
			return &CASConflictError{Location: loc, Sent: expectVersion, Current: now.Version}
		}
		if err != nil {
			return err
		}
		if loc.KVVersion == 2 {
			version = expectVersion + 1
		}
		return nil
	})
	return version, err
}

// put writes data to loc: on KV v2 {"data": data, "options": {"cas": cas}},
// on KV v1 data as the body (cas is meaningless there).
func (c *Client) put(ctx context.Context, loc Location, data map[string]string, cas int, secrets []string) error {
	payload := make(map[string]any, len(data))
	for k, v := range data {
		payload[k] = v
	}
	body := payload
	if loc.KVVersion == 2 {
		body = map[string]any{"data": payload, "options": map[string]any{"cas": cas}}
	}
	s, err := c.api.Logical().WriteWithContext(ctx, loc.DataPath(), body)
	if err == nil {
		return nil
	}
	if re := responseError(err); re != nil && re.StatusCode == http.StatusNotFound && s != nil && len(s.Warnings) > 0 {
		return c.invalidPath(http.MethodPut, loc, s.Warnings, secrets...)
	}
	if isCASMismatch(err) {
		return err
	}
	return c.writeError(withWarnings(err, s), loc, cas, secrets)
}

// publicKeys are keys whose values are not scrubbed from error messages: a
// user name such as "maas" is no secret, and redacting every occurrence of
// a short common word would garble paths and messages.
var publicKeys = map[string]bool{"username": true, "user": true}

func (c *Client) writeError(err error, loc Location, cas int, secrets []string) error {
	if isForbidden(err) {
		capability := "create"
		if cas > 0 {
			capability = "update"
		}
		needed := []string{"create", "read"}
		if capability == "update" {
			needed = append(needed, "update")
		}
		return c.permission(err, &PermissionError{
			Op:          capability,
			LogicalPath: loc.String(),
			APIPath:     loc.DataPath(),
			PolicyPath:  loc.DataPath(),
			Capability:  capability,
			Needed:      needed,
			Hint:        pathHint(loc),
		}, secrets...)
	}
	if isCASRequired(err) {
		// Cannot happen with cas always sent; if a proxy drops options,
		// say what Vault wants.
		return c.wrap(err, fmt.Sprintf("write %s: the mount or key has cas_required=true and Vault saw no check-and-set value", loc), secrets...)
	}
	return c.wrap(err, "write "+loc.String(), secrets...)
}
