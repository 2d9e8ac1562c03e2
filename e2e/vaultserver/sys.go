package vaultserver

import (
	"fmt"
	"maps"
	"net/http"
	"sort"
	"strings"
)

// sysAPI routes the sys/ endpoints beyond health and the mount lookup. It
// reports false when p is not one of them.
func (s *Server) sysAPI(w http.ResponseWriter, r *http.Request, p string, who *principal) bool {
	switch {
	case p == "sys/mounts":
		s.listMounts(w, r, who)
	case strings.HasPrefix(p, "sys/mounts/"):
		s.mountConfig(w, r, strings.Trim(strings.TrimPrefix(p, "sys/mounts/"), "/"), who)
	case p == "sys/auth":
		s.listAuth(w, r, who)
	case strings.HasPrefix(p, "sys/auth/"):
		s.authEnable(w, r, strings.Trim(strings.TrimPrefix(p, "sys/auth/"), "/"), who)
	case strings.HasPrefix(p, "sys/policies/acl/"):
		s.policyAPI(w, r, strings.TrimPrefix(p, "sys/policies/acl/"), p, who)
	case strings.HasPrefix(p, "sys/policy/"):
		s.policyAPI(w, r, strings.TrimPrefix(p, "sys/policy/"), p, who)
	case p == "sys/capabilities-self":
		s.capabilitiesSelf(w, r, who)
	default:
		return false
	}
	return true
}

// mountConfig: GET /v1/sys/mounts/<path> describes one mount ("Get the
// configuration of a secret engine"), POST enables a KV mount
// ({"type":"kv","options":{"version":"2"}} or type "kv-v2"), DELETE disables
// it. Each needs the matching capability on sys/mounts/<path>.
// https://developer.hashicorp.com/vault/api-docs/system/mounts
func (s *Server) mountConfig(w http.ResponseWriter, r *http.Request, path string, who *principal) {
	api := "sys/mounts/" + path
	switch r.Method {
	case http.MethodGet:
		if !who.can(api, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		m := s.mounts[path]
		var info map[string]any
		if m != nil {
			info = mountInfo(m)
		}
		s.mu.Unlock()
		if info == nil {
			writeErrors(w, http.StatusBadRequest, fmt.Sprintf("No secret engine mount at %s/", path))
			return
		}
		writeEnvelope(w, http.StatusOK, envelope{Data: info, MountType: "system"})
	case http.MethodPost, http.MethodPut:
		if !who.can(api, capCreate) && !who.can(api, capUpdate) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		typ, _ := body["type"].(string)
		version := 1
		if opts, ok := body["options"].(map[string]any); ok && fmt.Sprint(opts["version"]) == "2" {
			version = 2
		}
		switch typ {
		case "kv":
		case "kv-v2":
			version = 2
		default:
			writeErrors(w, http.StatusBadRequest, fmt.Sprintf("plugin not found in the catalog: %s (vaultserver serves only kv)", typ))
			return
		}
		s.mu.Lock()
		err := s.addMountLocked(Mount{Path: path, Version: version})
		s.mu.Unlock()
		if err != nil {
			writeErrors(w, http.StatusBadRequest, fmt.Sprintf("path is already in use at %s/", path))
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		if !who.can(api, capDelete) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		delete(s.mounts, path)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// listAuth: GET /v1/sys/auth lists the enabled auth methods, token/ always.
// https://developer.hashicorp.com/vault/api-docs/system/auth#list-auth-methods
func (s *Server) listAuth(w http.ResponseWriter, r *http.Request, who *principal) {
	if r.Method != http.MethodGet {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	if !who.can("sys/auth", capRead) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	s.mu.Lock()
	data := map[string]any{"token/": map[string]any{"type": "token", "description": "token based credentials"}}
	for p, a := range s.auths {
		data[p+"/"] = map[string]any{"type": a.typ, "accessor": a.accessor, "description": ""}
	}
	s.mu.Unlock()
	writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: "system"})
}

// authEnable: POST /v1/sys/auth/<path> {"type":"approle"|"kubernetes"}
// enables an auth method, DELETE disables it; both need sudo.
// https://developer.hashicorp.com/vault/api-docs/system/auth#enable-auth-method
func (s *Server) authEnable(w http.ResponseWriter, r *http.Request, path string, who *principal) {
	api := "sys/auth/" + path
	switch r.Method {
	case http.MethodPost, http.MethodPut:
		if !who.can(api, capSudo) || (!who.can(api, capCreate) && !who.can(api, capUpdate)) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		typ, _ := body["type"].(string)
		s.mu.Lock()
		err := s.enableAuthLocked(path, typ)
		s.mu.Unlock()
		if err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		if !who.can(api, capSudo) || !who.can(api, capDelete) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		delete(s.auths, path)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// policyAPI: GET/PUT/POST/DELETE /v1/sys/policies/acl/<name> (and the older
// sys/policy/<name>); the body of a write is {"policy": "<HCL>"}. The
// "root" policy cannot be changed and "default" is built in.
// https://developer.hashicorp.com/vault/api-docs/system/policies#create-update-acl-policy
func (s *Server) policyAPI(w http.ResponseWriter, r *http.Request, name, api string, who *principal) {
	name = strings.Trim(name, "/")
	switch r.Method {
	case http.MethodGet:
		if !who.can(api, capRead) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		text, ok := s.policyText[name]
		s.mu.Unlock()
		if !ok {
			writeErrors(w, http.StatusNotFound)
			return
		}
		writeEnvelope(w, http.StatusOK, envelope{Data: map[string]any{"name": name, "policy": text, "rules": text}, MountType: "system"})
	case http.MethodPut, http.MethodPost:
		if !who.can(api, capCreate) && !who.can(api, capUpdate) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		if name == "root" || name == "default" {
			writeErrors(w, http.StatusBadRequest, fmt.Sprintf("cannot update %q policy (vaultserver builds it in)", name))
			return
		}
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		text, _ := body["policy"].(string)
		if text == "" {
			text, _ = body["rules"].(string)
		}
		if err := s.SetPolicy(name, text); err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case http.MethodDelete:
		if !who.can(api, capDelete) {
			writeErrors(w, http.StatusForbidden, msgPermissionDenied)
			return
		}
		s.mu.Lock()
		delete(s.policies, name)
		delete(s.policyText, name)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// capabilitiesSelf: POST /v1/sys/capabilities-self {"paths":[...]} (or
// "path") answers the token's capabilities on each path, under the path's
// name and, merged, under "capabilities".
// https://developer.hashicorp.com/vault/api-docs/system/capabilities-self
func (s *Server) capabilitiesSelf(w http.ResponseWriter, r *http.Request, who *principal) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	if !who.can("sys/capabilities-self", capUpdate) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	paths, err := stringList(body["paths"])
	if err == nil && len(paths) == 0 {
		paths, err = stringList(body["path"])
	}
	if err != nil || len(paths) == 0 {
		writeErrors(w, http.StatusBadRequest, "missing paths")
		return
	}
	data := map[string]any{}
	all := map[string]bool{}
	for _, p := range paths {
		caps := who.capabilities(strings.Trim(p, "/"))
		data[p] = caps
		for _, c := range caps {
			all[c] = true
		}
	}
	merged := make([]string, 0, len(all))
	for c := range maps.Keys(all) {
		merged = append(merged, c)
	}
	sort.Strings(merged)
	data["capabilities"] = merged
	writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: "system"})
}
