package vault

import (
	"sort"
	"strings"
)

// Redacted replaces each secret that Redact removes.
const Redacted = "[REDACTED]"

// Redact returns s with every occurrence of each non-empty secret replaced by
// Redacted. Longer secrets are replaced first, so a secret that contains
// another is removed whole. Use it on any message that may have been built
// from a Vault response, a token or a password before it is printed or
// logged.
func Redact(s string, secrets ...string) string {
	list := make([]string, 0, len(secrets))
	for _, sec := range secrets {
		if sec != "" {
			list = append(list, sec)
		}
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	for _, sec := range list {
		s = strings.ReplaceAll(s, sec, Redacted)
	}
	return s
}
