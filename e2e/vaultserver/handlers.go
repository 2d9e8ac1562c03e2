package vaultserver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
)

// Messages Vault puts in {"errors":[...]}.
const (
	msgPermissionDenied = "permission denied"
	// KV v2 "Create/Update secret", options.cas:
	// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2#create-update-secret
	msgCASMismatch = "check-and-set parameter did not match the current version"
	// Answer of the mount lookup for a missing mount or a token with no
	// capability below it (the vault CLI prints it for `vault kv get` on an
	// unknown mount).
	msgPreflight = "preflight capability check returned 403, please ensure client's policies grant access to path %q"
	// KV v2 "Create/Update secret" on a mount or key with cas_required and
	// a write without options.cas (vault-plugin-secrets-kv path_data.go;
	// hashicorp/terraform-provider-vault#2472 quotes it).
	msgCASRequired = "check-and-set parameter required for this call"
	// Warning of a KV v2 mount for a path outside data/, metadata/ and the
	// other versioned endpoints, answered with 404 and data null; %s is the
	// vault CLI subcommand of the operation (get, put, list, delete), as
	// vault-plugin-secrets-kv's pathInvalid renders it (hvac/hvac#179,
	// rundeck-plugins/vault-storage#57 show the full text).
	msgInvalidV2Path = "Invalid path for a versioned K/V secrets engine. See the API docs for the appropriate API endpoints to use. If using the Vault CLI, use 'vault kv %s' for this operation."
	msgNoData        = "no data provided"
	// Answer of delete/, undelete/ and destroy/ without versions.
	msgNoVersions = "no version number provided"
)

// kvV1DefaultTTL is the lease_duration a KV v1 read reports when no ttl key
// is stored: the system default of 768h ("KV v1 Read Secret":
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1#read-secret).
const kvV1DefaultTTL = 768 * 3600

// ServeHTTP routes a Vault API request. Every path except sys/health needs a
// known token; an unknown or missing one gets 403 "permission denied".
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if !ok {
		writeErrors(w, http.StatusNotFound)
		return
	}
	if p == "sys/health" {
		s.health(w, r)
		return
	}

	// Logins are the unauthenticated paths of an auth method
	// (https://developer.hashicorp.com/vault/docs/auth).
	a, rel := s.findAuth(p)
	if a != nil && rel == "login" {
		s.login(w, r, a)
		return
	}

	who := s.authenticate(r)
	if who == nil {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	switch {
	case strings.HasPrefix(p, "sys/internal/ui/mounts/"):
		s.mountLookup(w, r, strings.TrimPrefix(p, "sys/internal/ui/mounts/"), who)
		return
	case strings.HasPrefix(p, "sys/") && s.sysAPI(w, r, p, who):
		return
	case strings.HasPrefix(p, "auth/token/"):
		s.tokenAPI(w, r, strings.TrimPrefix(p, "auth/token/"), who)
		return
	case a != nil:
		s.authMethodAPI(w, r, a, rel, who)
		return
	}

	m, rel := s.findMount(p)
	if m == nil {
		if who.root {
			writeErrors(w, http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", p))
		} else {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		}
		return
	}
	if m.Version == 1 {
		s.kv1(w, r, m, rel, who)
		return
	}
	switch {
	case strings.HasPrefix(rel, "data/"):
		s.kv2Data(w, r, m, strings.TrimPrefix(rel, "data/"), who)
	case strings.HasPrefix(rel, "metadata/"):
		s.kv2Metadata(w, r, m, strings.TrimPrefix(rel, "metadata/"), who)
	case rel == "config":
		s.kv2Config(w, r, m, who)
	case strings.HasPrefix(rel, "delete/"), strings.HasPrefix(rel, "undelete/"), strings.HasPrefix(rel, "destroy/"):
		op, key, _ := strings.Cut(rel, "/")
		s.kv2Versions(w, r, m, op, key, who)
	default:
		writeEnvelope(w, http.StatusNotFound, envelope{Warnings: []string{fmt.Sprintf(msgInvalidV2Path, cliVerb(r.Method))}})
	}
}

// cliVerb is the `vault kv` subcommand the invalid-path warning suggests
// for an HTTP method.
func cliVerb(method string) string {
	switch method {
	case http.MethodPost, http.MethodPut:
		return "put"
	case http.MethodDelete:
		return "delete"
	case "LIST":
		return "list"
	}
	return "get"
}

// findMount returns the mount with the longest path that p is below, and p
// relative to it.
func (s *Server) findMount(p string) (*mount, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *mount
	for path, m := range s.mounts {
		if (p == path || strings.HasPrefix(p, path+"/")) && (best == nil || len(path) > len(best.Path)) {
			best = m
		}
	}
	if best == nil {
		return nil, ""
	}
	return best, strings.TrimPrefix(strings.TrimPrefix(p, best.Path), "/")
}

// health: GET/HEAD /v1/sys/health, unauthenticated, 200 for an initialized,
// unsealed, active node.
// https://developer.hashicorp.com/vault/api-docs/system/health
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		writeErrors(w, http.StatusMethodNotAllowed)
		return
	}
	body := map[string]any{
		"initialized":                  true,
		"sealed":                       false,
		"standby":                      false,
		"performance_standby":          false,
		"replication_performance_mode": "disabled",
		"replication_dr_mode":          "disabled",
		"server_time_utc":              s.opts.Now().Unix(),
		"version":                      Version,
		"enterprise":                   false,
		"cluster_name":                 "vaultserver",
		"cluster_id":                   "00000000-0000-0000-0000-000000000000",
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// listMounts: GET /v1/sys/mounts, needs "read" on sys/mounts.
// Only the KV mounts are listed; a real Vault also lists sys/, cubbyhole/
// and identity/.
// https://developer.hashicorp.com/vault/api-docs/system/mounts#list-mounted-secrets-engines
func (s *Server) listMounts(w http.ResponseWriter, r *http.Request, who *principal) {
	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	if !who.can("sys/mounts", capRead) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	s.mu.Lock()
	data := make(map[string]any, len(s.mounts))
	for path, m := range s.mounts {
		data[path+"/"] = mountInfo(m)
	}
	s.mu.Unlock()
	writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: "system"})
}

