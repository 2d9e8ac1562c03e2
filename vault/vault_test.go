package vault

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/vault/api"

	"github.com/maasctl/maasctl/e2e/vaultserver"
)

// ---- unit tests ----

func TestGeneratePassword(t *testing.T) {
	alphabet := regexp.MustCompile(`^[A-Za-z0-9]+$`)
	tests := []struct {
		name    string
		length  int
		wantErr bool
	}{
		{name: "minimum", length: 32},
		{name: "typical", length: 48},
		{name: "maximum", length: MaxPasswordLength},
		{name: "one short", length: 31, wantErr: true},
		{name: "zero", length: 0, wantErr: true},
		{name: "negative", length: -1, wantErr: true},
		{name: "too long", length: MaxPasswordLength + 1, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := GeneratePassword(tt.length)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("GeneratePassword(%d) = %q, want an error", tt.length, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("GeneratePassword(%d): %v", tt.length, err)
			}
			if len(got) != tt.length {
				t.Errorf("length %d, want %d", len(got), tt.length)
			}
			if !alphabet.MatchString(got) {
				t.Errorf("password has characters outside [A-Za-z0-9]")
			}
		})
	}
}

func TestGeneratePasswordDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		p, err := GeneratePassword(MinPasswordLength)
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("password repeated after %d draws", i)
		}
		seen[p] = true
	}
}

// cycleReader yields 0, 1, ..., 255, 0, 1, ... so every byte value is
// equally frequent.
type cycleReader struct{ next byte }

func (r *cycleReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = r.next
		r.next++
	}
	return len(p), nil
}

// TestGeneratePasswordNoModuloBias feeds exactly four cycles of all 256 byte
// values: 248 of each cycle are accepted and map 4:1 onto the 62 letters, so
// an unbiased generator yields every letter exactly 16 times. Plain b%62
// would give the first 8 letters 20.
func TestGeneratePasswordNoModuloBias(t *testing.T) {
	const perLetter = 16
	n := len(PasswordAlphabet) * perLetter
	got, err := generatePassword(&cycleReader{}, n)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[rune]int{}
	for _, r := range got {
		counts[r]++
	}
	for _, r := range PasswordAlphabet {
		if counts[r] != perLetter {
			t.Errorf("letter %q drawn %d times, want %d", r, counts[r], perLetter)
		}
	}
}

func TestGeneratePasswordRandomFailure(t *testing.T) {
	boom := errors.New("entropy exhausted")
	if _, err := generatePassword(iotest.ErrReader(boom), 32); !errors.Is(err, boom) {
		t.Fatalf("error %v, want %v", err, boom)
	}
}

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		secrets []string
		want    string
	}{
		{name: "none", in: "token abc", want: "token abc"},
		{name: "one", in: "token hvs.abc used", secrets: []string{"hvs.abc"}, want: "token [REDACTED] used"},
		{name: "repeated", in: "p p p", secrets: []string{"p"}, want: "[REDACTED] [REDACTED] [REDACTED]"},
		{name: "empty secret ignored", in: "abc", secrets: []string{""}, want: "abc"},
		{name: "longest first", in: "xx-abcdef-xx", secrets: []string{"abc", "abcdef"}, want: "xx-[REDACTED]-xx"},
		{name: "several", in: "a=1 b=2", secrets: []string{"1", "2"}, want: "a=[REDACTED] b=[REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.in, tt.secrets...); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestLocate(t *testing.T) {
	tests := []struct {
		name      string
		path      string
		mount     string // as Vault returns it, with the trailing slash
		version   int
		want      Location
		wantData  string
		wantError string
	}{
		{name: "v2 logical", path: "kv/cloudnativepg/maas-postgres", mount: "kv/", version: 2,
			want: Location{Mount: "kv", Path: "cloudnativepg/maas-postgres", KVVersion: 2}, wantData: "kv/data/cloudnativepg/maas-postgres"},
		{name: "v2 with data/", path: "kv/data/cloudnativepg/maas-postgres", mount: "kv/", version: 2,
			want: Location{Mount: "kv", Path: "cloudnativepg/maas-postgres", KVVersion: 2}, wantData: "kv/data/cloudnativepg/maas-postgres"},
		{name: "v2 slashes around", path: "/kv/cloudnativepg/maas-postgres/", mount: "kv/", version: 2,
			want: Location{Mount: "kv", Path: "cloudnativepg/maas-postgres", KVVersion: 2}, wantData: "kv/data/cloudnativepg/maas-postgres"},
		{name: "v1 keeps data/", path: "kv/data/x", mount: "kv/", version: 1,
			want: Location{Mount: "kv", Path: "data/x", KVVersion: 1}, wantData: "kv/data/x"},
		{name: "v1 logical", path: "legacy/cloudnativepg/maas-postgres", mount: "legacy/", version: 1,
			want: Location{Mount: "legacy", Path: "cloudnativepg/maas-postgres", KVVersion: 1}, wantData: "legacy/cloudnativepg/maas-postgres"},
		{name: "nested mount", path: "team/kv/app/db", mount: "team/kv/", version: 2,
			want: Location{Mount: "team/kv", Path: "app/db", KVVersion: 2}, wantData: "team/kv/data/app/db"},
		{name: "namespace-prefixed mount", path: "kv/app/db", mount: "ns1/kv/", version: 2,
			want: Location{Mount: "kv", Path: "app/db", KVVersion: 2}, wantData: "kv/data/app/db"},
		{name: "mount only", path: "kv", mount: "kv/", version: 2, wantError: "names the mount"},
		{name: "v2 data only", path: "kv/data", mount: "kv/", version: 2, wantError: "names the mount"},
		{name: "not below mount", path: "other/x", mount: "kv/", version: 2, wantError: "not below"},
		{name: "empty mount", path: "kv/x", mount: "", version: 2, wantError: "no mount"},
		{name: "dot dot", path: "kv/a/../b", mount: "kv/", version: 2, wantError: `".."`},
		{name: "double slash", path: "kv//b", mount: "kv/", version: 2, wantError: "empty"},
		{name: "empty", path: "/", mount: "kv/", version: 2, wantError: "empty"},
		{name: "newline", path: "kv/a\n", mount: "kv/", version: 2, wantError: "control character"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clean, err := cleanPath(tt.path)
			var got Location
			if err == nil {
				got, err = locate(clean, tt.mount, tt.version)
			}
			if tt.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantError)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("location (-want +got):\n%s", diff)
			}
			if got.DataPath() != tt.wantData {
				t.Errorf("DataPath() = %q, want %q", got.DataPath(), tt.wantData)
			}
		})
	}
}

