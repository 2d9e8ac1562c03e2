// Package vault is maasctl's only door to HashiCorp Vault: it builds a client
// the way the vault CLI does (environment, TLS, token), logs in with the
// Kubernetes or AppRole auth method when asked, keeps the token alive
// (renewal, or a new login at its max TTL), tells an expired or revoked
// token from a policy that lacks a rule, finds out whether a logical path
// lives on a KV v1 or KV v2 mount, stores generated secrets exactly once
// with check-and-set (always sent, so cas_required mounts work; a lost race
// is reported and the winner's value used), tells "never written" from a
// deleted or destroyed latest KV v2 version, refuses KV v1 (no write
// protection) unless the caller allows it, treats a 404 that carries only
// warnings as the error it is, and renders least-privilege policies.
//
// Everything goes through github.com/hashicorp/vault/api and its auth
// helper modules (api/auth/approle, api/auth/kubernetes). Tokens,
// credentials and secret values never appear in the errors this package
// returns.
//
// API pages this package follows:
//   - token lookup-self, renew-self: https://developer.hashicorp.com/vault/api-docs/auth/token
//   - AppRole login: https://developer.hashicorp.com/vault/api-docs/auth/approle#login-with-approle
//   - Kubernetes login: https://developer.hashicorp.com/vault/api-docs/auth/kubernetes#login
//   - policies: https://developer.hashicorp.com/vault/docs/concepts/policies
//   - KV v2: https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2
//   - KV v1: https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1
//   - mount lookup: https://developer.hashicorp.com/vault/api-docs/system/internal-ui-mounts
//   - health: https://developer.hashicorp.com/vault/api-docs/system/health
//   - status codes: https://developer.hashicorp.com/vault/api-docs#http-status-codes
//   - client environment: https://developer.hashicorp.com/vault/docs/commands#configure-environment-variables
package vault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/vault/api"
)

// Token sources reported by (*Client).TokenSource.
const (
	TokenFromOptions = "options"
	TokenFromEnv     = "VAULT_TOKEN"
	TokenFromFile    = "token file"
	// TokenFromKubernetes and TokenFromAppRole prefix the source of a token
	// obtained by logging in, for example "Kubernetes login at auth/kubernetes".
	TokenFromKubernetes = "Kubernetes login"
	TokenFromAppRole    = "AppRole login"
)

// Options configures NewClient. Empty fields fall back to the environment the
// same way the vault CLI does.
type Options struct {
	// Address is Vault's URL, for example "https://vault.example.com:8200".
	// Empty means VAULT_ADDR (or VAULT_AGENT_ADDR).
	Address string
	// Token is the Vault token. Empty means VAULT_TOKEN, then TokenFile.
	Token string
	// TokenFile is where `vault login` stores the token. Empty means
	// ~/.vault-token (the vault CLI's built-in token helper; an external
	// token_helper configured in ~/.vault is not consulted).
	TokenFile string
	// Namespace is the Vault Enterprise namespace sent as X-Vault-Namespace.
	// Empty means VAULT_NAMESPACE (none when that is unset too).
	Namespace string
	// Auth selects the auth method; the zero value is AuthToken, which uses
	// Token, VAULT_TOKEN or TokenFile. With another method those are
	// ignored and the client logs in on first use (or through Login).
	Auth AuthOptions
}

// Client talks to one Vault server with one token at a time. It is safe for
// concurrent use, like the *api.Client it wraps.
type Client struct {
	api         *api.Client
	tokenSource string
	tokenFile   string
	auth        AuthOptions
	state       authState
}

