package vault

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/vault/api"
)

var (
	// ErrNoAddress means neither Options.Address nor VAULT_ADDR is set.
	ErrNoAddress = errors.New("no vault address: set VAULT_ADDR (for example https://vault.example.com:8200) or pass an address")
	// ErrNoToken means no token was passed, VAULT_TOKEN is unset and there is
	// no ~/.vault-token.
	ErrNoToken = errors.New("no vault token: set VAULT_TOKEN, run `vault login` (which writes ~/.vault-token), or pass a token")
	// ErrUnreachable marks an *UnreachableError.
	ErrUnreachable = errors.New("vault unreachable")
	// ErrPermissionDenied marks a *PermissionError (HTTP 403 from Vault).
	ErrPermissionDenied = errors.New("vault permission denied")
	// ErrSecretDeleted marks a *DeletedError: the latest KV v2 version of
	// a secret is soft-deleted or destroyed, so the stored password cannot
	// be read but the version history says it existed; EnsureSecret
	// refuses to generate a new one over it (case N11).
	ErrSecretDeleted = errors.New("latest version of the secret is deleted")
	// ErrLoginConfig means the auth method is misconfigured or its
	// credentials (role ID, secret ID, service account token) cannot be read;
	// no request was made.
	ErrLoginConfig = errors.New("vault login configuration")
	// ErrLoginFailed marks a *LoginError: Vault refused the login.
	ErrLoginFailed = errors.New("vault login failed")
	// ErrTokenInvalid marks a *TokenError: Vault refuses the token itself
	// (expired, revoked or unknown), as opposed to a policy that lacks a
	// capability.
	ErrTokenInvalid = errors.New("vault token invalid")
)

// LoginError is a login through an auth method that Vault refused or that
// did not reach Vault.
type LoginError struct {
	// Method describes the auth method, mount, role and where the
	// credentials came from (never the credentials).
	Method string
	// Err is the cause, scrubbed of credentials.
	Err error
}

// Error reads "vault login with METHOD failed: CAUSE".
func (e *LoginError) Error() string {
	return fmt.Sprintf("vault login with %s failed: %v", e.Method, e.Err)
}

// Unwrap returns the cause.
func (e *LoginError) Unwrap() error { return e.Err }

// Is reports target == ErrLoginFailed.
func (e *LoginError) Is(target error) bool { return target == ErrLoginFailed }

// TokenError means Vault refused a request because it no longer accepts the
// token: it expired (for example at its max TTL, case B11), was revoked, or
// never existed. Policy denials are *PermissionError instead.
type TokenError struct {
	// Source says where the token came from (Client.TokenSource).
	Source string
	// Method is the client's auth method.
	Method string
	// ExpiredAt is the token's expiry as Vault last reported it, set when
	// Vault's clock (VaultTime) has passed it; zero when the token was
	// revoked or its expiry is unknown.
	ExpiredAt, VaultTime time.Time
	// MaxTTLReached is set when Vault capped a renewal of this token.
	MaxTTLReached bool
	// Denied is the request Vault refused.
	Denied *PermissionError
	// Hint says how to get a new token.
	Hint string
	// ReloginErr is set when logging in again through the auth method failed.
	ReloginErr error
}

// Error names the token's source, what happened to it, the refused request
// and how to log in again. It contains no token.
func (e *TokenError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the Vault token from %s ", e.Source)
	switch {
	case !e.ExpiredAt.IsZero():
		fmt.Fprintf(&b, "expired at %s (Vault's clock says %s)", e.ExpiredAt.UTC().Format(time.RFC3339), e.VaultTime.UTC().Format(time.RFC3339))
		if e.MaxTTLReached {
			b.WriteString(": it reached its max TTL, so renewing could not extend it")
		}
	default:
		b.WriteString("is no longer valid: it expired or was revoked, or was never valid (Vault refuses auth/token/lookup-self too)")
	}
	if e.Denied != nil {
		fmt.Fprintf(&b, "; refused: %s %s (%s)", e.Denied.Op, e.Denied.LogicalPath, e.Denied.APIPath)
	}
	if e.ReloginErr != nil {
		fmt.Fprintf(&b, "; logging in again failed: %v", e.ReloginErr)
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, "; to continue, %s", e.Hint)
	}
	return b.String()
}

