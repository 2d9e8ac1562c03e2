package vaultserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
)

// Auth method types this server implements.
const (
	authAppRole    = "approle"
	authKubernetes = "kubernetes"
)

// authMount is one enabled auth method.
type authMount struct {
	path, typ, accessor string
	roles               map[string]*role
	kube                *kubeConfig // kubernetes only
}

// role is an AppRole or Kubernetes auth role with the token parameters both
// share (https://developer.hashicorp.com/vault/api-docs/auth/approle#parameters).
type role struct {
	name      string
	policies  []string
	noDefault bool
	ttl       time.Duration
	maxTTL    time.Duration

	// AppRole
	roleID       string
	bindSecretID bool
	secretIDTTL  time.Duration
	secretIDUses int
	secretIDs    map[string]*secretID

	// Kubernetes
	boundNames      []string
	boundNamespaces []string
	audience        string
}

type secretID struct {
	accessor string
	expire   time.Time // zero: never
	usesLeft int       // 0: unlimited
}

// kubeConfig is auth/<mount>/config of the Kubernetes method.
type kubeConfig struct {
	host, caPEM, reviewerJWT string
}

// enableAuthLocked enables an auth method at path. Caller holds s.mu.
func (s *Server) enableAuthLocked(path, typ string) error {
	path = strings.Trim(path, "/")
	if path == "" || strings.HasPrefix(path, "token") {
		return fmt.Errorf("invalid auth path %q", path)
	}
	if typ != authAppRole && typ != authKubernetes {
		return fmt.Errorf("plugin not found in the catalog: %s (vaultserver serves approle and kubernetes)", typ)
	}
	if _, dup := s.auths[path]; dup {
		return fmt.Errorf("path is already in use at %s/", path)
	}
	s.auths[path] = &authMount{path: path, typ: typ, accessor: "auth_" + typ + "_" + newUUID()[:8], roles: map[string]*role{}}
	return nil
}

