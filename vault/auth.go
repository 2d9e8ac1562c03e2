package vault

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/vault/api"
	"github.com/hashicorp/vault/api/auth/approle"
	"github.com/hashicorp/vault/api/auth/kubernetes"
)

// Auth methods of AuthOptions.Method.
const (
	// AuthToken uses a token as the vault CLI finds it: Options.Token,
	// VAULT_TOKEN, then ~/.vault-token.
	AuthToken = "token"
	// AuthKubernetes logs in with a Kubernetes service account JWT and a
	// role (https://developer.hashicorp.com/vault/docs/auth/kubernetes), for
	// running in a pod or Job.
	AuthKubernetes = "kubernetes"
	// AuthAppRole logs in with a role ID and a secret ID
	// (https://developer.hashicorp.com/vault/docs/auth/approle), for CI.
	AuthAppRole = "approle"
)

// DefaultServiceAccountTokenPath is where Kubernetes mounts a pod's service
// account token, and the JWT AuthKubernetes reads by default.
const DefaultServiceAccountTokenPath = "/var/run/secrets/kubernetes.io/serviceaccount/token"

// Environment variables of AppRole credentials, read when AuthOptions names
// neither a value nor a file. The vault CLI has no such variables; these
// follow its VAULT_ prefix.
const (
	EnvRoleID   = "VAULT_ROLE_ID"
	EnvSecretID = "VAULT_SECRET_ID"
)

// AuthOptions selects how the Client gets its token.
type AuthOptions struct {
	// Method is AuthToken (the default when empty), AuthKubernetes or
	// AuthAppRole.
	Method string
	// MountPath is where the auth method is enabled, without auth/ and
	// slashes; empty means the method's name ("kubernetes", "approle").
	MountPath string
	// Role is the Kubernetes auth role (required for AuthKubernetes).
	Role string
	// JWTFile is the service account token AuthKubernetes presents; empty
	// means DefaultServiceAccountTokenPath. It is read at every login, so a
	// rotated projected token is picked up.
	JWTFile string
	// RoleID, or else the content of RoleIDFile, or else $VAULT_ROLE_ID, is
	// the AppRole role ID.
	RoleID     string
	RoleIDFile string
	// SecretID, or else the content of SecretIDFile, or else
	// $VAULT_SECRET_ID, is the AppRole secret ID.
	SecretID     string
	SecretIDFile string
}

func (a AuthOptions) method() string {
	if a.Method == "" {
		return AuthToken
	}
	return a.Method
}

func (a AuthOptions) mount() string {
	if m := strings.Trim(a.MountPath, "/"); m != "" {
		return m
	}
	return a.method()
}

// check validates the options without reading secrets.
func (a AuthOptions) check() error {
	switch a.method() {
	case AuthToken:
	case AuthKubernetes:
		if strings.TrimSpace(a.Role) == "" {
			return fmt.Errorf("%w: Kubernetes auth needs a role (the Vault role bound to the service account)", ErrLoginConfig)
		}
	case AuthAppRole:
		if a.RoleID == "" && a.RoleIDFile == "" && os.Getenv(EnvRoleID) == "" {
			return fmt.Errorf("%w: AppRole auth needs a role ID: set %s or a role ID file", ErrLoginConfig, EnvRoleID)
		}
		if a.SecretID == "" && a.SecretIDFile == "" && os.Getenv(EnvSecretID) == "" {
			return fmt.Errorf("%w: AppRole auth needs a secret ID: set %s or a secret ID file", ErrLoginConfig, EnvSecretID)
		}
	default:
		return fmt.Errorf("%w: unknown auth method %q (want %s, %s or %s)", ErrLoginConfig, a.Method, AuthToken, AuthKubernetes, AuthAppRole)
	}
	return nil
}

// describe names the method for messages, without credentials.
func (a AuthOptions) describe() string {
	switch a.method() {
	case AuthKubernetes:
		jwt := a.JWTFile
		if jwt == "" {
			jwt = DefaultServiceAccountTokenPath
		}
		return fmt.Sprintf("Kubernetes auth at auth/%s (role %s, service account token %s)", a.mount(), a.Role, jwt)
	case AuthAppRole:
		return fmt.Sprintf("AppRole auth at auth/%s (role ID from %s, secret ID from %s)", a.mount(),
			credSource(a.RoleID, a.RoleIDFile, EnvRoleID), credSource(a.SecretID, a.SecretIDFile, EnvSecretID))
	}
	return "token"
}