// Unwrap returns the refused request's *PermissionError (and the relogin
// error), so errors.Is(err, ErrPermissionDenied) holds too.
func (e *TokenError) Unwrap() []error {
	var out []error
	if e.Denied != nil {
		out = append(out, e.Denied)
	}
	if e.ReloginErr != nil {
		out = append(out, e.ReloginErr)
	}
	return out
}

// Is reports target == ErrTokenInvalid.
func (e *TokenError) Is(target error) bool { return target == ErrTokenInvalid }

// casMismatch is the error KV v2 returns with HTTP 400 when options.cas does
// not equal the current version (KV v2 API, "Create/Update secret":
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-secret).
const casMismatch = "check-and-set parameter did not match the current version"

// UnreachableError means no HTTP exchange with Vault happened: connection
// refused, DNS failure, timeout, or a TLS handshake failure.
type UnreachableError struct {
	// Address is the Vault URL that was dialled.
	Address string
	// Hint says what to check, or is empty.
	Hint string
	// Err is the network error.
	Err error
}

// Error reads "vault at ADDR unreachable: CAUSE".
func (e *UnreachableError) Error() string {
	msg := fmt.Sprintf("vault at %s unreachable: %v", e.Address, e.Err)
	if e.Hint != "" {
		msg += " (" + e.Hint + ")"
	}
	return msg
}

// Unwrap returns the network error.
func (e *UnreachableError) Unwrap() error { return e.Err }

// Is reports target == ErrUnreachable.
func (e *UnreachableError) Is(target error) bool { return target == ErrUnreachable }

// PermissionError is an HTTP 403 from Vault: the token is invalid or expired,
// or its policy lacks a capability on the API path (case B11: a KV v2 policy
// must name <mount>/data/<path>, not the logical path).
type PermissionError struct {
	// Op is what was attempted, for example "read" or "create".
	Op string
	// LogicalPath is the path the caller asked for (kv/cloudnativepg/maas-postgres).
	LogicalPath string
	// APIPath is the request path without /v1/ (kv/data/cloudnativepg/maas-postgres).
	APIPath string
	// PolicyPath is the path a policy must grant (usually APIPath).
	PolicyPath string
	// Capability is the capability the failed request needs.
	Capability string
	// Needed are all capabilities EnsureSecret may use on PolicyPath.
	Needed []string
	// Reason replaces the default "the token lacks CAPABILITY on PATH" when
	// the cause is less certain (the mount lookup).
	Reason string
	// Hint is extra advice, or empty.
	Hint string
	// VaultErrors are the messages from Vault's {"errors":[...]} body.
	VaultErrors []string
}

// Error names the path, the missing capability and the policy stanza that
// grants it. It contains no token.
func (e *PermissionError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "permission denied: %s %s (%s): ", e.Op, e.LogicalPath, e.APIPath)
	if e.Reason != "" {
		b.WriteString(e.Reason)
	} else {
		fmt.Fprintf(&b, "the token lacks %q on %q", e.Capability, e.PolicyPath)
	}
	if e.Hint != "" {
		b.WriteString("; ")
		b.WriteString(e.Hint)
	}
	fmt.Fprintf(&b, "; policy needed: %s", e.PolicyStanza())
	if len(e.VaultErrors) > 0 {
		fmt.Fprintf(&b, "; vault said: %s", strings.Join(e.VaultErrors, "; "))
	}
	return b.String()
}

// PolicyStanza is the HCL policy rule that would let EnsureSecret work on
// PolicyPath, for example
// path "kv/data/cloudnativepg/maas-postgres" { capabilities = ["create", "read"] }.
func (e *PermissionError) PolicyStanza() string {
	caps := e.Needed
	if len(caps) == 0 {
		caps = []string{e.Capability}
	}
	quoted := make([]string, len(caps))
	for i, c := range caps {
		quoted[i] = fmt.Sprintf("%q", c)
	}
	return fmt.Sprintf("path %q { capabilities = [%s] }", e.PolicyPath, strings.Join(quoted, ", "))
}