func TestPermissionErrorStanza(t *testing.T) {
	e := &PermissionError{Op: "create", LogicalPath: "kv/cloudnativepg/maas-postgres", APIPath: "kv/data/cloudnativepg/maas-postgres",
		PolicyPath: "kv/data/cloudnativepg/maas-postgres", Capability: "create", Needed: []string{"create", "read"}}
	want := `path "kv/data/cloudnativepg/maas-postgres" { capabilities = ["create", "read"] }`
	if got := e.PolicyStanza(); got != want {
		t.Errorf("PolicyStanza() = %s, want %s", got, want)
	}
	if !strings.Contains(e.Error(), want) || !errors.Is(e, ErrPermissionDenied) {
		t.Errorf("Error() = %q lacks the stanza or is not ErrPermissionDenied", e.Error())
	}
}

// clearVaultEnv unsets the variables NewClient reads, so the developer's own
// Vault settings cannot leak into a test.
func clearVaultEnv(t *testing.T) {
	t.Helper()
	for _, k := range []string{api.EnvVaultAddress, api.EnvVaultAgentAddr, api.EnvVaultToken, api.EnvVaultNamespace,
		api.EnvVaultCACert, api.EnvVaultCAPath, api.EnvVaultSkipVerify, api.EnvVaultClientCert, api.EnvVaultClientKey} {
		t.Setenv(k, "")
	}
	t.Setenv("HOME", t.TempDir())
}

