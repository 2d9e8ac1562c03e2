package vault

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

var (
	// ErrKVv1Unprotected marks a *KVv1Error.
	ErrKVv1Unprotected = errors.New("KV v1 mount has no write protection")
	// ErrCASConflict marks a *CASConflictError.
	ErrCASConflict = errors.New("vault check-and-set conflict")
	// ErrInvalidPath marks an *InvalidPathError.
	ErrInvalidPath = errors.New("vault answered 404 with only warnings")
)

// KVv1OptIn is the inventory field that sets WriteOptions.AllowKVv1 for
// the database password; the KV v1 messages name it.
const KVv1OptIn = "database.vaultAllowUnprotectedKVv1"

// casRequired is the error KV v2 returns with HTTP 400 for a write without
// options.cas when the mount's config or the key's metadata has
// cas_required=true (vault-plugin-secrets-kv path_data.go;
// hashicorp/terraform-provider-vault#2472).
const casRequired = "check-and-set parameter required for this call"

// DeletedError means the latest KV v2 version of a secret exists but cannot
// be read: it was soft-deleted (`vault kv delete`, or its
// delete_version_after passed) or destroyed. Vault then answers the read
// with 404, data null and the version's metadata, and current_version
// stays at that version (hashicorp/vault#24499, #10641, #4935). This is not
// "no secret": the database may still use the deleted value (case N11).
type DeletedError struct {
	// Location is the secret.
	Location Location
	// Version is the deleted or destroyed latest version (current_version).
	Version int
	// DeletionTime is its deletion_time (zero if Vault gave none).
	DeletionTime time.Time
	// Destroyed is true when the data is gone for good.
	Destroyed bool
	// Rotate, when set, replaces the generic advice on rotating explicitly
	// (for example the maasctl command that does it).
	Rotate string
}

func deletedError(st SecretState) *DeletedError {
	return &DeletedError{Location: st.Location, Version: st.Version, DeletionTime: st.DeletionTime, Destroyed: st.Destroyed}
}

// Error names the secret, the version, what happened to it and the two
// ways out: undelete that version, or rotate explicitly.
func (e *DeletedError) Error() string {
	l := e.Location
	var b strings.Builder
	fmt.Fprintf(&b, "vault secret %s: its latest version %d ", l, e.Version)
	if e.Destroyed {
		b.WriteString("was destroyed (its data is gone for good)")
	} else {
		b.WriteString("was deleted")
		if !e.DeletionTime.IsZero() {
			fmt.Fprintf(&b, " at %s", e.DeletionTime.UTC().Format(time.RFC3339))
		}
	}
	fmt.Fprintf(&b, ": GET /v1/%s answers 404 with no data, and current_version is still %d. This is not a missing password: the database may still use version %d's value, so maasctl will not generate a new one over it. ",
		l.DataPath(), e.Version, e.Version)
	rotate := e.Rotate
	if rotate == "" {
		rotate = fmt.Sprintf("rotate the password on purpose: a new version %d written with check-and-set %d and set on the database role as well, before the Secret or maas-db-config change", e.Version+1, e.Version)
	}
	if e.Destroyed {
		fmt.Fprintf(&b, "A destroyed version cannot be undeleted: %s", rotate)
	} else {
		fmt.Fprintf(&b, "Either restore it with `vault kv undelete -mount=%s -versions=%d %s`, or %s", l.Mount, e.Version, l.Path, rotate)
	}
	return b.String()
}

// Is reports target == ErrSecretDeleted.
func (e *DeletedError) Is(target error) bool { return target == ErrSecretDeleted }

// KVv1Error refuses a create-only or rotating write on a KV v1 mount, which
// has no check-and-set (KV v1 API: no versions, no cas; the CLI's -cas is
// silently ignored there, hashicorp/vault#19368). Nothing was written.
type KVv1Error struct {
	Location Location
}

// Error says why KV v1 cannot protect the write and how to proceed.
func (e *KVv1Error) Error() string {
	l := e.Location
	return fmt.Sprintf("vault mount %s/ (holding %s) is KV v1, which has no write protection: there is no check-and-set, every write overwrites, "+
		"so maasctl cannot create the password only if it is absent and two runs could store two different passwords; nothing was written. "+
		"Use a KV v2 mount (`vault kv enable-versioning %s/`, or a new `vault secrets enable -version=2 kv` mount in database.vaultPath), "+
		"or accept a KV v1 mount without write protection with %s: true in the inventory (--set %s=true)",
		l.Mount, l, l.Mount, KVv1OptIn, KVv1OptIn)
}

// Is reports target == ErrKVv1Unprotected.
func (e *KVv1Error) Is(target error) bool { return target == ErrKVv1Unprotected }

// kvV1Note is the note of a KV v1 write allowed by WriteOptions.AllowKVv1.
func kvV1Note(l Location) string {
	return fmt.Sprintf("vault mount %s/ is KV v1: %s has no write protection (no check-and-set), so another writer can overwrite it unnoticed (allowed by %s)", l.Mount, l, KVv1OptIn)
}

