package vaultserver

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/hcl"
	"github.com/hashicorp/hcl/hcl/ast"
)

// Rule is one path stanza of a Vault policy
// (https://developer.hashicorp.com/vault/docs/concepts/policies#policy-syntax):
// path "kv/data/app/*" { capabilities = ["read"] }.
type Rule struct {
	// Path is the API path without /v1/. A trailing "*" matches any suffix
	// and a "+" segment matches exactly one path segment, as in Vault.
	Path string
	// Capabilities are Vault's capability names: create, read, update,
	// patch, delete, list, sudo and deny (deny wins over everything).
	Capabilities []string
}

// capability is a policy capability
// (https://developer.hashicorp.com/vault/docs/concepts/policies#capabilities).
type capability string

const (
	capRead   capability = "read"
	capCreate capability = "create"
	capUpdate capability = "update"
	capPatch  capability = "patch"
	capDelete capability = "delete"
	capList   capability = "list"
	capSudo   capability = "sudo"
	capDeny   capability = "deny"
)

var knownCaps = []capability{capCreate, capRead, capUpdate, capPatch, capDelete, capList, capSudo, capDeny}

// legacyPolicy maps the deprecated `policy = "..."` form to capabilities
// (https://developer.hashicorp.com/vault/docs/concepts/policies#capabilities,
// "the policy field").
var legacyPolicy = map[string][]string{
	"deny":  {"deny"},
	"read":  {"read", "list"},
	"write": {"create", "read", "update", "delete", "list"},
	"sudo":  {"create", "read", "update", "delete", "list", "sudo"},
}

// defaultPolicy is the part of Vault's built-in "default" policy that
// concerns endpoints this server implements; Vault attaches it to every token
// unless no_default_policy is set
// (https://developer.hashicorp.com/vault/docs/concepts/policies#default-policy).
var defaultPolicy = []Rule{
	{Path: "auth/token/lookup-self", Capabilities: []string{"read"}},
	{Path: "auth/token/renew-self", Capabilities: []string{"update"}},
	{Path: "auth/token/revoke-self", Capabilities: []string{"update"}},
	{Path: "sys/capabilities-self", Capabilities: []string{"update"}},
}

// ParsePolicy parses a policy document in Vault's HCL syntax into rules. It
// accepts path stanzas with `capabilities` or the legacy `policy` field and
// rejects parameter constraints, wrapping TTLs and other keys this server
// does not enforce, so a test never believes a constraint was applied. The
// rules of a path named twice are merged, as Vault does.
//
// Errors: HCL syntax errors, a stanza without a path or capabilities, an
// unknown capability, or an unsupported key.
func ParsePolicy(text string) ([]Rule, error) {
	f, err := hcl.ParseString(text)
	if err != nil {
		return nil, fmt.Errorf("failed to parse policy: %w", err)
	}
	list, ok := f.Node.(*ast.ObjectList)
	if !ok {
		return nil, fmt.Errorf("failed to parse policy: does not contain a root object")
	}
	for _, item := range list.Items {
		if k := item.Keys[0].Token.Value(); k != "path" {
			return nil, fmt.Errorf("failed to parse policy: invalid key %q on line %d", k, item.Pos().Line)
		}
	}
	byPath := map[string][]string{}
	var order []string
	for _, item := range list.Filter("path").Items {
		if len(item.Keys) != 1 {
			return nil, fmt.Errorf("failed to parse policy: path stanza on line %d needs exactly one path", item.Pos().Line)
		}
		path, _ := item.Keys[0].Token.Value().(string)
		body, ok := item.Val.(*ast.ObjectType)
		if !ok {
			return nil, fmt.Errorf("failed to parse policy: path %q: not a block", path)
		}
		for _, kv := range body.List.Items {
			switch k := kv.Keys[0].Token.Value(); k {
			case "capabilities", "policy":
			default:
				return nil, fmt.Errorf("failed to parse policy: path %q: key %q is not supported by vaultserver", path, k)
			}
		}
		var stanza struct {
			Capabilities []string `hcl:"capabilities"`
			Policy       string   `hcl:"policy"`
		}
		if err := hcl.DecodeObject(&stanza, item.Val); err != nil {
			return nil, fmt.Errorf("failed to parse policy: path %q: %w", path, err)
		}
		caps := stanza.Capabilities
		if stanza.Policy != "" {
			legacy, ok := legacyPolicy[stanza.Policy]
			if !ok {
				return nil, fmt.Errorf("failed to parse policy: path %q: invalid policy %q", path, stanza.Policy)
			}
			caps = append(caps, legacy...)
		}
		for _, c := range caps {
			if !slices.Contains(knownCaps, capability(c)) {
				return nil, fmt.Errorf("failed to parse policy: path %q: invalid capability %q", path, c)
			}
		}
		if err := checkPattern(path); err != nil {
			return nil, fmt.Errorf("failed to parse policy: %w", err)
		}
		if _, seen := byPath[path]; !seen {
			order = append(order, path)
		}
		byPath[path] = append(byPath[path], caps...)
	}
	rules := make([]Rule, 0, len(order))
	for _, p := range order {
		rules = append(rules, Rule{Path: p, Capabilities: byPath[p]})
	}
	return rules, nil
}

// checkPattern rejects a "*" anywhere but at the end, which Vault refuses.
func checkPattern(p string) error {
	if i := strings.Index(p, "*"); i >= 0 && i != len(p)-1 {
		return fmt.Errorf("path %q: the glob * may only be the last character", p)
	}
	return nil
}

// principal is an authenticated token: root, or the rules of its policies.
type principal struct {
	root  bool
	rules []Rule
	tok   *token // nil for principals built directly in tests
}