func TestNewClient(t *testing.T) {
	const envToken = "hvs.env-token-7f3a"
	const fileToken = "hvs.file-token-91bc"
	const optToken = "hvs.opt-token-c0de"
	tests := []struct {
		name       string
		env        map[string]string
		tokenFile  string // content of $HOME/.vault-token; "-" means no file
		opts       Options
		wantErr    error
		wantErrMsg string
		wantSource string
		wantAddr   string
		wantNS     string
	}{
		{name: "no address", tokenFile: "-", env: map[string]string{"VAULT_TOKEN": envToken},
			wantErr: ErrNoAddress, wantErrMsg: "set VAULT_ADDR"},
		{name: "address and token from env", tokenFile: "-",
			env:        map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": envToken},
			wantSource: TokenFromEnv, wantAddr: "http://127.0.0.1:8200"},
		{name: "token file", tokenFile: fileToken + "\n", env: map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200"},
			wantSource: TokenFromFile, wantAddr: "http://127.0.0.1:8200"},
		{name: "env beats file", tokenFile: fileToken, env: map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": envToken},
			wantSource: TokenFromEnv, wantAddr: "http://127.0.0.1:8200"},
		{name: "options beat env", tokenFile: fileToken,
			env:        map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": envToken},
			opts:       Options{Address: "https://vault.example.com:8200", Token: optToken},
			wantSource: TokenFromOptions, wantAddr: "https://vault.example.com:8200"},
		{name: "no token", tokenFile: "-", env: map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200"},
			wantErr: ErrNoToken, wantErrMsg: "set VAULT_TOKEN"},
		{name: "empty token file", tokenFile: "\n", env: map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200"},
			wantErr: ErrNoToken, wantErrMsg: "is empty"},
		{name: "namespace from env", tokenFile: "-",
			env:        map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": envToken, "VAULT_NAMESPACE": "team-a"},
			wantSource: TokenFromEnv, wantAddr: "http://127.0.0.1:8200", wantNS: "team-a"},
		{name: "namespace from options", tokenFile: "-",
			env:        map[string]string{"VAULT_ADDR": "http://127.0.0.1:8200", "VAULT_TOKEN": envToken, "VAULT_NAMESPACE": "team-a"},
			opts:       Options{Namespace: "team-b"},
			wantSource: TokenFromEnv, wantAddr: "http://127.0.0.1:8200", wantNS: "team-b"},
		{name: "missing CA file", tokenFile: "-",
			env:        map[string]string{"VAULT_ADDR": "https://127.0.0.1:8200", "VAULT_TOKEN": envToken, "VAULT_CACERT": "/nonexistent/ca.pem"},
			wantErrMsg: "read vault client environment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clearVaultEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if tt.tokenFile != "-" {
				if err := os.WriteFile(filepath.Join(os.Getenv("HOME"), ".vault-token"), []byte(tt.tokenFile), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			c, err := NewClient(tt.opts)
			if tt.wantErrMsg != "" {
				if err == nil {
					t.Fatalf("NewClient succeeded, want an error containing %q", tt.wantErrMsg)
				}
				if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
					t.Errorf("error %v, want %v", err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErrMsg) {
					t.Errorf("error %q, want it to contain %q", err, tt.wantErrMsg)
				}
				assertNoSecret(t, err.Error(), envToken, fileToken, optToken)
				return
			}
			if err != nil {
				t.Fatalf("NewClient: %v", err)
			}
			if c.TokenSource() != tt.wantSource {
				t.Errorf("TokenSource() = %q, want %q", c.TokenSource(), tt.wantSource)
			}
			if c.Address() != tt.wantAddr {
				t.Errorf("Address() = %q, want %q", c.Address(), tt.wantAddr)
			}
			if got := c.API().Namespace(); got != tt.wantNS {
				t.Errorf("namespace %q, want %q", got, tt.wantNS)
			}
			want := map[string]string{TokenFromEnv: envToken, TokenFromFile: fileToken, TokenFromOptions: optToken}[tt.wantSource]
			if c.API().Token() != want {
				t.Errorf("the client holds a different token than the one from %s", tt.wantSource)
			}
		})
	}
}

func assertNoSecret(t *testing.T, msg string, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(msg, s) {
			t.Errorf("message contains a secret (%d chars): %s", len(s), Redact(msg, secrets...))
		}
	}
}

// ---- integration tests: the same tests against vaultserver or a real Vault ----

// backend is the Vault the integration tests run against: the in-memory
// vaultserver by default, or a real Vault when VAULT_TEST_ADDR and
// VAULT_TEST_TOKEN are set. On a real Vault the token must be allowed to
// enable and disable mounts, write policies and create tokens (a dev
// server's root token is); VAULT_TEST_KV2_MOUNT names its KV v2 mount
// (default "secret", as on a dev server). Each test writes below its own
// prefix maasctl-test/<random>/ and creates a KV v1 mount, policies and
// tokens that it removes again when it ends. VAULT_CACERT and the other TLS
// variables apply as usual.
type backend struct {
	name          string
	addr          string
	rootToken     string
	readOnlyToken string
	kv2Mount      string
	kv1Mount      string
	prefix        string
	root          *api.Client
	srv           *vaultserver.Server // nil on a real Vault
}

func newBackend(t *testing.T) *backend {
	t.Helper()
	ctx := context.Background()
	runID := strings.ToLower(mustPassword(t)[:10])

	if addr, token := os.Getenv("VAULT_TEST_ADDR"), os.Getenv("VAULT_TEST_TOKEN"); addr != "" && token != "" {
		// Keep VAULT_CACERT and friends: a real Vault may need them.
		for _, k := range []string{api.EnvVaultAddress, api.EnvVaultAgentAddr, api.EnvVaultToken} {
			t.Setenv(k, "")
		}
		t.Setenv("HOME", t.TempDir())
		return newRealBackend(t, ctx, addr, token, runID)
	}
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")

	b := &backend{
		name:          "vaultserver",
		rootToken:     "hvs.root-" + mustPassword(t),
		readOnlyToken: "hvs.ro-" + mustPassword(t),
		kv2Mount:      "kv",
		kv1Mount:      "legacy",
		prefix:        "maasctl-test/" + runID,
	}
	b.srv = vaultserver.New(vaultserver.Options{
		RootToken:     b.rootToken,
		ReadOnlyToken: b.readOnlyToken,
		Mounts:        []vaultserver.Mount{{Path: b.kv2Mount, Version: 2}, {Path: b.kv1Mount, Version: 1}},
	})
	addr, err := b.srv.Start(ctx)
	if err != nil {
		t.Fatalf("start vaultserver: %v", err)
	}
	t.Cleanup(func() { _ = b.srv.Close() })
	b.addr = addr
	b.root = b.apiClient(t, b.rootToken)
	return b
}

