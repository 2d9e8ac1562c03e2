package vault

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// ParseKeyPath splits "PATH:KEY", the form of the Ansible hashi_vault lookup
// the deployment used ("kv/data/lab/rhoai-deployer:token"), into the
// logical path and the key. The key is what follows the last colon.
//
// Errors: no colon, or an empty path or key.
func ParseKeyPath(s string) (path, key string, err error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return "", "", fmt.Errorf("vault secret %q: want PATH:KEY, for example kv/data/lab/rhoai-deployer:token", s)
	}
	path, key = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:])
	if path == "" || key == "" {
		return "", "", fmt.Errorf("vault secret %q: want PATH:KEY with a non-empty path and key, for example kv/data/lab/rhoai-deployer:token", s)
	}
	if _, err := cleanPath(path); err != nil {
		return "", "", err
	}
	return path, key, nil
}

// ReadKey reads one key of the secret at logicalPath (see ReadSecret for
// the path rules) and returns its value with surrounding whitespace
// removed, so a token stored with a trailing newline still works.
//
// Errors: those of ReadSecret, a missing secret, or a missing or empty key
// (the message lists the keys that exist, never a value).
func (c *Client) ReadKey(ctx context.Context, logicalPath, key string) (string, error) {
	data, found, err := c.ReadSecret(ctx, logicalPath)
	if err != nil {
		return "", err
	}
	if !found {
		return "", fmt.Errorf("vault secret %s does not exist", logicalPath)
	}
	v, ok := data[key]
	if !ok {
		keys := make([]string, 0, len(data))
		for k := range data {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "", fmt.Errorf("vault secret %s has no key %q (keys: %s)", logicalPath, key, strings.Join(keys, ", "))
	}
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("vault secret %s: key %q is empty", logicalPath, key)
	}
	return v, nil
}
