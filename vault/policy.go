package vault

import (
	"fmt"
	"strings"
)

// PolicyRule is one path stanza of a Vault ACL policy
// (https://developer.hashicorp.com/vault/docs/concepts/policies#policy-syntax).
type PolicyRule struct {
	// Path is the API path without /v1/, for example
	// "kv/data/cloudnativepg/maas-postgres".
	Path string
	// Capabilities are Vault capability names ("create", "read", ...).
	Capabilities []string
	// Comment explains why the rule is needed; one or more lines, printed
	// above the stanza.
	Comment string
}

// Policy is an ACL policy document: a header comment and rules.
type Policy struct {
	// Header is printed first as comment lines.
	Header string
	Rules  []PolicyRule
}

// HCL renders the policy in Vault's policy syntax, comments as "# " lines,
// one stanza per rule, ready for `vault policy write NAME -`.
func (p Policy) HCL() string {
	var b strings.Builder
	comment(&b, p.Header)
	for i, r := range p.Rules {
		if i > 0 || p.Header != "" {
			b.WriteString("\n")
		}
		comment(&b, r.Comment)
		quoted := make([]string, len(r.Capabilities))
		for j, c := range r.Capabilities {
			quoted[j] = hclString(c)
		}
		fmt.Fprintf(&b, "path %s {\n  capabilities = [%s]\n}\n", hclString(r.Path), strings.Join(quoted, ", "))
	}
	return b.String()
}

func comment(b *strings.Builder, text string) {
	if text == "" {
		return
	}
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if line == "" {
			b.WriteString("#\n")
			continue
		}
		b.WriteString("# " + line + "\n")
	}
}

// hclString quotes s for HCL: backslash and double quote escaped. Paths
// reaching here passed cleanPath, so they hold no control characters.
func hclString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}

// LocationFor splits a logical path at its first segment, taken as the
// mount, for a mount of the given KV version, without asking Vault (see
// Resolve for the rules; "data/" after the mount is dropped on KV v2). It
// is for printing a policy when Vault cannot be asked; a mount with a slash
// in its path ("team/kv") needs Resolve.
//
// Errors: a malformed path or a version other than 1 or 2.
func LocationFor(logicalPath string, kvVersion int) (Location, error) {
	if kvVersion != 1 && kvVersion != 2 {
		return Location{}, fmt.Errorf("KV version %d: want 1 or 2", kvVersion)
	}
	clean, err := cleanPath(logicalPath)
	if err != nil {
		return Location{}, err
	}
	return locate(clean, firstSegment(clean), kvVersion)
}
