package vaultserver

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// token is one Vault service token
// (https://developer.hashicorp.com/vault/docs/concepts/tokens).
type token struct {
	id, accessor string
	root         bool
	policies     []string // named policies, "default" included unless opted out
	rules        []Rule   // inline rules (Options.Tokens, AddToken, ReadOnlyToken)
	displayName  string
	path         string // the endpoint that issued it
	meta         map[string]string
	created      time.Time
	// ttl is the TTL asked for at creation; renew-self without an
	// increment extends by it again.
	ttl time.Duration
	// expire is when the token stops working; zero means never (root).
	expire time.Time
	// maxExpire caps expire: creation + explicit max TTL, the role's max
	// TTL or the system max TTL, whichever is first; zero means no cap.
	maxExpire      time.Time
	explicitMaxTTL time.Duration
	renewable      bool
	orphan         bool
	revoked        bool
}

func (t *token) valid(now time.Time) bool {
	return !t.revoked && (t.expire.IsZero() || now.Before(t.expire))
}

// TokenOptions describes a token for CreateToken, with the meaning of the
// auth/token/create parameters of the same names.
type TokenOptions struct {
	// Policies are policy names; "default" is added unless NoDefaultPolicy.
	Policies        []string
	NoDefaultPolicy bool
	// TTL is the initial TTL; zero means the system max TTL.
	TTL time.Duration
	// ExplicitMaxTTL caps the lifetime across renewals; zero means the
	// system max TTL.
	ExplicitMaxTTL time.Duration
	// NotRenewable makes renew-self fail (Vault's renewable=false).
	NotRenewable bool
	DisplayName  string
}

// CreateToken issues a token as auth/token/create would for the root token
// and returns its ID. Errors: an unknown policy name.
func (s *Server) CreateToken(o TokenOptions) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range o.Policies {
		if _, ok := s.policies[p]; !ok && p != "default" && p != "root" {
			return "", fmt.Errorf("unknown policy %q", p)
		}
	}
	name := o.DisplayName
	if name == "" {
		name = "token"
	}
	t := s.issueLocked(issue{policies: o.Policies, noDefault: o.NoDefaultPolicy, ttl: o.TTL, maxTTL: o.ExplicitMaxTTL, explicitMax: true,
		renewable: !o.NotRenewable, displayName: name, path: "auth/token/create", orphan: true})
	return t.id, nil
}

// RevokeToken revokes a token, as `vault token revoke` does. It reports
// whether the token existed.
func (s *Server) RevokeToken(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[id]
	if t == nil || t.root {
		return false
	}
	t.revoked = true
	return true
}

// issue are the inputs of issueLocked.
type issue struct {
	policies    []string
	noDefault   bool
	ttl, maxTTL time.Duration
	explicitMax bool // maxTTL is explicit_max_ttl (reported by lookup)
	renewable   bool
	displayName string
	path        string
	meta        map[string]string
	orphan      bool
}

// issueLocked creates and stores a token. TTLs follow Vault's rules: a zero
// TTL means the system default, and no lifetime exceeds the system max TTL
// (https://developer.hashicorp.com/vault/docs/concepts/tokens#token-time-to-live-periodic-tokens-and-explicit-max-ttls).
// Caller holds s.mu.
func (s *Server) issueLocked(in issue) *token {
	now := s.opts.Now()
	max := s.opts.MaxTTL
	if in.maxTTL > 0 && in.maxTTL < max {
		max = in.maxTTL
	}
	ttl := in.ttl
	if ttl <= 0 || ttl > max {
		ttl = max
	}
	policies := slices.Clone(in.policies)
	if !in.noDefault && !slices.Contains(policies, "default") {
		policies = append(policies, "default")
	}
	slices.Sort(policies)
	t := &token{
		id: newTokenID(), accessor: newAccessor(), policies: policies, displayName: in.displayName, path: in.path,
		meta: in.meta, created: now, ttl: ttl, expire: now.Add(ttl), maxExpire: now.Add(max),
		renewable: in.renewable, orphan: in.orphan,
	}
	if in.explicitMax {
		t.explicitMaxTTL = in.maxTTL
	}
	s.tokens[t.id] = t
	return t
}