// authenticate finds the request's token, from X-Vault-Token or
// "Authorization: Bearer" (https://developer.hashicorp.com/vault/api-docs#authentication).
// It returns nil for a missing, unknown, revoked or expired token, which
// Vault answers with 403 "permission denied".
func (s *Server) authenticate(r *http.Request) *principal {
	id := r.Header.Get("X-Vault-Token")
	if id == "" {
		if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			id = strings.TrimSpace(b)
		}
	}
	if id == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[id]
	if t == nil || !t.valid(s.opts.Now()) {
		return nil
	}
	return s.principalLocked(t)
}

// principalLocked resolves a token's policies now, so a policy written after
// the token was issued applies at once, as in Vault. Caller holds s.mu.
func (s *Server) principalLocked(t *token) *principal {
	if t.root {
		return &principal{root: true, tok: t}
	}
	rules := append([]Rule(nil), t.rules...)
	for _, name := range t.policies {
		switch name {
		case "root":
			return &principal{root: true, tok: t}
		case "default":
			rules = append(rules, defaultPolicy...)
		default:
			rules = append(rules, s.policies[name]...)
		}
	}
	return &principal{rules: rules, tok: t}
}

// capabilities returns the capabilities the principal holds on path. As in
// Vault, the rules of every policy naming the same path pattern are merged,
// the highest-priority matching pattern alone decides, and "deny" in it
// removes every capability
// (https://developer.hashicorp.com/vault/docs/concepts/policies#priority-matching).
func (p *principal) capabilities(path string) []string {
	if p.root {
		return []string{"root"}
	}
	merged := map[string][]string{}
	for _, r := range p.rules {
		if matches(r.Path, path) {
			merged[r.Path] = append(merged[r.Path], r.Capabilities...)
		}
	}
	best := ""
	found := false
	for pat := range merged {
		if !found || lowerPriority(best, pat) {
			best, found = pat, true
		}
	}
	if !found {
		return []string{string(capDeny)}
	}
	caps := merged[best]
	if slices.Contains(caps, string(capDeny)) {
		return []string{string(capDeny)}
	}
	out := slices.Clone(caps)
	sort.Strings(out)
	return slices.Compact(out)
}

// can reports whether the principal holds c on path.
func (p *principal) can(path string, c capability) bool {
	if p.root {
		return true
	}
	return slices.Contains(p.capabilities(path), string(c))
}

// matches reports whether the policy path pattern matches path: "+"
// matches one whole segment, a trailing "*" any suffix.
func matches(pattern, path string) bool {
	prefix, glob := strings.CutSuffix(pattern, "*")
	ps := strings.Split(prefix, "/")
	xs := strings.Split(path, "/")
	if !glob {
		if len(ps) != len(xs) {
			return false
		}
		for i := range ps {
			if ps[i] != "+" && ps[i] != xs[i] {
				return false
			}
		}
		return true
	}
	if len(xs) < len(ps) {
		return false
	}
	last := len(ps) - 1
	for i := 0; i < last; i++ {
		if ps[i] != "+" && ps[i] != xs[i] {
			return false
		}
	}
	return strings.HasPrefix(xs[last], ps[last])
}

// lowerPriority reports whether pattern p1 has lower priority than p2, by
// Vault's documented rules, in order: the first wildcard (+ or *) earlier;
// ending in * when the other does not; more + segments; shorter;
// lexicographically smaller.
func lowerPriority(p1, p2 string) bool {
	w1, w2 := firstWildcard(p1), firstWildcard(p2)
	if w1 != w2 {
		return w1 < w2
	}
	g1, g2 := strings.HasSuffix(p1, "*"), strings.HasSuffix(p2, "*")
	if g1 != g2 {
		return g1
	}
	n1, n2 := plusSegments(p1), plusSegments(p2)
	if n1 != n2 {
		return n1 > n2
	}
	if len(p1) != len(p2) {
		return len(p1) < len(p2)
	}
	return p1 < p2
}

func firstWildcard(p string) int {
	i := strings.IndexAny(p, "+*")
	if i < 0 {
		return len(p) + 1 // no wildcard: exact paths outrank every pattern
	}
	return i
}

func plusSegments(p string) int {
	n := 0
	for _, s := range strings.Split(p, "/") {
		if s == "+" {
			n++
		}
	}
	return n
}

// hasMountAccess reports whether any rule grants a capability other than
// deny on some path below mount, which is what Vault requires before it
// describes a mount to the token (internal-ui-mounts, "Get single mount
// details": "rely on permissions granted to the individual mount path").
func (p *principal) hasMountAccess(mount string) bool {
	if p.root {
		return true
	}
	m := strings.Split(mount, "/")
	for _, r := range p.rules {
		if len(r.Capabilities) == 0 || slices.Equal(r.Capabilities, []string{string(capDeny)}) {
			continue
		}
		prefix, glob := strings.CutSuffix(r.Path, "*")
		ps := strings.Split(prefix, "/")
		ok := true
		for i := range m {
			switch {
			case i >= len(ps):
				ok = false
			case i == len(ps)-1 && glob:
				ok = ok && strings.HasPrefix(m[i], ps[i])
			default:
				ok = ok && (ps[i] == "+" || ps[i] == m[i])
			}
			if !ok {
				break
			}
			if i == len(ps)-1 && glob {
				break // the glob covers everything after it
			}
		}
		// A rule naming the mount itself ("kv") grants nothing below it.
		if ok && (len(ps) > len(m) || glob) {
			return true
		}
	}
	return false
}