func newRealBackend(t *testing.T, ctx context.Context, addr, token, runID string) *backend {
	b := &backend{name: "real vault", addr: addr, rootToken: token, prefix: "maasctl-test/" + runID}
	b.kv2Mount = os.Getenv("VAULT_TEST_KV2_MOUNT")
	if b.kv2Mount == "" {
		b.kv2Mount = "secret"
	}
	b.root = b.apiClient(t, token)

	b.kv1Mount = "maasctl-test-kv1-" + runID
	if err := b.root.Sys().MountWithContext(ctx, b.kv1Mount, &api.MountInput{Type: "kv", Options: map[string]string{"version": "1"}}); err != nil {
		t.Fatalf("enable KV v1 mount %s: %v", b.kv1Mount, err)
	}
	t.Cleanup(func() { _ = b.root.Sys().UnmountWithContext(context.Background(), b.kv1Mount) })

	b.readOnlyToken = b.tokenWith(t, []vaultserver.Rule{
		{Path: b.kv2Mount + "/data/" + b.prefix + "/*", Capabilities: []string{"read"}},
		{Path: b.kv2Mount + "/metadata/" + b.prefix + "/*", Capabilities: []string{"read"}},
	})
	t.Cleanup(func() {
		// Remove every secret this test wrote below the prefix.
		for _, p := range b.listV2(t, b.prefix) {
			_ = b.root.KVv2(b.kv2Mount).DeleteMetadata(context.Background(), p)
		}
	})
	return b
}

// tokenWith returns a token whose only policy is rules: registered with
// vaultserver, or written as a policy and issued by the real Vault (and
// removed again when the test ends).
func (b *backend) tokenWith(t *testing.T, rules []vaultserver.Rule) string {
	t.Helper()
	if b.srv != nil {
		tok := "hvs.custom-" + mustPassword(t)
		b.srv.AddToken(tok, rules)
		return tok
	}
	ctx := context.Background()
	name := "maasctl-test-" + strings.ToLower(mustPassword(t)[:10])
	var hcl strings.Builder
	for _, r := range rules {
		q := make([]string, len(r.Capabilities))
		for i, c := range r.Capabilities {
			q[i] = fmt.Sprintf("%q", c)
		}
		fmt.Fprintf(&hcl, "path %q { capabilities = [%s] }\n", r.Path, strings.Join(q, ", "))
	}
	if err := b.root.Sys().PutPolicyWithContext(ctx, name, hcl.String()); err != nil {
		t.Fatalf("write policy %s: %v", name, err)
	}
	t.Cleanup(func() { _ = b.root.Sys().DeletePolicyWithContext(context.Background(), name) })
	sec, err := b.root.Auth().Token().CreateWithContext(ctx, &api.TokenCreateRequest{Policies: []string{name}, TTL: "15m", DisplayName: "maasctl-test"})
	if err != nil || sec == nil || sec.Auth == nil {
		t.Fatalf("create token with policy %s: %v", name, err)
	}
	tok := sec.Auth.ClientToken
	t.Cleanup(func() { _ = b.root.Auth().Token().RevokeTreeWithContext(context.Background(), tok) })
	return tok
}

// listV2 lists KV v2 keys below dir recursively (real Vault cleanup only).
func (b *backend) listV2(t *testing.T, dir string) []string {
	s, err := b.root.Logical().ListWithContext(context.Background(), b.kv2Mount+"/metadata/"+dir)
	if err != nil || s == nil {
		return nil
	}
	keys, _ := s.Data["keys"].([]any)
	var out []string
	for _, k := range keys {
		ks, _ := k.(string)
		if strings.HasSuffix(ks, "/") {
			out = append(out, b.listV2(t, dir+"/"+strings.TrimSuffix(ks, "/"))...)
		} else {
			out = append(out, dir+"/"+ks)
		}
	}
	return out
}