// authBlock is the "auth" object of a login or token-create response
// (https://developer.hashicorp.com/vault/api-docs/auth/token#sample-response).
func (t *token) authBlock(now time.Time) map[string]any {
	meta := any(nil)
	if len(t.meta) > 0 {
		meta = t.meta
	}
	return map[string]any{
		"client_token":    t.id,
		"accessor":        t.accessor,
		"policies":        t.policies,
		"token_policies":  t.policies,
		"metadata":        meta,
		"lease_duration":  t.remaining(now),
		"renewable":       t.renewable,
		"entity_id":       "",
		"token_type":      "service",
		"orphan":          t.orphan,
		"mfa_requirement": nil,
		"num_uses":        0,
	}
}

// remaining is the token's TTL left in whole seconds (0 for root).
func (t *token) remaining(now time.Time) int {
	if t.expire.IsZero() {
		return 0
	}
	return int(t.expire.Sub(now).Round(time.Second) / time.Second)
}

// tokenAPI routes auth/token/* for an authenticated principal.
func (s *Server) tokenAPI(w http.ResponseWriter, r *http.Request, op string, who *principal) {
	path := "auth/token/" + op
	need := capUpdate
	if r.Method == http.MethodGet {
		need = capRead
	}
	if op == "create" || op == "create-orphan" {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
			return
		}
		if !who.can(path, capCreate) && !who.can(path, capUpdate) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
	} else if !who.can(path, need) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	switch op {
	case "create", "create-orphan":
		s.tokenCreate(w, r, who, op == "create-orphan")
	case "lookup-self":
		s.tokenLookup(w, r, who.tok)
	case "lookup": // https://developer.hashicorp.com/vault/api-docs/auth/token#lookup-a-token
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		id, _ := body["token"].(string)
		s.mu.Lock()
		t := s.tokens[id]
		s.mu.Unlock()
		if t == nil || !t.valid(s.opts.Now()) {
			writeErrors(w, http.StatusBadRequest, "bad token")
			return
		}
		s.tokenLookup(w, r, t)
	case "renew-self":
		s.tokenRenewSelf(w, r, who.tok)
	case "revoke-self": // https://developer.hashicorp.com/vault/api-docs/auth/token#revoke-a-token-self
		s.mu.Lock()
		if !who.tok.root {
			who.tok.revoked = true
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case "revoke": // https://developer.hashicorp.com/vault/api-docs/auth/token#revoke-a-token
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		id, _ := body["token"].(string)
		s.RevokeToken(id)
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErrors(w, http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", path))
	}
}

// tokenCreate: POST auth/token/create and create-orphan with policies, ttl,
// explicit_max_ttl, renewable, no_default_policy, display_name, meta. A
// non-root caller may only hand out policies it holds itself.
// https://developer.hashicorp.com/vault/api-docs/auth/token#create-token
func (s *Server) tokenCreate(w http.ResponseWriter, r *http.Request, who *principal, orphan bool) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	policies, err := stringList(body["policies"])
	if err != nil {
		writeErrors(w, http.StatusBadRequest, "invalid policies: "+err.Error())
		return
	}
	ttl, err1 := duration(body["ttl"])
	maxTTL, err2 := duration(body["explicit_max_ttl"])
	if err := firstErr(err1, err2); err != nil {
		writeErrors(w, http.StatusBadRequest, err.Error())
		return
	}
	renewable := true
	if v, ok := body["renewable"].(bool); ok {
		renewable = v
	}
	noDefault, _ := body["no_default_policy"].(bool)
	name, _ := body["display_name"].(string)
	name = "token" + map[bool]string{true: "-" + name, false: ""}[name != ""]
	meta := map[string]string{}
	if m, ok := body["meta"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = fmt.Sprint(v)
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if len(policies) == 0 && !who.root {
		policies = slices.Clone(who.tok.policies)
	}
	for _, p := range policies {
		if !who.root && !slices.Contains(who.tok.policies, p) && p != "default" {
			writeErrors(w, http.StatusBadRequest, "child policies must be subset of parent")
			return
		}
	}
	t := s.issueLocked(issue{policies: policies, noDefault: noDefault, ttl: ttl, maxTTL: maxTTL, explicitMax: true,
		renewable: renewable, displayName: name, path: "auth/token/create", meta: meta, orphan: orphan || who.root})
	writeEnvelope(w, http.StatusOK, envelope{Auth: t.authBlock(s.opts.Now())})
}

// tokenLookup: GET auth/token/lookup-self (and POST auth/token/lookup).
// Like Vault it returns the token's ID in "id".
// https://developer.hashicorp.com/vault/api-docs/auth/token#lookup-a-token-self
func (s *Server) tokenLookup(w http.ResponseWriter, r *http.Request, t *token) {
	if r.Method != http.MethodGet && r.Method != http.MethodPost && r.Method != http.MethodPut {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	s.mu.Lock()
	now := s.opts.Now()
	var expire any
	if !t.expire.IsZero() {
		expire = stamp(t.expire)
	}
	meta := any(nil)
	if len(t.meta) > 0 {
		meta = t.meta
	}
	data := map[string]any{
		"accessor":         t.accessor,
		"creation_time":    t.created.Unix(),
		"creation_ttl":     int(t.ttl / time.Second),
		"display_name":     t.displayName,
		"entity_id":        "",
		"expire_time":      expire,
		"explicit_max_ttl": int(t.explicitMaxTTL / time.Second),
		"id":               t.id,
		"issue_time":       stamp(t.created),
		"meta":             meta,
		"num_uses":         0,
		"orphan":           t.orphan,
		"path":             t.path,
		"policies":         t.policies,
		"renewable":        t.renewable,
		"ttl":              t.remaining(now),
		"type":             "service",
	}
	s.mu.Unlock()
	writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: "token"})
}

