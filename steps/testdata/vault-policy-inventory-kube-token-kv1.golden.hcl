# Vault ACL policy for "maasctl install" with this inventory (least privilege).
# Write it:   maasctl vault policy -f inventory.yaml | vault policy write maasctl -
# Attach "maasctl" to the token, AppRole or Kubernetes role maasctl runs with.
# Not listed on purpose: sys/internal/ui/mounts/<path>, which maasctl reads to
# detect the KV version, is answered for any token holding a capability below
# the mount (https://developer.hashicorp.com/vault/api-docs/system/internal-ui-mounts);
# AppRole and Kubernetes logins need no policy.

# Database password, database.vaultPath secret/maas/db (KV v1):
# read it, and create it on the first run; an existing password is never
# overwritten, so no "update".
path "secret/maas/db" {
  capabilities = ["create", "read"]
}

# Cluster credentials, secret/lab/deployer (KV v1):
# key "token" is the bearer token maasctl uses for the Kubernetes API.
path "secret/lab/deployer" {
  capabilities = ["read"]
}

# Token lifetime: preflight checks the remaining TTL; a refused request is
# reported as an expired token or as a missing policy rule.
path "auth/token/lookup-self" {
  capabilities = ["read"]
}

# Renew the token during long waits.
path "auth/token/renew-self" {
  capabilities = ["update"]
}

# Preflight: may the token create the database secret? (asked before any
# change to the cluster)
path "sys/capabilities-self" {
  capabilities = ["update"]
}