func credSource(value, file, env string) string {
	switch {
	case value != "":
		return "options"
	case file != "":
		return file
	}
	return "$" + env
}

// readCred returns value, the trimmed content of file, or $env.
func readCred(value, file, env, what string) (string, error) {
	if value != "" {
		return value, nil
	}
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%w: read %s file: %w", ErrLoginConfig, what, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%w: %s file %s is empty", ErrLoginConfig, what, file)
		}
		return v, nil
	}
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("%w: no %s: set %s", ErrLoginConfig, what, env)
}

// authMethod builds the vault/api login helper for the configured method,
// reading credentials now, and returns the credential values for
// redaction.
func (a AuthOptions) authMethod() (api.AuthMethod, []string, error) {
	switch a.method() {
	case AuthKubernetes:
		file := a.JWTFile
		if file == "" {
			file = DefaultServiceAccountTokenPath
		}
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: read the service account token: %w", ErrLoginConfig, err)
		}
		jwt := strings.TrimSpace(string(b))
		if jwt == "" {
			return nil, nil, fmt.Errorf("%w: service account token file %s is empty", ErrLoginConfig, file)
		}
		m, err := kubernetes.NewKubernetesAuth(a.Role, kubernetes.WithServiceAccountToken(jwt), kubernetes.WithMountPath(a.mount()))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrLoginConfig, err)
		}
		return m, []string{jwt}, nil
	case AuthAppRole:
		roleID, err := readCred(a.RoleID, a.RoleIDFile, EnvRoleID, "AppRole role ID")
		if err != nil {
			return nil, nil, err
		}
		secretID, err := readCred(a.SecretID, a.SecretIDFile, EnvSecretID, "AppRole secret ID")
		if err != nil {
			return nil, nil, err
		}
		m, err := approle.NewAppRoleAuth(roleID, &approle.SecretID{FromString: secretID}, approle.WithMountPath(a.mount()))
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrLoginConfig, err)
		}
		return m, []string{roleID, secretID}, nil
	}
	return nil, nil, fmt.Errorf("%w: the token method does not log in", ErrLoginConfig)
}

// authState is the Client's knowledge of its token, guarded by mu.
type authState struct {
	mu      sync.Mutex
	loginMu sync.Mutex // serializes logins
	// secrets are credentials to scrub from messages besides the token.
	secrets []string
	// expire is the token's expiry in Vault's clock as last reported by
	// lookup-self (zero: unknown or never).
	expire time.Time
	// maxed is set once Vault capped a renewal (max TTL reached).
	maxed bool
	// renewedUntil is the local time the last renewal lasts until.
	renewedUntil time.Time
	logins       int
}

func (c *Client) canLogin() bool { return c.auth.method() != AuthToken }

// redactions are the values no message may contain.
func (c *Client) redactions(extra ...string) []string {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	out := append([]string{c.api.Token()}, c.state.secrets...)
	return append(out, extra...)
}

// Login logs in through the configured auth method (AuthKubernetes or
// AuthAppRole) and makes the new token the client's; it reads the
// credentials again each time. With AuthToken it does nothing. The calls
// that need Vault log in by themselves when the client has no token yet, or
// when Vault refuses the token as expired or revoked.
//
// Errors: *LoginError (errors.Is ErrLoginFailed) naming the method, mount
// and role and Vault's answer, an ErrLoginConfig error for unreadable
// credentials, or *UnreachableError. No credential appears in an error.
func (c *Client) Login(ctx context.Context) error {
	if !c.canLogin() {
		return nil
	}
	c.state.loginMu.Lock()
	defer c.state.loginMu.Unlock()
	return c.loginLocked(ctx)
}