// NewClient builds a Client. TLS settings (VAULT_CACERT, VAULT_CAPATH,
// VAULT_CLIENT_CERT/KEY, VAULT_SKIP_VERIFY, VAULT_TLS_SERVER_NAME), retries
// (VAULT_MAX_RETRIES) and timeouts (VAULT_CLIENT_TIMEOUT) come from the
// environment through api.DefaultConfig, exactly as for the vault CLI.
//
// It makes no request. Errors: ErrNoAddress when neither opts.Address nor
// VAULT_ADDR/VAULT_AGENT_ADDR is set, ErrNoToken when no token is found, or a
// configuration error (bad TLS files, unparsable address). The token never
// appears in an error.
func NewClient(opts Options) (*Client, error) {
	addr := strings.TrimSpace(opts.Address)
	if addr == "" && os.Getenv(api.EnvVaultAddress) == "" && os.Getenv(api.EnvVaultAgentAddr) == "" {
		return nil, ErrNoAddress
	}

	cfg := api.DefaultConfig()
	if cfg.Error != nil {
		return nil, fmt.Errorf("read vault client environment: %w", cfg.Error)
	}
	if addr != "" {
		cfg.Address = addr
		// An explicit address beats VAULT_AGENT_ADDR, which api.NewClient
		// would otherwise prefer.
		cfg.AgentAddress = ""
	}

	if err := opts.Auth.check(); err != nil {
		return nil, err
	}
	var token, source, file string
	var err error
	switch opts.Auth.method() {
	case AuthToken:
		token, source, file, err = findToken(opts)
		if err != nil {
			return nil, err
		}
	case AuthKubernetes:
		source = TokenFromKubernetes + " at auth/" + opts.Auth.mount()
	case AuthAppRole:
		source = TokenFromAppRole + " at auth/" + opts.Auth.mount()
	}

	c, err := api.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("create vault client for %s: %w", cfg.Address, err)
	}
	// api.NewClient takes VAULT_TOKEN from the environment; a login method
	// must not send it.
	c.SetToken(token)
	if ns := strings.TrimSpace(opts.Namespace); ns != "" {
		c.SetNamespace(ns)
	}
	return &Client{api: c, tokenSource: source, tokenFile: file, auth: opts.Auth}, nil
}

// findToken applies the vault CLI's order: explicit token, VAULT_TOKEN, then
// the token helper file.
func findToken(opts Options) (token, source, file string, err error) {
	if t := strings.TrimSpace(opts.Token); t != "" {
		return t, TokenFromOptions, "", nil
	}
	if t := strings.TrimSpace(os.Getenv(api.EnvVaultToken)); t != "" {
		return t, TokenFromEnv, "", nil
	}
	file = opts.TokenFile
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", "", fmt.Errorf("%w (and no home directory for ~/.vault-token: %v)", ErrNoToken, err)
		}
		file = filepath.Join(home, ".vault-token")
	}
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "", "", "", ErrNoToken
	case err != nil:
		// The *PathError names the file and the cause, never the content.
		return "", "", "", fmt.Errorf("read vault token file: %w", err)
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", "", "", fmt.Errorf("%w (%s is empty)", ErrNoToken, file)
	}
	return t, TokenFromFile, file, nil
}

// Address is the Vault URL the client sends requests to.
func (c *Client) Address() string { return c.api.Address() }

// TokenSource says where the token came from: TokenFromOptions,
// TokenFromEnv, TokenFromFile, or TokenFromKubernetes / TokenFromAppRole
// followed by " at auth/<mount>". It never returns the token.
func (c *Client) TokenSource() string { return c.tokenSource }

// Method is the auth method: AuthToken, AuthKubernetes or AuthAppRole.
func (c *Client) Method() string { return c.auth.method() }

// ReloginHint says how to get a fresh token for this client's method, for
// messages about an expired token.
func (c *Client) ReloginHint() string {
	switch c.auth.method() {
	case AuthKubernetes:
		return "check that the service account token is current and that the Vault role " + c.auth.Role + " still binds it"
	case AuthAppRole:
		return "issue a new secret ID (`vault write -f auth/" + c.auth.mount() + "/role/<role>/secret-id`) and set " + EnvSecretID + " or the secret ID file"
	}
	switch c.tokenSource {
	case TokenFromEnv:
		return "log in again (`vault login`) and export the new token as VAULT_TOKEN"
	case TokenFromFile:
		return "log in again with `vault login`, which writes " + c.tokenFile
	}
	return "log in again (`vault login`) and pass the new token"
}

// API returns the underlying vault/api client for calls this package does not
// wrap. Errors from it are not redacted.
func (c *Client) API() *api.Client { return c.api }

// Ping checks that Vault answers and is initialized and unsealed, through
// GET /v1/sys/health (https://developer.hashicorp.com/vault/api-docs/system/health).
// A standby node counts as healthy: it forwards requests to the active node.
// Errors: *UnreachableError (errors.Is ErrUnreachable) or a description of the
// unhealthy state.
func (c *Client) Ping(ctx context.Context) error {
	h, err := c.api.Sys().HealthWithContext(ctx)
	if err != nil {
		return c.wrap(err, "check vault health at "+c.Address())
	}
	switch {
	case !h.Initialized:
		return fmt.Errorf("vault at %s is not initialized", c.Address())
	case h.Sealed:
		return fmt.Errorf("vault at %s is sealed", c.Address())
	}
	return nil
}
