package vaultserver

import (
	"net/http"
	"strings"
)

// Rule is one path stanza of a Vault policy
// (https://developer.hashicorp.com/vault/docs/concepts/policies#policy-syntax):
// path "kv/data/app/*" { capabilities = ["read"] }.
type Rule struct {
	// Path is the API path without /v1/. A trailing "*" matches any suffix;
	// other glob forms ("+" segments) are not supported.
	Path string
	// Capabilities are "create", "read", "update" (others are ignored by
	// this server).
	Capabilities []string
}

// capability is a policy capability
// (https://developer.hashicorp.com/vault/docs/concepts/policies#capabilities).
type capability string

const (
	capRead   capability = "read"
	capCreate capability = "create"
	capUpdate capability = "update"
)

// principal is an authenticated token.
type principal struct {
	root  bool
	rules []Rule
}

// authenticate finds the request's token, from X-Vault-Token or
// "Authorization: Bearer" (https://developer.hashicorp.com/vault/api-docs#authentication).
// It returns nil for a missing or unknown token.
func (s *Server) authenticate(r *http.Request) *principal {
	tok := r.Header.Get("X-Vault-Token")
	if tok == "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			tok = strings.TrimSpace(b)
		}
	}
	switch {
	case tok == "":
		return nil
	case tok == s.opts.RootToken:
		return &principal{root: true}
	case s.opts.ReadOnlyToken != "" && tok == s.opts.ReadOnlyToken:
		return &principal{rules: []Rule{{Path: "*", Capabilities: []string{string(capRead)}}}}
	}
	s.mu.Lock()
	rules, ok := s.tokens[tok]
	s.mu.Unlock()
	if ok {
		return &principal{rules: rules}
	}
	return nil
}

// can reports whether the principal holds c on path. As in Vault, the most
// specific matching rule decides: an exact path beats a glob, a longer glob
// prefix beats a shorter one; rules for the same path are merged.
func (p *principal) can(path string, c capability) bool {
	if p.root {
		return true
	}
	bestLen, bestExact := -1, false
	var caps []string
	for _, r := range p.rules {
		prefix, glob := strings.CutSuffix(r.Path, "*")
		var exact bool
		switch {
		case !glob && r.Path == path:
			exact = true
		case glob && strings.HasPrefix(path, prefix):
		default:
			continue
		}
		better := (exact && !bestExact) || (exact == bestExact && len(prefix) > bestLen)
		same := exact == bestExact && len(prefix) == bestLen
		switch {
		case better:
			bestLen, bestExact, caps = len(prefix), exact, append([]string(nil), r.Capabilities...)
		case same:
			caps = append(caps, r.Capabilities...)
		}
	}
	for _, have := range caps {
		if have == string(c) {
			return true
		}
	}
	return false
}

// hasMountAccess reports whether any rule grants a capability on some path
// below mount, which is what Vault requires before it describes a mount to
// the token (internal-ui-mounts, "Get single mount details").
func (p *principal) hasMountAccess(mount string) bool {
	if p.root {
		return true
	}
	m := mount + "/"
	for _, r := range p.rules {
		if len(r.Capabilities) == 0 {
			continue
		}
		prefix, glob := strings.CutSuffix(r.Path, "*")
		if strings.HasPrefix(prefix, m) || (glob && strings.HasPrefix(m, prefix)) {
			return true
		}
	}
	return false
}
