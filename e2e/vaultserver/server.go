// Package vaultserver is an in-memory stand-in for a HashiCorp Vault server
// that implements only the HTTP API maasctl uses, with Vault's documented
// paths, status codes and JSON bodies. It exists because no Vault server
// builds from the Go module proxy (see testenv/RECIPE.md §6); tests written
// against it are meant to pass unchanged against a real Vault.
//
// Implemented (each handler cites its API page):
//   - GET  /v1/sys/health
//   - GET  /v1/sys/mounts, GET/POST/DELETE /v1/sys/mounts/<path> (KV only)
//   - GET  /v1/sys/internal/ui/mounts/<path>
//   - GET  /v1/sys/auth, POST/DELETE /v1/sys/auth/<path> (approle, kubernetes)
//   - GET/PUT/DELETE /v1/sys/policies/acl/<name> and /v1/sys/policy/<name>
//   - POST /v1/sys/capabilities-self
//   - token auth: auth/token/create, create-orphan, lookup-self, lookup,
//     renew-self, revoke-self, revoke
//   - AppRole: auth/<mount>/role/<name>, .../role-id, .../secret-id, login
//   - Kubernetes: auth/<mount>/config, auth/<mount>/role/<name>, login
//     (validating the JWT with the configured kube-apiserver's TokenReview)
//   - KV v2: GET, POST/PUT (options.cas), DELETE /v1/<mount>/data/<path>;
//     GET, POST/PUT, DELETE /v1/<mount>/metadata/<path>; POST
//     /v1/<mount>/delete/<path>, undelete/<path>, destroy/<path>; GET, POST
//     /v1/<mount>/config (cas_required, delete_version_after; max_versions
//     is stored but no version is ever pruned)
//   - KV v1: GET, POST/PUT /v1/<mount>/<path>
//
// Everything else answers 404 or 405 like Vault does for an unsupported path
// or operation. Tokens carry ACL policies (HCL parsed by ParsePolicy, plus
// Vault's "default" policy), a TTL, an explicit max TTL and a renewable flag;
// they expire by Options.Now, so a test that passes a FakeClock decides
// when. The root token never expires. The server is always initialized,
// unsealed and active. State lives in memory behind one mutex, so
// concurrent check-and-set writes race for real and exactly one wins.
//
// Overview of the HTTP API (tokens, status codes, error bodies):
// https://developer.hashicorp.com/vault/api-docs
package vaultserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Mount is a KV secrets engine mount.
type Mount struct {
	// Path is the mount path without slashes, for example "kv".
	Path string
	// Version is the KV version, 1 or 2.
	Version int
}

// Options configures New. The zero value serves one KV v2 mount "kv" with
// root token "root" on 127.0.0.1 and a free port.
type Options struct {
	// Addr is the listen address; empty means "127.0.0.1:0". Only loopback
	// addresses are accepted.
	Addr string
	// RootToken has every capability on every path. Empty means "root".
	RootToken string
	// ReadOnlyToken, when set, has the policy path "*" { capabilities =
	// ["read"] }: it may read every KV path (and so look up mounts, and
	// list sys/mounts) but gets 403 on every write.
	ReadOnlyToken string
	// Tokens are further tokens with their policy rules (plus the default
	// policy), for example a policy written for the logical path instead of
	// <mount>/data/ (case B11). They never expire.
	Tokens map[string][]Rule
	// Policies are named ACL policies in Vault's HCL syntax, as written with
	// `vault policy write NAME FILE`. New panics on one that does not parse.
	Policies map[string]string
	// AuthMounts enables auth methods at start, as `vault auth enable
	// -path=PATH TYPE` does; keys are paths ("approle"), values types
	// ("approle" or "kubernetes").
	AuthMounts map[string]string
	// Mounts are the KV mounts; empty means {kv, 2}.
	Mounts []Mount
	// Now returns the time used for created_time, token TTLs and expiry;
	// nil means time.Now. Pass (*FakeClock).Now to expire tokens on demand.
	Now func() time.Time
	// MaxTTL is the system max lease TTL that caps every token's lifetime;
	// zero means Vault's default of 768h (32 days).
	MaxTTL time.Duration
	// TokenReviewClient is the HTTP client the Kubernetes auth method uses
	// to call TokenReview when its config names no kubernetes_ca_cert; nil
	// means one trusting the system roots.
	TokenReviewClient *http.Client
}

// defaultMaxTTL is Vault's default system max lease TTL, also its default
// token TTL (https://developer.hashicorp.com/vault/docs/configuration#default_lease_ttl).
const defaultMaxTTL = 768 * time.Hour

// Version is what GET /v1/sys/health reports as the server version.
const Version = "0.0.0-maasctl-vaultserver"