func mustPassword(t *testing.T) string {
	t.Helper()
	p, err := GeneratePassword(MinPasswordLength)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (b *backend) apiClient(t *testing.T, token string) *api.Client {
	t.Helper()
	cfg := api.DefaultConfig()
	cfg.Address = b.addr
	cfg.MaxRetries = 0
	c, err := api.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.SetToken(token)
	return c
}

// client is the Client under test, built the way maasctl builds it.
func (b *backend) client(t *testing.T, token string) *Client {
	t.Helper()
	c, err := NewClient(Options{Address: b.addr, Token: token})
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

// secretPath is a path below the run's prefix unique to the test.
func (b *backend) secretPath(t *testing.T) string {
	name := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return b.prefix + "/" + name
}

// versions is the current_version of a KV v2 secret as the metadata API
// reports it (0 when absent), cross-checked with vaultserver's accessor.
func (b *backend) versions(t *testing.T, path string) int {
	t.Helper()
	md, err := b.root.KVv2(b.kv2Mount).GetMetadata(context.Background(), path)
	n := 0
	switch {
	case errors.Is(err, api.ErrSecretNotFound):
	case err != nil:
		t.Fatalf("read metadata of %s/%s: %v", b.kv2Mount, path, err)
	default:
		n = md.CurrentVersion
		if len(md.Versions) != n {
			t.Errorf("metadata lists %d versions, current_version is %d", len(md.Versions), n)
		}
	}
	if b.srv != nil {
		if s := b.srv.Versions(b.kv2Mount, path); s != n {
			t.Errorf("vaultserver holds %d versions, metadata API says %d", s, n)
		}
	}
	return n
}

// deleteLatest soft-deletes the latest version, as `vault kv delete` does.
func (b *backend) deleteLatest(t *testing.T, path string) {
	t.Helper()
	if b.srv != nil {
		if !b.srv.DeleteLatest(b.kv2Mount, path) {
			t.Fatalf("nothing to delete at %s/%s", b.kv2Mount, path)
		}
		return
	}
	if err := b.root.KVv2(b.kv2Mount).Delete(context.Background(), path); err != nil {
		t.Fatalf("delete %s/%s: %v", b.kv2Mount, path, err)
	}
}

// passwordGenerator returns a generate func that counts its calls and
// remembers what it produced.
type passwordGenerator struct {
	calls atomic.Int32
	mu    sync.Mutex
	made  []string
}

func (g *passwordGenerator) generate() (map[string]string, error) {
	g.calls.Add(1)
	p, err := GeneratePassword(MinPasswordLength)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.made = append(g.made, p)
	g.mu.Unlock()
	return map[string]string{"username": "maas", "password": p}, nil
}

func (g *passwordGenerator) secrets() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.made...)
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEnsureSecretCreatesOnce(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	path := b.secretPath(t)
	logical := b.kv2Mount + "/" + path

	loc, err := c.Resolve(ctx, logical)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if want := (Location{Mount: b.kv2Mount, Path: path, KVVersion: 2}); loc != want {
		t.Fatalf("Resolve = %+v, want %+v", loc, want)
	}

	var g passwordGenerator
	first, created, err := c.EnsureSecret(ctx, logical, g.generate)
	if err != nil {
		t.Fatalf("first EnsureSecret: %v", err)
	}
	if !created {
		t.Error("first EnsureSecret: created = false, want true")
	}
	if len(first["password"]) != MinPasswordLength || first["username"] != "maas" {
		t.Errorf("first EnsureSecret returned keys %v, want username=maas and a %d-char password", keys(first), MinPasswordLength)
	}
	if got := b.versions(t, path); got != 1 {
		t.Fatalf("after create: %d versions, want 1", got)
	}

	second, created, err := c.EnsureSecret(ctx, logical, g.generate)
	if err != nil {
		t.Fatalf("second EnsureSecret: %v", err)
	}
	if created {
		t.Error("second EnsureSecret: created = true, want false")
	}
	if !cmp.Equal(first, second) {
		t.Error("second EnsureSecret returned different data")
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("generate called %d times, want 1", n)
	}
	if got := b.versions(t, path); got != 1 {
		t.Errorf("after second call: %d versions, want 1", got)
	}

	read, found, err := c.ReadSecret(ctx, logical)
	if err != nil || !found || !cmp.Equal(first, read) {
		t.Errorf("ReadSecret: found=%v err=%v, same data=%v", found, err, cmp.Equal(first, read))
	}
}

// TestEnsureSecretRace makes 20 first runs race: every generate call waits
// until all 20 have read "absent", so all 20 do a check-and-set write and
// exactly one may win.
func TestEnsureSecretRace(t *testing.T) {
	const racers = 20
	b := newBackend(t)
	ctx := testContext(t)
	logical := b.kv2Mount + "/" + b.secretPath(t)

	var (
		g       passwordGenerator
		arrived atomic.Int32
		allIn   = make(chan struct{})
	)
	generate := func() (map[string]string, error) {
		if arrived.Add(1) == racers {
			close(allIn)
		}
		select {
		case <-allIn:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return g.generate()
	}

	type result struct {
		data    map[string]string
		created bool
		err     error
	}
	results := make([]result, racers)
	clients := make([]*Client, racers)
	for i := range clients {
		clients[i] = b.client(t, b.rootToken) // separate clients: separate runs
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < racers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			d, c, err := clients[i].EnsureSecret(ctx, logical, generate)
			results[i] = result{d, c, err}
		}(i)
	}
	close(start)
	wg.Wait()

	createdCount := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("racer %d: %v", i, r.err)
		}
		if r.created {
			createdCount++
		}
		if !cmp.Equal(r.data, results[0].data) {
			t.Errorf("racer %d got different data from racer 0", i)
		}
	}
	if createdCount != 1 {
		t.Errorf("%d racers report created, want exactly 1", createdCount)
	}
	if n := g.calls.Load(); n != racers {
		t.Errorf("generate called %d times, want %d (every racer must have reached the write)", n, racers)
	}
	if got := b.versions(t, strings.TrimPrefix(logical, b.kv2Mount+"/")); got != 1 {
		t.Errorf("%d versions stored, want exactly 1", got)
	}
}

