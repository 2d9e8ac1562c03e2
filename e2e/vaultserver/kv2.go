package vaultserver

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KV v2 ("KV secrets engine - version 2 (API)",
// https://developer.hashicorp.com/vault/api-docs/secret/kv/kv-v2). The
// behaviours below follow that page; where it is silent, the plugin's
// source (hashicorp/vault-plugin-secrets-kv path_data.go, path_metadata.go,
// path_delete.go, path_destroy.go, path_config.go) decides, and the issue
// that shows the behaviour in the field is named beside it.

// kv2Data: read (GET, optional ?version=N), create/update (POST or PUT with
// {"data":{...},"options":{"cas":N}}) and soft delete of the latest
// version (DELETE).
//
// Read (#read-secret-version): a missing key, a key with metadata but no
// version yet, and a missing version answer 404 {"errors":[]}. A version
// that is soft-deleted (its deletion_time has come, also through
// delete_version_after) or destroyed answers 404 with {"data": {"data":
// null, "metadata": {...}}}: the metadata carries the deletion_time or
// destroyed=true and the version number, and current_version does not roll
// back (hashicorp/vault#24499, #10641, #4935).
//
// Write (#create-update-secret): needs "create" when the key has no version
// and "update" otherwise. With options.cas the write succeeds only if cas
// equals current_version, which counts soft-deleted and destroyed versions
// (so cas=0 fails after a soft delete, hashicorp/vault#15676); else 400
// "check-and-set parameter did not match the current version". Without
// options.cas, a mount config or key metadata with cas_required=true
// answers 400 "check-and-set parameter required for this call". A new
// version gets deletion_time = created + delete_version_after when the key
// or the mount sets one (the key's value, capped by the mount's).
//
// Delete latest (#delete-latest-version-of-secret): needs "delete" on
// <mount>/data/<path>; 204 also when there is nothing to delete.
func (s *Server) kv2Data(w http.ResponseWriter, r *http.Request, m *mount, path string, who *principal) {
	path = strings.Trim(path, "/")
	if path == "" {
		writeErrors(w, http.StatusNotFound, "unsupported path")
		return
	}
	apiPath := m.Path + "/data/" + path
	switch r.Method {
	case http.MethodGet:
		if !who.can(apiPath, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		want := 0
		if q := r.URL.Query().Get("version"); q != "" {
			n, err := strconv.Atoi(q)
			if err != nil || n < 0 {
				writeErrors(w, http.StatusBadRequest, fmt.Sprintf("error converting input %s for field %q: invalid version", q, "version"))
				return
			}
			want = n
		}
		s.mu.Lock()
		e := m.kv2[path]
		if e == nil || len(e.versions) == 0 || want > len(e.versions) {
			s.mu.Unlock()
			writeErrors(w, http.StatusNotFound)
			return
		}
		if want == 0 {
			want = len(e.versions)
		}
		v := e.versions[want-1]
		meta := versionMeta(e, v, want)
		var data any
		status := http.StatusOK
		if v.gone(s.opts.Now()) {
			status = http.StatusNotFound
		} else {
			data = maps.Clone(v.data)
		}
		s.mu.Unlock()
		writeEnvelope(w, status, envelope{Data: map[string]any{"data": data, "metadata": meta}})

	case http.MethodPost, http.MethodPut:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		data, ok := body["data"].(map[string]any)
		if !ok {
			writeErrors(w, http.StatusBadRequest, msgNoData)
			return
		}
		cas, hasCAS, err := casOption(body["options"])
		if err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}

		s.mu.Lock()
		e := m.kv2[path]
		current := 0
		if e != nil {
			current = len(e.versions)
		}
		need := capCreate
		if current > 0 {
			need = capUpdate
		}
		if !who.can(apiPath, need) {
			s.mu.Unlock()
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		switch {
		case hasCAS && cas != current:
			s.mu.Unlock()
			writeErrors(w, http.StatusBadRequest, msgCASMismatch)
			return
		case !hasCAS && (m.config.casRequired || (e != nil && e.settings.casRequired)):
			s.mu.Unlock()
			writeErrors(w, http.StatusBadRequest, msgCASRequired)
			return
		}
		now := s.opts.Now().UTC()
		if e == nil {
			e = &entry{created: now}
			m.kv2[path] = e
		}
		v := &version{data: data, created: now}
		if ttl := effectiveDeleteAfter(m.config.deleteVersionAfter, e.settings.deleteVersionAfter); ttl > 0 {
			v.deleted = now.Add(ttl)
		}
		e.versions = append(e.versions, v)
		e.updated = now
		meta := versionMeta(e, v, len(e.versions))
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: meta})

	case http.MethodDelete:
		if !who.can(apiPath, capDelete) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		if e := m.kv2[path]; e != nil && len(e.versions) > 0 {
			now := s.opts.Now().UTC()
			if v := e.versions[len(e.versions)-1]; !v.gone(now) {
				v.deleted = now
				e.updated = now
			}
		}
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)

	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// effectiveDeleteAfter is the delete_version_after a new version gets: the
// key's when set, unless the mount's is shorter ("If the value is greater
// than the backend's delete_version_after, the backend's
// delete_version_after will be used", #create-update-metadata).
func effectiveDeleteAfter(mountTTL, keyTTL time.Duration) time.Duration {
	switch {
	case keyTTL <= 0:
		return mountTTL
	case mountTTL > 0 && mountTTL < keyTTL:
		return mountTTL
	}
	return keyTTL
}

// kv2Versions: POST /v1/<mount>/delete/<path> soft-deletes, POST
// undelete/<path> restores, and PUT or POST destroy/<path> permanently
// removes the data of {"versions":[...]} (#delete-secret-versions,
// #undelete-secret-versions, #destroy-secret-versions). Each needs "update"
// on its own API path, answers 204, ignores versions that do not exist,
// and 400 "no version number provided" without versions. Undelete clears
// deletion_time (also one set by delete_version_after) but cannot bring
// back a destroyed version; delete leaves destroyed versions as they are.
func (s *Server) kv2Versions(w http.ResponseWriter, r *http.Request, m *mount, op, path string, who *principal) {
	path = strings.Trim(path, "/")
	if path == "" {
		writeErrors(w, http.StatusNotFound, "unsupported path")
		return
	}
	// The docs show POST for delete/undelete and PUT for destroy; Vault
	// routes both methods to the same update operation.
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	if !who.can(m.Path+"/"+op+"/"+path, capUpdate) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	nums, err := intList(body["versions"])
	if err != nil {
		writeErrors(w, http.StatusBadRequest, err.Error())
		return
	}
	if len(nums) == 0 {
		writeErrors(w, http.StatusBadRequest, msgNoVersions)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := m.kv2[path]
	if e == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	now := s.opts.Now().UTC()
	for _, n := range nums {
		if n < 1 || n > len(e.versions) {
			continue
		}
		v := e.versions[n-1]
		switch op {
		case "delete":
			if !v.gone(now) {
				v.deleted = now
			}
		case "undelete":
			if !v.destroyed {
				v.deleted = time.Time{}
			}
		case "destroy":
			v.destroyed, v.data = true, nil
		}
	}
	e.updated = now
	w.WriteHeader(http.StatusNoContent)
}

// kv2Metadata: GET /v1/<mount>/metadata/<path> (#read-secret-metadata;
// 404 {"errors":[]} when the key does not exist), POST or PUT
// (#create-update-metadata: max_versions, cas_required,
// delete_version_after, custom_metadata; only the fields sent change; it
// may create metadata before the first version; 204), DELETE
// (#delete-metadata-and-all-versions; 204 also when nothing is stored).
func (s *Server) kv2Metadata(w http.ResponseWriter, r *http.Request, m *mount, path string, who *principal) {
	path = strings.Trim(path, "/")
	apiPath := m.Path + "/metadata/" + path
	if path == "" {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	switch r.Method {
	case http.MethodDelete:
		if !who.can(apiPath, capDelete) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		delete(m.kv2, path)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)

	case http.MethodPost, http.MethodPut:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		e := m.kv2[path]
		need := capUpdate
		if e == nil {
			need = capCreate
		}
		if !who.can(apiPath, need) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		set := kvSettings{}
		if e != nil {
			set = e.settings
		}
		if err := applySettings(&set, body); err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}
		var custom map[string]any
		if raw, ok := body["custom_metadata"]; ok && raw != nil {
			cm, isMap := raw.(map[string]any)
			if !isMap {
				writeErrors(w, http.StatusBadRequest, "custom_metadata must be a map of strings")
				return
			}
			for k, v := range cm {
				if _, isString := v.(string); !isString {
					writeErrors(w, http.StatusBadRequest, fmt.Sprintf("custom_metadata value of %q is not a string", k))
					return
				}
			}
			custom = maps.Clone(cm)
		}
		now := s.opts.Now().UTC()
		if e == nil {
			e = &entry{created: now}
			m.kv2[path] = e
		}
		e.settings, e.updated = set, now
		if custom != nil {
			e.customMetadata = custom
		}
		w.WriteHeader(http.StatusNoContent)

	case http.MethodGet:
		if !who.can(apiPath, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		e := m.kv2[path]
		if e == nil {
			s.mu.Unlock()
			writeErrors(w, http.StatusNotFound)
			return
		}
		versions := make(map[string]any, len(e.versions))
		for i, v := range e.versions {
			meta := versionMeta(e, v, i+1)
			delete(meta, "version")
			delete(meta, "custom_metadata")
			versions[strconv.Itoa(i+1)] = meta
		}
		data := map[string]any{
			"cas_required":         e.settings.casRequired,
			"created_time":         stamp(e.created),
			"current_version":      len(e.versions),
			"custom_metadata":      customOrNil(e.customMetadata),
			"delete_version_after": e.settings.deleteVersionAfter.String(),
			"max_versions":         e.settings.maxVersions,
			"oldest_version":       0,
			"updated_time":         stamp(e.updated),
			"versions":             versions,
		}
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: data})

	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// kv2Config: GET /v1/<mount>/config (needs "read") and POST (needs
// "update"; max_versions, cas_required, delete_version_after; only the
// fields sent change; 204) (#configure-the-kv-engine,
// #read-kv-engine-configuration).
func (s *Server) kv2Config(w http.ResponseWriter, r *http.Request, m *mount, who *principal) {
	apiPath := m.Path + "/config"
	switch r.Method {
	case http.MethodGet:
		if !who.can(apiPath, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		c := m.config
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: map[string]any{
			"cas_required": c.casRequired, "delete_version_after": c.deleteVersionAfter.String(), "max_versions": c.maxVersions,
		}})
	case http.MethodPost, http.MethodPut:
		if !who.can(apiPath, capUpdate) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		c := m.config
		if err := applySettings(&c, body); err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}
		m.config = c
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// applySettings sets the fields of body that are present.
func applySettings(set *kvSettings, body map[string]any) error {
	if raw, ok := body["max_versions"]; ok {
		n, err := intValue(raw)
		if err != nil || n < 0 {
			return fmt.Errorf("error converting input %v for field \"max_versions\"", raw)
		}
		set.maxVersions = n
	}
	if raw, ok := body["cas_required"]; ok {
		switch t := raw.(type) {
		case bool:
			set.casRequired = t
		case string:
			b, err := strconv.ParseBool(t)
			if err != nil {
				return fmt.Errorf("error converting input %q for field \"cas_required\"", t)
			}
			set.casRequired = b
		default:
			return fmt.Errorf("error converting input %v for field \"cas_required\"", raw)
		}
	}
	if raw, ok := body["delete_version_after"]; ok {
		d, err := durationValue(raw)
		if err != nil {
			return err
		}
		set.deleteVersionAfter = d
	}
	return nil
}

// versionMeta is the per-version metadata KV v2 returns on reads and
// writes; custom_metadata is the key's.
func versionMeta(e *entry, v *version, n int) map[string]any {
	return map[string]any{
		"created_time":    stamp(v.created),
		"custom_metadata": customOrNil(e.customMetadata),
		"deletion_time":   stamp(v.deleted),
		"destroyed":       v.destroyed,
		"version":         n,
	}
}

func customOrNil(m map[string]any) any {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// stamp renders a time as Vault does: RFC 3339 with nanoseconds, "" for zero.
func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// casOption reads options.cas; Vault accepts a JSON number or a numeric
// string for int fields.
func casOption(raw any) (cas int, ok bool, err error) {
	opts, isMap := raw.(map[string]any)
	if raw == nil || !isMap {
		return 0, false, nil
	}
	v, present := opts["cas"]
	if !present || v == nil {
		return 0, false, nil
	}
	n, err := intValue(v)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("invalid cas value %v", v)
	}
	return n, true, nil
}

// intValue reads a JSON number or a numeric string.
func intValue(v any) (int, error) {
	var s string
	switch t := v.(type) {
	case json.Number:
		s = t.String()
	case string:
		s = t
	default:
		return 0, fmt.Errorf("not a number: %v", v)
	}
	return strconv.Atoi(s)
}

// intList reads "versions": a JSON array of numbers or numeric strings, or
// a comma-separated string (Vault's comma-int-slice field type).
func intList(v any) ([]int, error) {
	var items []any
	switch t := v.(type) {
	case nil:
		return nil, nil
	case []any:
		items = t
	case string:
		for _, p := range strings.Split(t, ",") {
			if p = strings.TrimSpace(p); p != "" {
				items = append(items, p)
			}
		}
	default:
		items = []any{t}
	}
	out := make([]int, 0, len(items))
	for _, it := range items {
		n, err := intValue(it)
		if err != nil {
			return nil, fmt.Errorf("error converting input %v for field \"versions\"", it)
		}
		out = append(out, n)
	}
	return out, nil
}

// durationValue reads a Go duration string ("3h25m19s") or a number of
// seconds, as Vault's duration fields accept.
func durationValue(v any) (time.Duration, error) {
	bad := fmt.Errorf("error converting input %v for field \"delete_version_after\"", v)
	switch t := v.(type) {
	case json.Number:
		n, err := t.Int64()
		if err != nil || n < 0 {
			return 0, bad
		}
		return time.Duration(n) * time.Second, nil
	case string:
		if n, err := strconv.ParseInt(t, 10, 64); err == nil && n >= 0 {
			return time.Duration(n) * time.Second, nil
		}
		d, err := time.ParseDuration(t)
		if err != nil || d < 0 {
			return 0, bad
		}
		return d, nil
	}
	return 0, bad
}