// Server is the in-memory Vault stand-in. It is an http.Handler; Start also
// serves it on a loopback listener.
type Server struct {
	opts Options

	mu          sync.Mutex
	mounts      map[string]*mount     // by path without slashes
	tokens      map[string]*token     // by token ID
	policies    map[string][]Rule     // parsed ACL policies by name
	policyText  map[string]string     // as written
	auths       map[string]*authMount // by path without slashes
	counts      map[string]int        // Counts: logins, renewals
	loginErrors []string              // LoginErrors

	startOnce sync.Once
	closeOnce sync.Once
	stopped   bool          // Close was called (under mu)
	closed    chan struct{} // closed once Close has finished
	srv       *http.Server
}

type mount struct {
	Mount
	uuid     string
	accessor string
	kv1      map[string]map[string]any
	kv2      map[string]*entry
	// config is the KV v2 engine configuration (POST <mount>/config).
	config kvSettings
}

// kvSettings are the settings a KV v2 mount's config and a key's metadata
// share ("Configure the KV engine", "Create/Update metadata":
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#configure-the-kv-engine,
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-metadata).
type kvSettings struct {
	// maxVersions is stored and reported only: this stand-in keeps every
	// version (Vault prunes the oldest beyond it, default 10).
	maxVersions        int
	casRequired        bool
	deleteVersionAfter time.Duration
}

// entry is one KV v2 key: its versions, oldest first (index i is version
// i+1). An entry with no versions is metadata written before the first
// version (`vault kv metadata put`).
type entry struct {
	versions       []*version
	created        time.Time
	updated        time.Time
	settings       kvSettings
	customMetadata map[string]any
}

type version struct {
	data    map[string]any
	created time.Time
	// deleted is the deletion_time: set by a soft delete (then now) or, with
	// delete_version_after, at creation (then in the future); the version
	// reads as deleted once it is not after the server's clock.
	deleted   time.Time
	destroyed bool
}

// gone reports whether a read of v at now answers 404 with data null: it is
// destroyed, or its deletion_time has come
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#read-secret-version;
// hashicorp/vault#7644 for delete_version_after).
func (v *version) gone(now time.Time) bool {
	return v.destroyed || (!v.deleted.IsZero() && !v.deleted.After(now))
}

// New returns a Server for opts. It panics on an invalid mount (empty path,
// a version other than 1 or 2, or a duplicate), since that is a bug in the
// test that builds it.
func New(opts Options) *Server {
	if opts.RootToken == "" {
		opts.RootToken = "root"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if len(opts.Mounts) == 0 {
		opts.Mounts = []Mount{{Path: "kv", Version: 2}}
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = defaultMaxTTL
	}
	s := &Server{
		opts: opts, mounts: map[string]*mount{}, tokens: map[string]*token{},
		policies: map[string][]Rule{}, policyText: map[string]string{},
		auths: map[string]*authMount{}, counts: map[string]int{},
		closed: make(chan struct{}),
	}
	now := opts.Now()
	s.tokens[opts.RootToken] = &token{id: opts.RootToken, accessor: newAccessor(), root: true, policies: []string{"root"},
		displayName: "root", path: "auth/token/root", created: now}
	if opts.ReadOnlyToken != "" {
		s.tokens[opts.ReadOnlyToken] = &token{id: opts.ReadOnlyToken, accessor: newAccessor(), policies: []string{"default"},
			rules: []Rule{{Path: "*", Capabilities: []string{string(capRead)}}}, displayName: "token-read-only", path: "auth/token/create", created: now}
	}
	for id, rules := range opts.Tokens {
		s.tokens[id] = &token{id: id, accessor: newAccessor(), policies: []string{"default"}, rules: append([]Rule(nil), rules...),
			displayName: "token", path: "auth/token/create", created: now}
	}
	for name, text := range opts.Policies {
		rules, err := ParsePolicy(text)
		if err != nil {
			panic(fmt.Sprintf("vaultserver: policy %q: %v", name, err))
		}
		s.policies[name], s.policyText[name] = rules, text
	}
	for _, m := range opts.Mounts {
		if err := s.addMountLocked(m); err != nil {
			panic("vaultserver: " + err.Error())
		}
	}
	for path, typ := range opts.AuthMounts {
		if err := s.enableAuthLocked(path, typ); err != nil {
			panic("vaultserver: " + err.Error())
		}
	}
	return s
}

// addMountLocked adds a KV mount. Caller holds s.mu (or owns s).
func (s *Server) addMountLocked(m Mount) error {
	p := strings.Trim(m.Path, "/")
	if p == "" || (m.Version != 1 && m.Version != 2) {
		return fmt.Errorf("invalid mount %+v", m)
	}
	if _, dup := s.mounts[p]; dup {
		return fmt.Errorf("duplicate mount %q", p)
	}
	s.mounts[p] = &mount{
		Mount:    Mount{Path: p, Version: m.Version},
		uuid:     newUUID(),
		accessor: "kv_" + newUUID()[:8],
		kv1:      map[string]map[string]any{},
		kv2:      map[string]*entry{},
	}
	return nil
}

// Start listens on Options.Addr and serves until Close is called or ctx is
// done. It returns the base URL, "http://127.0.0.1:PORT". Errors: a
// non-loopback address, a listen failure, or a second Start.
func (s *Server) Start(ctx context.Context) (addr string, err error) {
	listen := s.opts.Addr
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	if err := checkLoopback(listen); err != nil {
		return "", err
	}
	started := false
	s.startOnce.Do(func() { started = true })
	if !started {
		return "", errors.New("vaultserver: already started")
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", fmt.Errorf("vaultserver: listen on %s: %w", listen, err)
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		_ = ln.Close()
		return "", errors.New("vaultserver: started after Close")
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	srv := s.srv
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	go func() {
		select {
		case <-ctx.Done():
			_ = s.Close()
		case <-s.closed:
		}
	}()
	return "http://" + ln.Addr().String(), nil
}

func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("vaultserver: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("vaultserver: listen address %q is not a loopback address", addr)
	}
	return nil
}

// Close stops serving and closes open connections. It is safe to call more
// than once and before Start.
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.stopped = true
		srv := s.srv
		s.mu.Unlock()
		if srv != nil {
			err = srv.Close()
		}
		close(s.closed)
	})
	return err
}