func (c *Client) loginLocked(ctx context.Context) error {
	m, creds, err := c.auth.authMethod()
	if err != nil {
		return fmt.Errorf("vault login with %s: %w", c.auth.describe(), err)
	}
	c.state.mu.Lock()
	for _, s := range creds {
		if !contains(c.state.secrets, s) {
			c.state.secrets = append(c.state.secrets, s)
		}
	}
	c.state.mu.Unlock()
	s, err := c.api.Auth().Login(ctx, m)
	if err != nil {
		return &LoginError{Method: c.auth.describe(), Err: c.wrap(err, "")}
	}
	c.state.mu.Lock()
	c.state.logins++
	c.state.maxed = false
	c.state.expire = time.Time{}
	c.state.mu.Unlock()
	if s == nil || s.Auth == nil {
		return &LoginError{Method: c.auth.describe(), Err: errors.New("vault returned no token")}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// TokenInfo describes the client's token as auth/token/lookup-self reports
// it (https://developer.hashicorp.com/vault/api-docs/auth/token#lookup-a-token-self).
// It never holds the token itself.
type TokenInfo struct {
	// Source says where the token came from (see TokenSource).
	Source string
	// DisplayName is Vault's display name, such as "token" or "approle".
	DisplayName string
	// Policies are the token's policies.
	Policies []string
	// TTL is the time left; zero means the token never expires (root).
	TTL time.Duration
	// ExpireTime is when the token expires, in Vault's clock; zero: never.
	ExpireTime time.Time
	// ExplicitMaxTTL caps the token's life across renewals; zero: only the
	// mount's or the system's max TTL applies.
	ExplicitMaxTTL time.Duration
	// Renewable says whether renew-self can extend the token.
	Renewable bool
}

// String is a one-line description without the token.
func (t TokenInfo) String() string {
	life := "never expires"
	if t.TTL > 0 {
		life = fmt.Sprintf("expires in %s at %s", t.TTL.Round(time.Second), t.ExpireTime.UTC().Format(time.RFC3339))
		if t.Renewable {
			life += " unless renewed"
		} else {
			life += " (not renewable)"
		}
		if t.ExplicitMaxTTL > 0 {
			life += fmt.Sprintf(", explicit max TTL %s", t.ExplicitMaxTTL)
		}
	}
	return fmt.Sprintf("Vault token from %s (display name %s, policies %s) %s", t.Source, t.DisplayName, strings.Join(t.Policies, ","), life)
}

// LookupSelf describes the client's token through GET
// /v1/auth/token/lookup-self, logging in first when the client uses an
// auth method and has no token yet.
//
// Errors: *TokenError (errors.Is ErrTokenInvalid) when Vault refuses the
// token, *LoginError, *UnreachableError, or a malformed answer.
func (c *Client) LookupSelf(ctx context.Context) (TokenInfo, error) {
	var info TokenInfo
	err := c.withAuth(ctx, "look up", func() error {
		s, err := c.api.Auth().Token().LookupSelfWithContext(ctx)
		if err != nil {
			if isForbidden(err) {
				return c.permission(err, &PermissionError{Op: "look up the token at", LogicalPath: "auth/token/lookup-self",
					APIPath: "auth/token/lookup-self", PolicyPath: "auth/token/lookup-self", Capability: "read",
					Reason: "the token is invalid, expired or revoked, or its policies lack \"read\" on auth/token/lookup-self (part of Vault's default policy)"})
			}
			return c.wrap(err, "look up the vault token")
		}
		info, err = c.tokenInfo(s)
		return err
	})
	return info, err
}

func (c *Client) tokenInfo(s *api.Secret) (TokenInfo, error) {
	if s == nil || s.Data == nil {
		return TokenInfo{}, errors.New("look up the vault token: empty answer")
	}
	info := TokenInfo{Source: c.TokenSource()}
	info.DisplayName, _ = s.Data["display_name"].(string)
	info.Policies, _ = s.TokenPolicies()
	info.TTL, _ = s.TokenTTL()
	info.Renewable, _ = s.TokenIsRenewable()
	if v, ok := s.Data["explicit_max_ttl"].(json.Number); ok {
		n, _ := v.Int64()
		info.ExplicitMaxTTL = time.Duration(n) * time.Second
	}
	if v, _ := s.Data["expire_time"].(string); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err == nil {
			info.ExpireTime = t
		}
	}
	c.state.mu.Lock()
	c.state.expire = info.ExpireTime
	c.state.mu.Unlock()
	return info, nil
}

// withAuth runs op with a token: it logs in first when the client uses an
// auth method and has none, and when op is refused with 403 it tells an
// invalid token (*TokenError) from a policy denial (the *PermissionError
// as is). A client with an auth method logs in again and retries op once.
func (c *Client) withAuth(ctx context.Context, what string, op func() error) error {
	if c.canLogin() && c.api.Token() == "" {
		c.state.loginMu.Lock()
		var err error
		if c.api.Token() == "" { // a concurrent call may have logged in
			err = c.loginLocked(ctx)
		}
		c.state.loginMu.Unlock()
		if err != nil {
			return err
		}
	}
	before := c.api.Token()
	err := op()
	var pe *PermissionError
	if err == nil || !errors.As(err, &pe) {
		return err
	}
	te := c.tokenProblem(ctx, pe)
	if te == nil {
		if pe.Op == opLookupMount {
			pe.Reason = "the mount does not exist, or the token's policies grant nothing below it"
		}
		return err
	}
	if !c.canLogin() {
		return te
	}
	c.state.loginMu.Lock()
	if c.api.Token() == before { // no other goroutine logged in meanwhile
		if lerr := c.loginLocked(ctx); lerr != nil {
			c.state.loginMu.Unlock()
			te.ReloginErr = lerr
			return te
		}
	}
	c.state.loginMu.Unlock()
	return op()
}

// tokenProblem decides, after Vault refused a request, whether the token
// itself is refused: it asks auth/token/lookup-self (allowed by Vault's
// default policy) and, when that is refused too, reads Vault's clock from
// sys/health to say whether the token expired or was revoked. It returns
// nil when the token is fine (or the question cannot be answered), so the
// policy is to blame.
func (c *Client) tokenProblem(ctx context.Context, pe *PermissionError) *TokenError {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	_, err := c.api.Auth().Token().LookupSelfWithContext(lctx)
	if err == nil || !isForbidden(err) {
		return nil
	}
	te := &TokenError{Source: c.TokenSource(), Method: c.auth.method(), Denied: pe, Hint: c.ReloginHint()}
	c.state.mu.Lock()
	expire := c.state.expire
	te.MaxTTLReached = c.state.maxed
	c.state.mu.Unlock()
	if !expire.IsZero() {
		if h, herr := c.api.Sys().HealthWithContext(lctx); herr == nil && h.ServerTimeUTC > 0 {
			now := time.Unix(h.ServerTimeUTC, 0)
			if !now.Before(expire.Truncate(time.Second)) {
				te.ExpiredAt, te.VaultTime = expire, now
			}
		}
	}
	return te
}

// KeepAlive keeps the client's token usable until ctx is done or the
// returned stop function is called (stop waits for the background work to
// end). It renews a renewable token through auth/token/renew-self with
// vault/api's LifetimeWatcher, which renews at about two thirds of the TTL.
// When the token cannot be extended any further (its max TTL is reached,
// case B11, or it is not renewable), a client with an auth method logs in
// again before the token expires; a plain token is left to expire, and the
// next request that Vault refuses fails with a *TokenError saying so.
//
// report, if not nil, receives one event per renewal, login or failure;
// messages never contain a token or credential. A token that never expires
// (root) needs nothing and the background work ends at once.
func (c *Client) KeepAlive(ctx context.Context, report func(KeepAliveEvent)) (stop func()) {
	if report == nil {
		report = func(KeepAliveEvent) {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.keepAlive(ctx, report)
	}()
	return func() {
		cancel()
		<-done
	}
}

// KeepAliveEvent is one thing KeepAlive did or noticed.
type KeepAliveEvent struct {
	// Kind is KeepAliveRenewed, KeepAliveLoggedIn, KeepAliveExpiring or
	// KeepAliveFailed.
	Kind string
	// Message says it for humans; it never holds a token or credential.
	Message string
}

// Kinds of KeepAliveEvent.
const (
	// KeepAliveRenewed: renew-self extended the token.
	KeepAliveRenewed = "renewed"
	// KeepAliveLoggedIn: the token could not be extended further, and the
	// client logged in again through its auth method.
	KeepAliveLoggedIn = "logged-in"
	// KeepAliveExpiring: a plain token can no longer be extended and will
	// expire; requests after that fail with *TokenError.
	KeepAliveExpiring = "expiring"
	// KeepAliveFailed: the token could not be looked up or renewed, or
	// logging in again failed; KeepAlive has stopped.
	KeepAliveFailed = "failed"
)

func (c *Client) keepAlive(ctx context.Context, report func(KeepAliveEvent)) {
	for ctx.Err() == nil {
		info, err := c.LookupSelf(ctx)
		if err != nil {
			if ctx.Err() == nil {
				msg := fmt.Sprintf("cannot look up the Vault token to keep it renewed (is \"read\" on auth/token/lookup-self allowed?): %v", err)
				if errors.Is(err, ErrTokenInvalid) {
					// Not a policy question: the token itself is refused,
					// and the command's own error says how to log in.
					msg = "the Vault token is not kept renewed: Vault does not accept it (see the error below)"
				}
				report(KeepAliveEvent{KeepAliveFailed, msg})
			}
			return
		}
		if info.TTL <= 0 {
			return
		}
		w, err := c.api.NewLifetimeWatcher(&api.LifetimeWatcherInput{
			Secret: &api.Secret{Auth: &api.SecretAuth{
				ClientToken: c.api.Token(), Renewable: info.Renewable, LeaseDuration: int(info.TTL / time.Second),
			}},
			RenewBehavior: api.RenewBehaviorIgnoreErrors,
		})
		if err != nil {
			report(KeepAliveEvent{KeepAliveFailed, fmt.Sprintf("cannot renew the Vault token: %v", err)})
			return
		}
		go w.Start()
		if !c.watch(ctx, w, info, report) {
			return
		}
	}
}

// watch follows one LifetimeWatcher. It reports true when the client
// logged in again and a new watcher is needed.
func (c *Client) watch(ctx context.Context, w *api.LifetimeWatcher, info TokenInfo, report func(KeepAliveEvent)) bool {
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case out := <-w.RenewCh():
			if out == nil || out.Secret == nil || out.Secret.Auth == nil {
				continue
			}
			ttl := time.Duration(out.Secret.Auth.LeaseDuration) * time.Second
			c.state.mu.Lock()
			c.state.renewedUntil = time.Now().Add(ttl)
			if len(out.Secret.Warnings) > 0 {
				c.state.maxed = true
			}
			maxed := c.state.maxed
			c.state.mu.Unlock()
			msg := fmt.Sprintf("renewed the Vault token from %s: valid for %s", info.Source, ttl)
			if maxed {
				msg += " (capped: its max TTL is reached)"
			}
			report(KeepAliveEvent{KeepAliveRenewed, msg})
			// Learn the new expiry in Vault's clock, so a later refusal
			// can say whether the token expired or was revoked.
			_, _ = c.LookupSelf(ctx)
		case err := <-w.DoneCh():
			if ctx.Err() != nil {
				return false
			}
			if c.canLogin() {
				if lerr := c.Login(ctx); lerr != nil {
					report(KeepAliveEvent{KeepAliveFailed, fmt.Sprintf("the Vault token from %s can no longer be renewed and logging in again failed: %v", info.Source, lerr)})
					return false
				}
				report(KeepAliveEvent{KeepAliveLoggedIn, fmt.Sprintf("the Vault token could no longer be renewed: logged in again with %s", c.auth.describe())})
				return true
			}
			c.state.mu.Lock()
			maxed := c.state.maxed
			c.state.mu.Unlock()
			why := "Vault did not renew it: is \"update\" on auth/token/renew-self allowed?"
			switch {
			case !info.Renewable:
				why = "it is not renewable"
			case maxed:
				why = "its max TTL is reached"
			}
			if err != nil {
				why = "renewing failed: " + Redact(err.Error(), c.redactions()...)
			}
			report(KeepAliveEvent{KeepAliveExpiring, fmt.Sprintf("the Vault token from %s can no longer be extended (%s) and expires within %s; steps that read Vault after that fail: %s, then run maasctl again", info.Source, why, c.remaining(info).Round(time.Second), c.ReloginHint())})
			return false
		}
	}
}

// remaining estimates the token's time left from the last lookup.
func (c *Client) remaining(info TokenInfo) time.Duration {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	if c.state.renewedUntil.IsZero() {
		return info.TTL
	}
	return time.Until(c.state.renewedUntil)
}

// Logins is how many times the client has logged in through its auth
// method.
func (c *Client) Logins() int {
	c.state.mu.Lock()
	defer c.state.mu.Unlock()
	return c.state.logins
}
