package vault

import (
	"context"
	"fmt"
)

// DeleteSecret removes the secret at logicalPath (see Resolve) for good: on
// KV v2 every version and the metadata, through
// DELETE /v1/<mount>/metadata/<path>
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#delete-metadata-and-all-versions,
// `vault kv metadata delete`); on KV v1 the key, through
// DELETE /v1/<mount>/<path>
// (https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1#delete-secret).
// Deleting a secret that does not exist succeeds, as in Vault. This is
// not `vault kv delete`, which only soft-deletes the latest version (it
// can be undeleted, and EnsureSecret then refuses to generate over it);
// nor `vault kv destroy`, which removes a version's data but keeps the
// metadata and current_version.
//
// The token needs "delete" on <mount>/metadata/<path> (KV v2) or on
// <mount>/<path> (KV v1). Errors: those of Resolve, or the delete request's
// error naming the path; no secret value is ever part of a delete.
func (c *Client) DeleteSecret(ctx context.Context, logicalPath string) error {
	loc, err := c.Resolve(ctx, logicalPath)
	if err != nil {
		return err
	}
	if loc.KVVersion == 2 {
		if err := c.API().KVv2(loc.Mount).DeleteMetadata(ctx, loc.Path); err != nil {
			return fmt.Errorf("delete %s (DELETE %s; the token needs \"delete\" on it): %w", loc, loc.MetadataPath(), err)
		}
		return nil
	}
	if err := c.API().KVv1(loc.Mount).Delete(ctx, loc.Path); err != nil {
		return fmt.Errorf("delete %s (DELETE %s; the token needs \"delete\" on it): %w", loc, loc.DataPath(), err)
	}
	return nil
}