// AddToken makes id a valid, non-expiring token with the given policy
// rules plus the default policy, replacing any token with that ID. Tests use
// it to build tokens like the ones an operator issues (for example a policy
// that names the logical path, case B11).
func (s *Server) AddToken(id string, rules []Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[id] = &token{id: id, accessor: newAccessor(), policies: []string{"default"}, rules: append([]Rule(nil), rules...),
		displayName: "token", path: "auth/token/create", created: s.opts.Now()}
}

// SetPolicy writes the named ACL policy, as `vault policy write` does.
// Errors: the policy does not parse (see ParsePolicy).
func (s *Server) SetPolicy(name, text string) error {
	rules, err := ParsePolicy(text)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.policies[name], s.policyText[name] = rules, text
	return nil
}

// Counts returns how often each counted event happened: "login:<mount>"
// for every successful login through an auth mount, "renew-self" for every
// successful token renewal. It is for test assertions.
func (s *Server) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// Versions is the current_version of a KV v2 key (0 when absent), or for a
// KV v1 mount 1 when the key exists and 0 when not. It is for test
// assertions; mount and path are without slashes.
func (s *Server) Versions(mountPath, path string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mounts[strings.Trim(mountPath, "/")]
	if m == nil {
		return 0
	}
	path = strings.Trim(path, "/")
	if m.Version == 1 {
		if _, ok := m.kv1[path]; ok {
			return 1
		}
		return 0
	}
	if e := m.kv2[path]; e != nil {
		return len(e.versions)
	}
	return 0
}

// Data is a copy of the data a read would return (the latest KV v2 version),
// or nil when absent, deleted or destroyed. Non-string values are rendered
// with fmt's %v. It is for test assertions.
func (s *Server) Data(mountPath, path string) map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mounts[strings.Trim(mountPath, "/")]
	if m == nil {
		return nil
	}
	path = strings.Trim(path, "/")
	var raw map[string]any
	if m.Version == 1 {
		raw = m.kv1[path]
	} else if e := m.kv2[path]; e != nil && len(e.versions) > 0 {
		if v := e.versions[len(e.versions)-1]; !v.gone(s.opts.Now()) {
			raw = v.data
		}
	}
	if raw == nil {
		return nil
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		if sv, ok := v.(string); ok {
			out[k] = sv
		} else {
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// DeleteLatest soft-deletes the latest version of a KV v2 key, as
// `vault kv delete` does (DELETE /v1/<mount>/data/<path>), so tests can
// build that state. It reports whether there was a version to delete.
func (s *Server) DeleteLatest(mountPath, path string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mounts[strings.Trim(mountPath, "/")]
	if m == nil || m.Version != 2 {
		return false
	}
	e := m.kv2[strings.Trim(path, "/")]
	if e == nil || len(e.versions) == 0 {
		return false
	}
	v := e.versions[len(e.versions)-1]
	if v.gone(s.opts.Now()) {
		return false
	}
	v.deleted = s.opts.Now().UTC()
	e.updated = v.deleted
	return true
}

// Paths lists the keys stored on a mount, sorted. It is for test assertions.
func (s *Server) Paths(mountPath string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.mounts[strings.Trim(mountPath, "/")]
	if m == nil {
		return nil
	}
	var keys []string
	if m.Version == 1 {
		keys = append(keys, mapsKeys(m.kv1)...)
	} else {
		keys = append(keys, mapsKeys(m.kv2)...)
	}
	sort.Strings(keys)
	return keys
}

func mapsKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range maps.Keys(m) {
		out = append(out, k)
	}
	return out
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