func TestEnsureSecretKVv1(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	path := b.secretPath(t)
	logical := b.kv1Mount + "/" + path

	loc, err := c.Resolve(ctx, logical)
	if err != nil {
		t.Fatalf("Resolve: %v", err)
	}
	if loc.KVVersion != 1 || loc.DataPath() != logical || loc.MetadataPath() != "" {
		t.Fatalf("Resolve = %+v (data path %q), want KV v1 at %q", loc, loc.DataPath(), logical)
	}

	// KV v1 has no check-and-set: only with the explicit allowance
	// (TestKVv1RefusedWithoutOptIn shows the refusal).
	var g passwordGenerator
	allow := WriteOptions{AllowKVv1: true}
	r1, err := c.EnsureSecretWith(ctx, logical, g.generate, allow)
	first, created := r1.Data, r1.Created
	if err != nil || !created {
		t.Fatalf("first EnsureSecret: created=%v err=%v", created, err)
	}
	r2, err := c.EnsureSecretWith(ctx, logical, g.generate, allow)
	second, created := r2.Data, r2.Created
	if err != nil || created {
		t.Fatalf("second EnsureSecret: created=%v err=%v", created, err)
	}
	for _, r := range []EnsureResult{r1, r2} {
		if len(r.Notes) != 1 || !strings.Contains(r.Notes[0], "no write protection") || r.LostRace {
			t.Errorf("notes %q lostRace=%v, want one note on the missing write protection", r.Notes, r.LostRace)
		}
	}
	if !cmp.Equal(first, second) {
		t.Error("second EnsureSecret returned different data")
	}
	if n := g.calls.Load(); n != 1 {
		t.Errorf("generate called %d times, want 1", n)
	}
	stored, err := b.root.KVv1(b.kv1Mount).Get(ctx, path)
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	if stored.Data["password"] != first["password"] {
		t.Error("Vault holds a different password than EnsureSecret returned")
	}
	if b.srv != nil && !cmp.Equal(b.srv.Data(b.kv1Mount, path), first) {
		t.Error("vaultserver holds different data")
	}
}

func TestEnsureSecretDataPrefix(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	path := b.secretPath(t)

	var g passwordGenerator
	withData, created, err := c.EnsureSecret(ctx, b.kv2Mount+"/data/"+path, g.generate)
	if err != nil || !created {
		t.Fatalf("EnsureSecret with data/: created=%v err=%v", created, err)
	}
	plain, created, err := c.EnsureSecret(ctx, b.kv2Mount+"/"+path, g.generate)
	if err != nil || created {
		t.Fatalf("EnsureSecret without data/: created=%v err=%v", created, err)
	}
	if !cmp.Equal(withData, plain) {
		t.Error("the two spellings of the path reached different secrets")
	}
	if got := b.versions(t, path); got != 1 {
		t.Errorf("%d versions at %s, want 1", got, path)
	}
	if got := b.versions(t, "data/"+path); got != 0 {
		t.Errorf("%d versions at data/%s, want 0 (data/ was not stripped)", got, path)
	}
}