// findAuth returns the auth mount p is below and p relative to it, or nil.
func (s *Server) findAuth(p string) (*authMount, string) {
	rest, ok := strings.CutPrefix(p, "auth/")
	if !ok {
		return nil, ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var best *authMount
	for path, a := range s.auths {
		if (rest == path || strings.HasPrefix(rest, path+"/")) && (best == nil || len(path) > len(best.path)) {
			best = a
		}
	}
	if best == nil {
		return nil, ""
	}
	return best, strings.Trim(strings.TrimPrefix(rest, best.path), "/")
}

// authMethodAPI routes auth/<mount>/<rel> other than login for an
// authenticated principal.
func (s *Server) authMethodAPI(w http.ResponseWriter, r *http.Request, a *authMount, rel string, who *principal) {
	api := "auth/" + a.path + "/" + rel
	need := capUpdate
	switch r.Method {
	case http.MethodGet:
		need = capRead
	case http.MethodDelete:
		need = capDelete
	}
	if !who.can(api, need) && !(need == capUpdate && who.can(api, capCreate)) {
		writeErrors(w, http.StatusForbidden, msgPermissionDenied)
		return
	}
	parts := strings.Split(rel, "/")
	switch {
	case a.typ == authKubernetes && rel == "config":
		s.kubeConfigAPI(w, r, a)
	case len(parts) >= 2 && parts[0] == "role":
		s.roleAPI(w, r, a, parts[1], strings.Join(parts[2:], "/"))
	default:
		writeErrors(w, http.StatusNotFound, fmt.Sprintf("no handler for route %q. route entry not found.", api))
	}
}

// roleAPI: auth/<mount>/role/<name> create/update (POST), read (GET),
// delete; for AppRole also role/<name>/role-id (GET, POST) and
// role/<name>/secret-id (POST).
// AppRole: https://developer.hashicorp.com/vault/api-docs/auth/approle
// Kubernetes: https://developer.hashicorp.com/vault/api-docs/auth/kubernetes#create-update-role
func (s *Server) roleAPI(w http.ResponseWriter, r *http.Request, a *authMount, name, sub string) {
	s.mu.Lock()
	ro := a.roles[name]
	s.mu.Unlock()
	switch {
	case sub == "" && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if ro == nil {
			ro = &role{name: name, bindSecretID: true, secretIDs: map[string]*secretID{}, roleID: newUUID()}
			a.roles[name] = ro
		}
		if err := ro.update(body, a.typ); err != nil {
			writeErrors(w, http.StatusBadRequest, err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case ro == nil:
		writeErrors(w, http.StatusNotFound)
	case sub == "" && r.Method == http.MethodGet:
		s.mu.Lock()
		data := map[string]any{
			"token_policies": ro.policies, "policies": ro.policies, "token_no_default_policy": ro.noDefault,
			"token_ttl": int(ro.ttl / time.Second), "token_max_ttl": int(ro.maxTTL / time.Second),
		}
		if a.typ == authAppRole {
			data["bind_secret_id"] = ro.bindSecretID
			data["secret_id_ttl"] = int(ro.secretIDTTL / time.Second)
			data["secret_id_num_uses"] = ro.secretIDUses
		} else {
			data["bound_service_account_names"] = ro.boundNames
			data["bound_service_account_namespaces"] = ro.boundNamespaces
			data["audience"] = ro.audience
		}
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: a.typ})
	case sub == "" && r.Method == http.MethodDelete:
		s.mu.Lock()
		delete(a.roles, name)
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case a.typ == authAppRole && sub == "role-id" && r.Method == http.MethodGet:
		s.mu.Lock()
		id := ro.roleID
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: map[string]any{"role_id": id}, MountType: a.typ})
	case a.typ == authAppRole && sub == "role-id":
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		id, _ := body["role_id"].(string)
		if id == "" {
			writeErrors(w, http.StatusBadRequest, "missing role_id")
			return
		}
		s.mu.Lock()
		ro.roleID = id
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case a.typ == authAppRole && sub == "secret-id" && (r.Method == http.MethodPost || r.Method == http.MethodPut):
		s.mu.Lock()
		id := &secretID{accessor: newUUID(), usesLeft: ro.secretIDUses}
		if ro.secretIDTTL > 0 {
			id.expire = s.opts.Now().Add(ro.secretIDTTL)
		}
		value := newUUID()
		ro.secretIDs[value] = id
		data := map[string]any{"secret_id": value, "secret_id_accessor": id.accessor,
			"secret_id_ttl": int(ro.secretIDTTL / time.Second), "secret_id_num_uses": ro.secretIDUses}
		s.mu.Unlock()
		writeEnvelope(w, http.StatusOK, envelope{Data: data, MountType: a.typ})
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// update applies role parameters from a request body. Caller holds s.mu.
func (ro *role) update(body map[string]any, typ string) error {
	if v, ok := body["token_policies"]; ok {
		p, err := stringList(v)
		if err != nil {
			return fmt.Errorf("invalid token_policies: %w", err)
		}
		ro.policies = p
	} else if v, ok := body["policies"]; ok {
		p, err := stringList(v)
		if err != nil {
			return fmt.Errorf("invalid policies: %w", err)
		}
		ro.policies = p
	}
	if v, ok := body["token_no_default_policy"].(bool); ok {
		ro.noDefault = v
	}
	for key, dst := range map[string]*time.Duration{"token_ttl": &ro.ttl, "token_max_ttl": &ro.maxTTL, "secret_id_ttl": &ro.secretIDTTL} {
		if v, ok := body[key]; ok {
			d, err := duration(v)
			if err != nil {
				return fmt.Errorf("invalid %s: %w", key, err)
			}
			*dst = d
		}
	}
	switch typ {
	case authAppRole:
		if v, ok := body["bind_secret_id"].(bool); ok {
			ro.bindSecretID = v
		}
		if v, ok := body["secret_id_num_uses"]; ok {
			var n int
			if _, err := fmt.Sscan(fmt.Sprint(v), &n); err != nil || n < 0 {
				return fmt.Errorf("invalid secret_id_num_uses %v", v)
			}
			ro.secretIDUses = n
		}
	case authKubernetes:
		var err error
		if ro.boundNames, err = stringList(body["bound_service_account_names"]); err != nil {
			return fmt.Errorf("invalid bound_service_account_names: %w", err)
		}
		if ro.boundNamespaces, err = stringList(body["bound_service_account_namespaces"]); err != nil {
			return fmt.Errorf("invalid bound_service_account_namespaces: %w", err)
		}
		if len(ro.boundNames) == 0 || len(ro.boundNamespaces) == 0 {
			return fmt.Errorf(`"bound_service_account_names" and "bound_service_account_namespaces" can not both be empty`)
		}
		ro.audience, _ = body["audience"].(string)
	}
	return nil
}

// kubeConfigAPI: POST/GET auth/<mount>/config with kubernetes_host,
// kubernetes_ca_cert and token_reviewer_jwt (never returned on read).
// https://developer.hashicorp.com/vault/api-docs/auth/kubernetes#configure-method
func (s *Server) kubeConfigAPI(w http.ResponseWriter, r *http.Request, a *authMount) {
	switch r.Method {
	case http.MethodPost, http.MethodPut:
		body, ok := readBody(w, r)
		if !ok {
			return
		}
		c := &kubeConfig{}
		c.host, _ = body["kubernetes_host"].(string)
		c.caPEM, _ = body["kubernetes_ca_cert"].(string)
		c.reviewerJWT, _ = body["token_reviewer_jwt"].(string)
		if c.host == "" {
			writeErrors(w, http.StatusBadRequest, "no host provided")
			return
		}
		if c.caPEM != "" && !x509.NewCertPool().AppendCertsFromPEM([]byte(c.caPEM)) {
			writeErrors(w, http.StatusBadRequest, "kubernetes_ca_cert holds no PEM certificate")
			return
		}
		s.mu.Lock()
		a.kube = c
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case http.MethodGet:
		s.mu.Lock()
		c := a.kube
		s.mu.Unlock()
		if c == nil {
			writeErrors(w, http.StatusNotFound)
			return
		}
		writeEnvelope(w, http.StatusOK, envelope{Data: map[string]any{"kubernetes_host": c.host, "kubernetes_ca_cert": c.caPEM}, MountType: a.typ})
	default:
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
	}
}

// login: POST/PUT auth/<mount>/login, unauthenticated.
func (s *Server) login(w http.ResponseWriter, r *http.Request, a *authMount) {
	if r.Method != http.MethodPost && r.Method != http.MethodPut {
		writeErrors(w, http.StatusMethodNotAllowed, "unsupported operation")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var (
		t      *token
		status int
		msg    string
	)
	if a.typ == authAppRole {
		t, status, msg = s.appRoleLogin(a, body)
	} else {
		t, status, msg = s.kubernetesLogin(r.Context(), a, body)
	}
	if t == nil {
		s.mu.Lock()
		s.counts["login-failed:"+a.path]++
		s.mu.Unlock()
		writeErrors(w, status, msg)
		return
	}
	s.mu.Lock()
	s.counts["login:"+a.path]++
	auth := t.authBlock(s.opts.Now())
	s.mu.Unlock()
	writeEnvelope(w, http.StatusOK, envelope{Auth: auth, MountType: a.typ})
}

// appRoleLogin checks role_id and secret_id ("Login with AppRole",
// https://developer.hashicorp.com/vault/api-docs/auth/approle#login-with-approle).
// Vault answers both an unknown role ID and a wrong or expired secret ID
// with 400 "invalid role or secret ID".
func (s *Server) appRoleLogin(a *authMount, body map[string]any) (*token, int, string) {
	roleID, _ := body["role_id"].(string)
	sid, _ := body["secret_id"].(string)
	if roleID == "" {
		return nil, http.StatusBadRequest, "missing role_id"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ro *role
	for _, x := range a.roles {
		if x.roleID == roleID {
			ro = x
		}
	}
	const invalid = "invalid role or secret ID"
	if ro == nil {
		return nil, http.StatusBadRequest, invalid
	}
	if ro.bindSecretID {
		id := ro.secretIDs[sid]
		now := s.opts.Now()
		if sid == "" || id == nil || (!id.expire.IsZero() && !now.Before(id.expire)) {
			return nil, http.StatusBadRequest, invalid
		}
		if id.usesLeft > 0 {
			id.usesLeft--
			if id.usesLeft == 0 {
				delete(ro.secretIDs, sid)
			}
		}
	}
	return s.issueLocked(issue{policies: ro.policies, noDefault: ro.noDefault, ttl: ro.ttl, maxTTL: ro.maxTTL, renewable: true,
		displayName: a.path, path: "auth/" + a.path + "/login", meta: map[string]string{"role_name": ro.name}, orphan: true}), 0, ""
}

// kubernetesLogin validates the service account JWT with the configured
// kube-apiserver's TokenReview API and checks the bound service account
// names and namespaces of the role, as Vault's Kubernetes auth method does
// ("Login", https://developer.hashicorp.com/vault/api-docs/auth/kubernetes#login;
// TokenReview: https://kubernetes.io/docs/reference/kubernetes-api/authentication-resources/token-review-v1/).
// With no token_reviewer_jwt configured, the login JWT itself authenticates
// the review, as Vault does outside a pod.
func (s *Server) kubernetesLogin(ctx context.Context, a *authMount, body map[string]any) (*token, int, string) {
	name, _ := body["role"].(string)
	jwt, _ := body["jwt"].(string)
	if name == "" {
		return nil, http.StatusBadRequest, "missing role"
	}
	if jwt == "" {
		return nil, http.StatusBadRequest, "missing jwt"
	}
	s.mu.Lock()
	ro := a.roles[name]
	cfg := a.kube
	s.mu.Unlock()
	if ro == nil {
		return nil, http.StatusBadRequest, fmt.Sprintf("invalid role name %q", name)
	}
	if cfg == nil {
		return nil, http.StatusBadRequest, "could not load backend configuration"
	}
	user, err := s.tokenReview(ctx, cfg, jwt, ro.audience)
	if err != nil {
		s.mu.Lock()
		s.loginErrors = append(s.loginErrors, err.Error())
		s.mu.Unlock()
		return nil, http.StatusForbidden, msgPermissionDenied
	}
	parts := strings.Split(user.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return nil, http.StatusForbidden, msgPermissionDenied
	}
	ns, sa := parts[2], parts[3]
	if !slices.Contains(ro.boundNames, "*") && !slices.Contains(ro.boundNames, sa) {
		return nil, http.StatusForbidden, "service account name not authorized"
	}
	if !slices.Contains(ro.boundNamespaces, "*") && !slices.Contains(ro.boundNamespaces, ns) {
		return nil, http.StatusForbidden, "namespace not authorized"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.issueLocked(issue{policies: ro.policies, noDefault: ro.noDefault, ttl: ro.ttl, maxTTL: ro.maxTTL, renewable: true,
		displayName: a.path + "-" + ns + "-" + sa, path: "auth/" + a.path + "/login", orphan: true,
		meta: map[string]string{"role": name, "service_account_name": sa, "service_account_namespace": ns, "service_account_uid": user.UID}}), 0, ""
}

// tokenReview POSTs a TokenReview for jwt and returns the authenticated
// user, or an error when the API server rejects the token.
func (s *Server) tokenReview(ctx context.Context, cfg *kubeConfig, jwt, audience string) (*authnv1.UserInfo, error) {
	review := authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: jwt}}
	review.APIVersion, review.Kind = "authentication.k8s.io/v1", "TokenReview"
	if audience != "" {
		review.Spec.Audiences = []string{audience}
	}
	b, err := json.Marshal(review)
	if err != nil {
		return nil, err
	}
	client := s.opts.TokenReviewClient
	if cfg.caPEM != "" {
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM([]byte(cfg.caPEM))
		client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	if client == nil {
		client = &http.Client{Timeout: 30 * time.Second}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(cfg.host, "/")+"/apis/authentication.k8s.io/v1/tokenreviews", bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	bearer := cfg.reviewerJWT
	if bearer == "" {
		bearer = jwt
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("tokenreview: %w", err)
	}
	defer resp.Body.Close()
	var out authnv1.TokenReview
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("tokenreview: status %d, undecodable body: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tokenreview: status %d", resp.StatusCode)
	}
	if !out.Status.Authenticated {
		return nil, fmt.Errorf("tokenreview: not authenticated: %s", out.Status.Error)
	}
	if audience != "" && !slices.Contains(out.Status.Audiences, audience) {
		return nil, fmt.Errorf("tokenreview: audience %q not in %v", audience, out.Status.Audiences)
	}
	return &out.Status.User, nil
}

// LoginErrors are the reasons of failed Kubernetes logins, which Vault hides
// behind "permission denied"; for test diagnostics.
func (s *Server) LoginErrors() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.loginErrors)
}