// mountLookup: GET /v1/sys/internal/ui/mounts/<path>, the vault CLI's KV
// preflight. It answers with the mount holding path when the token has any
// capability below it, and 403 with the preflight message otherwise (also
// when no mount matches, so mounts cannot be enumerated).
// https://developer.hashicorp.com/vault/api-docs/system/internal-ui-mounts#get-single-mount-details
func (s *Server) mountLookup(w http.ResponseWriter, r *http.Request, path string, who *principal) {
	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	m, _ := s.findMount(strings.Trim(path, "/"))
	if m == nil || !who.hasMountAccess(m.Path) {
		quoted := path
		if !strings.HasSuffix(quoted, "/") {
			quoted += "/"
		}
		writeErrors(w, http.StatusForbidden, fmt.Sprintf(msgPreflight, quoted))
		return
	}
	s.mu.Lock()
	info := mountInfo(m)
	s.mu.Unlock()
	info["path"] = m.Path + "/"
	writeEnvelope(w, http.StatusOK, envelope{Data: info, MountType: "system"})
}

// mountInfo is one mount as sys/mounts describes it.
func mountInfo(m *mount) map[string]any {
	return map[string]any{
		"accessor":                m.accessor,
		"config":                  map[string]any{"default_lease_ttl": 0, "force_no_cache": false, "max_lease_ttl": 0},
		"description":             "key/value secret storage",
		"external_entropy_access": false,
		"local":                   false,
		"options":                 map[string]any{"version": strconv.Itoa(m.Version)},
		"seal_wrap":               false,
		"type":                    "kv",
		"uuid":                    m.uuid,
	}
}

// kv1: KV v1 read (GET) and write (POST or PUT with the data as the body,
// 204 No Content). A missing key reads as 404 {"errors":[]}.
// Read: https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1#read-secret
// Write: https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v1#create-update-secret
func (s *Server) kv1(w http.ResponseWriter, r *http.Request, m *mount, path string, who *principal) {
	path = strings.Trim(path, "/")
	if path == "" {
		writeErrors(w, http.StatusNotFound, "unsupported path")
		return
	}
	apiPath := m.Path + "/" + path
	switch r.Method {
	case http.MethodGet:
		if !who.can(apiPath, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		data, ok := m.kv1[path]
		data = maps.Clone(data)
		s.mu.Unlock()
		if !ok {
			writeErrors(w, http.StatusNotFound)
			return
		}
		writeEnvelope(w, http.StatusOK, envelope{Data: data, LeaseDuration: kvV1DefaultTTL})

	case http.MethodPost, http.MethodPut:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		if len(body) == 0 {
			writeErrors(w, http.StatusBadRequest, "missing data fields")
			return
		}
		s.mu.Lock()
		_, exists := m.kv1[path]
		need := capCreate
		if exists {
			need = capUpdate
		}
		if !who.can(apiPath, need) {
			s.mu.Unlock()
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		m.kv1[path] = body
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)

	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// readBody decodes a JSON object body; an empty body is an empty object.
// On failure it writes Vault's 400 and returns false.
func readBody(w http.ResponseWriter, r *http.Request) (map[string]any, bool) {
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, 1<<20)); err != nil {
		writeErrors(w, http.StatusBadRequest, "failed to read request body: "+err.Error())
		return nil, false
	}
	body := map[string]any{}
	if buf.Len() == 0 {
		return body, true
	}
	dec := json.NewDecoder(&buf)
	dec.UseNumber()
	if err := dec.Decode(&body); err != nil {
		writeErrors(w, http.StatusBadRequest, "failed to parse JSON input: "+err.Error())
		return nil, false
	}
	return body, true
}

// envelope is Vault's response wrapper
// (https://developer.hashicorp.com/vault/api-docs#http-status-codes shows
// error bodies; every sample response shows this shape).
type envelope struct {
	Data          any
	Warnings      []string
	LeaseDuration int
	// Auth is the "auth" object of logins and token creation.
	Auth map[string]any
	// MountType is "kv", "system", "token" or an auth method type; empty
	// means "kv".
	MountType string
}

func writeEnvelope(w http.ResponseWriter, status int, e envelope) {
	if e.MountType == "" {
		e.MountType = "kv"
	}
	var warnings, auth any
	if len(e.Warnings) > 0 {
		warnings = e.Warnings
	}
	if e.Auth != nil {
		auth = e.Auth
	}
	writeJSON(w, status, map[string]any{
		"request_id":     newUUID(),
		"lease_id":       "",
		"renewable":      false,
		"lease_duration": e.LeaseDuration,
		"data":           e.Data,
		"wrap_info":      nil,
		"warnings":       warnings,
		"auth":           auth,
		"mount_type":     e.MountType,
	})
}

// writeErrors writes Vault's error body {"errors":[...]}; no messages gives
// {"errors":[]}, which is how Vault answers a read of a missing key.
func writeErrors(w http.ResponseWriter, status int, msgs ...string) {
	if msgs == nil {
		msgs = []string{}
	}
	writeJSON(w, status, map[string]any{"errors": msgs})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"errors":["internal error encoding the response"]}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