// tokenRenewSelf: POST/PUT auth/token/renew-self {"increment": "1h"}. The
// new TTL is the increment (default: the creation TTL) from now, capped by
// the token's max TTL with Vault's warning; a non-renewable token gets 400.
// https://developer.hashicorp.com/vault/api-docs/auth/token#renew-a-token-self
func (s *Server) tokenRenewSelf(w http.ResponseWriter, r *http.Request, t *token) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	inc, err := duration(body["increment"])
	if err != nil {
		writeErrors(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t.root || t.expire.IsZero() {
		writeEnvelope(w, http.StatusOK, envelope{Auth: t.authBlock(s.opts.Now()), MountType: "token"})
		return
	}
	if !t.renewable {
		writeErrors(w, http.StatusBadRequest, "lease is not renewable")
		return
	}
	now := s.opts.Now()
	if inc <= 0 {
		inc = t.ttl
	}
	var warnings []string
	next := now.Add(inc)
	if next.After(t.maxExpire) {
		warnings = append(warnings, fmt.Sprintf("TTL of %q exceeded the effective max_ttl of %q; TTL value is capped accordingly",
			inc.String(), t.maxExpire.Sub(now).Round(time.Second).String()))
		next = t.maxExpire
	}
	t.expire = next
	s.counts["renew-self"]++
	writeEnvelope(w, http.StatusOK, envelope{Auth: t.authBlock(now), Warnings: warnings, MountType: "token"})
}

// duration reads a Vault duration parameter: seconds as a number, or a
// string like "90s", "15m", "1h" or "3600".
func duration(v any) (time.Duration, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case string:
		if x == "" {
			return 0, nil
		}
		if d, err := time.ParseDuration(x); err == nil {
			return d, nil
		}
		var n int64
		if _, err := fmt.Sscan(x, &n); err == nil {
			return time.Duration(n) * time.Second, nil
		}
		return 0, fmt.Errorf("invalid duration %q", x)
	case interface{ Int64() (int64, error) }:
		n, err := x.Int64()
		if err != nil {
			return 0, fmt.Errorf("invalid duration %v", v)
		}
		return time.Duration(n) * time.Second, nil
	}
	return 0, fmt.Errorf("invalid duration %v", v)
}

// stringList reads a Vault list parameter: a JSON list of strings or a
// comma-separated string.
func stringList(v any) ([]string, error) {
	var out []string
	switch x := v.(type) {
	case nil:
	case string:
		for _, p := range strings.Split(x, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	case []any:
		for _, e := range x {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("%v is not a string", e)
			}
			out = append(out, s)
		}
	default:
		return nil, fmt.Errorf("%v is not a list", v)
	}
	return out, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

const base62 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

func randomString(n int) string {
	b := make([]byte, n)
	for i := range b {
		k, _ := rand.Int(rand.Reader, big.NewInt(int64(len(base62))))
		b[i] = base62[k.Int64()]
	}
	return string(b)
}

// newTokenID returns a service token ID in Vault's format "hvs." + 24
// base62 characters (https://developer.hashicorp.com/vault/docs/concepts/tokens#token-prefixes).
func newTokenID() string { return "hvs." + randomString(24) }

func newAccessor() string { return randomString(24) }

// FakeClock is a clock a test moves by hand, for Options.Now: tokens expire
// when the test advances it past their expire time. It is safe for
// concurrent use.
type FakeClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewFakeClock returns a clock standing at t.
func NewFakeClock(t time.Time) *FakeClock { return &FakeClock{t: t} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