func TestEnsureSecretReadOnlyToken(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	path := b.secretPath(t)
	logical := b.kv2Mount + "/" + path
	ro := b.client(t, b.readOnlyToken)

	var g passwordGenerator
	_, _, err := ro.EnsureSecret(ctx, logical, g.generate)
	if err == nil {
		t.Fatal("EnsureSecret with a read-only token succeeded on an absent secret")
	}
	t.Logf("error: %v", err)
	var pe *PermissionError
	if !errors.As(err, &pe) || !errors.Is(err, ErrPermissionDenied) {
		t.Fatalf("error %v (%T), want a *PermissionError", err, err)
	}
	dataPath := b.kv2Mount + "/data/" + path
	if pe.Capability != "create" || pe.PolicyPath != dataPath {
		t.Errorf("PermissionError names %q on %q, want \"create\" on %q", pe.Capability, pe.PolicyPath, dataPath)
	}
	for _, want := range []string{dataPath, `"create"`, logical} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	assertNoSecret(t, err.Error(), append(g.secrets(), b.readOnlyToken, b.rootToken)...)
	if got := b.versions(t, path); got != 0 {
		t.Errorf("%d versions written with a read-only token, want 0", got)
	}

	// Once the secret exists, reading is all EnsureSecret needs.
	want, _, err := b.client(t, b.rootToken).EnsureSecret(ctx, logical, g.generate)
	if err != nil {
		t.Fatal(err)
	}
	got, created, err := ro.EnsureSecret(ctx, logical, g.generate)
	if err != nil || created || !cmp.Equal(want, got) {
		t.Errorf("read-only EnsureSecret of an existing secret: created=%v err=%v same=%v", created, err, cmp.Equal(want, got))
	}
}

// TestEnsureSecretPolicyWithoutDataSegment is case B11: the policy names the
// logical path kv/<path>, so the mount lookup works but every KV v2 call is
// 403. The error must say which data/ path the policy has to name.
func TestEnsureSecretPolicyWithoutDataSegment(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	path := b.secretPath(t)
	logical := b.kv2Mount + "/" + path
	tok := b.tokenWith(t, []vaultserver.Rule{{Path: b.kv2Mount + "/" + b.prefix + "/*", Capabilities: []string{"create", "read", "update"}}})

	var g passwordGenerator
	_, _, err := b.client(t, tok).EnsureSecret(ctx, logical, g.generate)
	t.Logf("error: %v", err)
	var pe *PermissionError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T), want a *PermissionError", err, err)
	}
	dataPath := b.kv2Mount + "/data/" + path
	if pe.Op != "read" || pe.Capability != "read" || pe.PolicyPath != dataPath {
		t.Errorf("PermissionError %q %q on %q, want read \"read\" on %q", pe.Op, pe.Capability, pe.PolicyPath, dataPath)
	}
	if want := "KV v2 policies must name " + dataPath; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q lacks the hint %q", err, want)
	}
	assertNoSecret(t, err.Error(), tok)
	if n := g.calls.Load(); n != 0 {
		t.Errorf("generate called %d times, want 0", n)
	}
	if got := b.versions(t, path); got != 0 {
		t.Errorf("%d versions written, want 0", got)
	}
}

func TestEnsureSecretWrongToken(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	wrong := "hvs.wrong-" + mustPassword(t)
	logical := b.kv2Mount + "/" + b.secretPath(t)

	var g passwordGenerator
	_, _, err := b.client(t, wrong).EnsureSecret(ctx, logical, g.generate)
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrPermissionDenied) || !errors.Is(err, ErrTokenInvalid) {
		t.Fatalf("error %v, want ErrPermissionDenied and ErrTokenInvalid", err)
	}
	if !strings.Contains(err.Error(), logical) || !strings.Contains(err.Error(), "expired or was revoked") {
		t.Errorf("error %q should name %s and say the token expired or was revoked", err, logical)
	}
	assertNoSecret(t, err.Error(), wrong, b.rootToken)
	if n := g.calls.Load(); n != 0 {
		t.Errorf("generate called %d times, want 0", n)
	}
}

func TestEnsureSecretUnknownMount(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	logical := "no-such-mount-" + strings.ToLower(mustPassword(t)[:8]) + "/x"
	_, _, err := b.client(t, b.rootToken).EnsureSecret(ctx, logical, (&passwordGenerator{}).generate)
	t.Logf("error: %v", err)
	var pe *PermissionError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v, want a *PermissionError from the mount lookup", err)
	}
	if !strings.Contains(err.Error(), "sys/internal/ui/mounts/"+logical) {
		t.Errorf("error %q does not name the lookup path", err)
	}
}

func TestEnsureSecretDeletedLatest(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	c := b.client(t, b.rootToken)
	path := b.secretPath(t)
	logical := b.kv2Mount + "/" + path

	var g passwordGenerator
	if _, _, err := c.EnsureSecret(ctx, logical, g.generate); err != nil {
		t.Fatal(err)
	}
	b.deleteLatest(t, path)
	_, _, err := c.EnsureSecret(ctx, logical, g.generate)
	t.Logf("error: %v", err)
	if !errors.Is(err, ErrSecretDeleted) {
		t.Fatalf("error %v, want ErrSecretDeleted", err)
	}
	if !strings.Contains(err.Error(), "vault kv undelete") {
		t.Errorf("error %q does not say how to recover", err)
	}
	assertNoSecret(t, err.Error(), g.secrets()...)
	if n := g.calls.Load(); n != 1 {
		t.Errorf("generate called %d times, want 1 (no new password over a deleted one)", n)
	}
	if got := b.versions(t, path); got != 1 {
		t.Errorf("%d versions, want 1", got)
	}
}