// Is reports target == ErrPermissionDenied.
func (e *PermissionError) Is(target error) bool { return target == ErrPermissionDenied }

// redactedError carries a message scrubbed of secrets while keeping the
// original chain for errors.Is/As.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// responseError returns the *api.ResponseError in err's chain, or nil.
func responseError(err error) *api.ResponseError {
	var re *api.ResponseError
	if errors.As(err, &re) {
		return re
	}
	return nil
}

// isCASMismatch reports whether err is KV v2's check-and-set rejection.
func isCASMismatch(err error) bool {
	re := responseError(err)
	if re == nil || re.StatusCode != http.StatusBadRequest {
		return false
	}
	for _, m := range re.Errors {
		if strings.Contains(m, casMismatch) {
			return true
		}
	}
	return false
}

// unreachable returns an *UnreachableError when err happened below HTTP, or
// nil.
func (c *Client) unreachable(err error) error {
	if responseError(err) != nil {
		return nil
	}
	var (
		opErr   *net.OpError
		dnsErr  *net.DNSError
		certErr *tls.CertificateVerificationError
		authErr x509.UnknownAuthorityError
		hostErr x509.HostnameError
	)
	switch {
	case errors.As(err, &certErr), errors.As(err, &authErr), errors.As(err, &hostErr):
		return &UnreachableError{Address: c.Address(), Err: innermost(err), Hint: "TLS certificate not trusted: set VAULT_CACERT or VAULT_CAPATH, or VAULT_TLS_SERVER_NAME"}
	case errors.As(err, &dnsErr):
		return &UnreachableError{Address: c.Address(), Err: dnsErr, Hint: "check VAULT_ADDR"}
	case errors.As(err, &opErr):
		return &UnreachableError{Address: c.Address(), Err: opErr, Hint: "check VAULT_ADDR and that Vault is running"}
	}
	return nil
}

// innermost unwraps single-error chains to the root cause.
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// describe condenses err for messages: an *api.ResponseError becomes
// "vault answered 400 to PUT /v1/kv/data/x: msg"; others stay as they are.
func describe(err error) string {
	re := responseError(err)
	if re == nil {
		return err.Error()
	}
	method, path := re.HTTPMethod, re.URL
	if i := strings.Index(path, "/v1/"); i >= 0 {
		path = path[i:]
	}
	if j := strings.IndexByte(path, '?'); j >= 0 {
		path = path[:j]
	}
	msg := fmt.Sprintf("vault answered %d to %s %s", re.StatusCode, method, path)
	if len(re.Errors) > 0 {
		msg += ": " + strings.Join(trimAll(re.Errors), "; ")
	}
	return msg
}

func trimAll(ss []string) []string {
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// wrap is the single exit for errors from Vault calls: it classifies
// unreachable servers, prefixes context, and scrubs the token and any extra
// secrets from the message.
func (c *Client) wrap(err error, context string, secrets ...string) error {
	if err == nil {
		return nil
	}
	var base error
	if u := c.unreachable(err); u != nil {
		base = u
	} else {
		base = err
	}
	msg := describeAny(base)
	var we *warnedError
	if errors.As(err, &we) {
		msg += "; vault warned: " + strings.Join(we.warnings, "; ")
	}
	if context != "" {
		msg = context + ": " + msg
	}
	return &redactedError{msg: Redact(msg, c.redactions(secrets...)...), err: base}
}

func describeAny(err error) string {
	var u *UnreachableError
	if errors.As(err, &u) {
		return u.Error()
	}
	return describe(err)
}

// permission builds a *PermissionError for a 403 and scrubs it like wrap.
func (c *Client) permission(err error, pe *PermissionError, secrets ...string) error {
	if re := responseError(err); re != nil {
		pe.VaultErrors = trimAll(re.Errors)
	}
	secrets = c.redactions(secrets...)
	for i, m := range pe.VaultErrors {
		pe.VaultErrors[i] = Redact(m, secrets...)
	}
	return pe
}

// isForbidden reports an HTTP 403 answer.
func isForbidden(err error) bool {
	re := responseError(err)
	return re != nil && re.StatusCode == http.StatusForbidden
}