// lostRaceNote reports a lost check-and-set race (or, on KV v1, a later
// writer) and that the stored value is used.
func lostRaceNote(l Location, read, now int) string {
	if l.KVVersion == 1 {
		return fmt.Sprintf("another writer overwrote %s right after this run wrote it (KV v1 has no check-and-set): this run discarded its generated password and uses the stored one", l)
	}
	return fmt.Sprintf("lost a check-and-set race on %s: another writer stored version %d between this run's read (version %d) and its write with cas=%d; this run discarded the password it generated and uses the stored version %d",
		l, now, read, read, now)
}

// CASConflictError means a KV v2 write with check-and-set Sent was refused
// because the secret is at version Current now (HTTP 400 "check-and-set
// parameter did not match the current version",
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-secret).
// Nothing was written.
type CASConflictError struct {
	Location Location
	// Sent is the cas value of the refused write, Current the
	// current_version read right after.
	Sent, Current int
}

// Error names the secret and both versions.
func (e *CASConflictError) Error() string {
	return fmt.Sprintf("check-and-set conflict on vault secret %s: the write expected version %d (cas=%d) but Vault holds version %d now, so another writer changed it in between; nothing was written: read it again and decide",
		e.Location, e.Sent, e.Sent, e.Current)
}

// Is reports target == ErrCASConflict.
func (e *CASConflictError) Is(target error) bool { return target == ErrCASConflict }

// InvalidPathError is an HTTP 404 whose body has no errors, only warnings:
// what a KV v2 mount answers to a request outside its data/, metadata/ and
// other versioned endpoints ("Invalid path for a versioned K/V secrets
// engine", hvac/hvac#179 and #378, BetterCloud/vault-java-driver#123,
// rundeck-plugins/vault-storage#57). The api client turns such a read into
// no error and no data, which a caller must not take for "absent".
type InvalidPathError struct {
	// Method and APIPath are the refused request.
	Method, APIPath string
	// Location is where maasctl thought the secret was.
	Location Location
	// Warnings are Vault's warnings, as sent.
	Warnings []string
	// DataPath is the KV v2 API path of the same secret, the suggested fix.
	DataPath string
}

// Error quotes Vault's warnings and gives the data/ path.
func (e *InvalidPathError) Error() string {
	l := e.Location
	msg := fmt.Sprintf("vault answered 404 to %s /v1/%s with no error, only the warning %q: %s/ is a KV v2 mount, where this secret's API path is %s",
		e.Method, e.APIPath, strings.Join(e.Warnings, "; "), l.Mount, e.DataPath)
	if l.Assumed != "" {
		msg += fmt.Sprintf(" (maasctl took %s/ for KV v1 because %s)", l.Mount, l.Assumed)
	}
	return msg + "; nothing was read or written. Address the secret by its KV v2 API path " + e.DataPath + ", or give the logical path " +
		l.String() + " to a Vault whose sys/internal/ui/mounts answers for it (a token with any capability below the mount may call it)"
}

// Is reports target == ErrInvalidPath.
func (e *InvalidPathError) Is(target error) bool { return target == ErrInvalidPath }

// invalidPath builds an *InvalidPathError with the warnings scrubbed.
func (c *Client) invalidPath(method string, loc Location, warnings []string, secrets ...string) error {
	v2 := loc
	v2.KVVersion = 2
	dataPath := v2.DataPath()
	if loc.KVVersion == 2 {
		// Already a data/ path: Vault disagrees with the mount lookup.
		dataPath = loc.DataPath()
	}
	red := c.redactions(secrets...)
	ws := make([]string, 0, len(warnings))
	for _, w := range trimAll(warnings) {
		ws = append(ws, Redact(w, red...))
	}
	return &InvalidPathError{Method: method, APIPath: loc.DataPath(), Location: loc, Warnings: ws, DataPath: dataPath}
}

// warnedError is a Vault error whose answer also carried warnings; wrap
// puts them in the message ("Treats any non-2xx status as an error and
// includes Vault's warnings", case B10).
type warnedError struct {
	err      error
	warnings []string
}

func (e *warnedError) Error() string { return e.err.Error() }
func (e *warnedError) Unwrap() error { return e.err }

// withWarnings attaches the warnings of body to err, if any.
func withWarnings(err error, body *api.Secret) error {
	if err == nil || body == nil || len(trimAll(body.Warnings)) == 0 {
		return err
	}
	return &warnedError{err: err, warnings: trimAll(body.Warnings)}
}

// isCASRequired reports KV v2's refusal of a write without cas on a
// cas_required mount or key.
func isCASRequired(err error) bool {
	re := responseError(err)
	if re == nil || re.StatusCode != http.StatusBadRequest {
		return false
	}
	for _, m := range re.Errors {
		if strings.Contains(m, casRequired) {
			return true
		}
	}
	return false
}