func TestEnsureSecretGenerateFails(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	path := b.secretPath(t)
	boom := errors.New("no entropy")
	tests := []struct {
		name     string
		generate func() (map[string]string, error)
		wantIs   error
		wantMsg  string
	}{
		{name: "error", generate: func() (map[string]string, error) { return nil, boom }, wantIs: boom, wantMsg: "generate secret"},
		{name: "empty", generate: func() (map[string]string, error) { return map[string]string{}, nil }, wantMsg: "no keys"},
		{name: "empty key", generate: func() (map[string]string, error) { return map[string]string{"": "x"}, nil }, wantMsg: "empty key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := b.client(t, b.rootToken).EnsureSecret(ctx, b.kv2Mount+"/"+path, tt.generate)
			if err == nil || !strings.Contains(err.Error(), tt.wantMsg) || (tt.wantIs != nil && !errors.Is(err, tt.wantIs)) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantMsg)
			}
			if got := b.versions(t, path); got != 0 {
				t.Errorf("%d versions written, want 0", got)
			}
		})
	}
}

func TestNewClientFromEnvironment(t *testing.T) {
	b := newBackend(t)
	ctx := testContext(t)
	t.Setenv(api.EnvVaultAddress, b.addr)
	t.Setenv(api.EnvVaultToken, b.rootToken)
	c, err := NewClient(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if _, created, err := c.EnsureSecret(ctx, b.kv2Mount+"/"+b.secretPath(t), (&passwordGenerator{}).generate); err != nil || !created {
		t.Fatalf("EnsureSecret with VAULT_ADDR/VAULT_TOKEN: created=%v err=%v", created, err)
	}
}

func TestUnreachable(t *testing.T) {
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now: connection refused
	token := "hvs.unreachable-" + mustPassword(t)
	c, err := NewClient(Options{Address: addr, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	tests := []struct {
		name string
		call func() error
	}{
		{name: "EnsureSecret", call: func() error {
			_, _, err := c.EnsureSecret(ctx, "kv/cloudnativepg/maas-postgres", (&passwordGenerator{}).generate)
			return err
		}},
		{name: "Ping", call: func() error { return c.Ping(ctx) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			t.Logf("error: %v", err)
			if !errors.Is(err, ErrUnreachable) {
				t.Fatalf("error %v, want ErrUnreachable", err)
			}
			if want := "vault at " + addr + " unreachable"; !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not contain %q", err, want)
			}
			assertNoSecret(t, err.Error(), token)
		})
	}
}

// TestErrorsAreRedacted checks the error path that formats Vault's own
// answer: a server that echoes the request (token and body) into its error
// must not get them into maasctl's error.
func TestErrorsAreRedacted(t *testing.T) {
	clearVaultEnv(t)
	t.Setenv(api.EnvVaultMaxRetries, "0")
	token := "hvs.echo-" + mustPassword(t)
	srv := newEchoServer(t)
	c, err := NewClient(Options{Address: srv, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	var g passwordGenerator
	_, _, err = c.EnsureSecret(testContext(t), "kv/cloudnativepg/maas-postgres", g.generate)
	if err == nil {
		t.Fatal("EnsureSecret succeeded against a failing server")
	}
	t.Logf("error: %v", err)
	if !strings.Contains(err.Error(), Redacted) {
		t.Errorf("error %q shows no redaction; the echo server did not echo?", err)
	}
	assertNoSecret(t, err.Error(), append(g.secrets(), token)...)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// readAll is io.ReadAll with a cap, for the echo server.
func readAll(r io.Reader) []byte {
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(io.LimitReader(r, 1<<16))
	return buf.Bytes()
}

// newEchoServer answers the mount lookup and reads like Vault (KV v2, secret
// absent) and fails every write with a 500 whose error message echoes the
// request's token header and body.
func newEchoServer(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasPrefix(r.URL.Path, "/v1/sys/internal/ui/mounts/"):
			fmt.Fprint(w, `{"data":{"path":"kv/","type":"kv","options":{"version":"2"}}}`)
		case r.Method == http.MethodGet:
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"errors":[]}`)
		default:
			w.WriteHeader(http.StatusInternalServerError)
			msg, _ := json.Marshal(map[string][]string{"errors": {"token " + r.Header.Get("X-Vault-Token") + " body " + string(readAll(r.Body))}})
			_, _ = w.Write(msg)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}
