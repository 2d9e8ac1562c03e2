package dataplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/waiters"
)

// Envoy's own answers (envoy source/common/http/utility.cc and the router
// filter's local replies): the body a client sees when no backend answers.
const (
	noHealthyUpstream = "no healthy upstream"
	connFailure       = "upstream connect error or disconnect/reset before headers. reset reason: connection failure"
)

// statusWriter remembers the status for the request log.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// ServeHTTP routes a request as the Gateway's HTTPRoutes do: /maas-api/...
// to maas-api, /v1/... by the body's model field (body-based routing, as
// the deployment README's base URL https://maas.<domain>/v1 implies), and
// /<namespace>/<model>/v1/... to one model (the MaaSModelRef endpoint).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() { s.record(r, sw.status) }()
	body, ok := s.readBody(sw, r)
	if !ok {
		return
	}
	p := r.URL.Path
	switch {
	case p == "/maas-api/health" && r.Method == http.MethodGet:
		s.health(sw, r)
	case p == "/maas-api/v1/api-keys" || p == "/maas-api/v1/api-keys/search" || strings.HasPrefix(p, "/maas-api/v1/api-keys/"):
		s.apiKeys(sw, r, body)
	case (p == "/v1/models" || p == "/maas-api/v1/models") && r.Method == http.MethodGet:
		s.models(sw, r, "", "")
	case p == "/v1/chat/completions" && r.Method == http.MethodPost:
		s.chat(sw, r, body, "", "")
	default:
		parts := strings.SplitN(strings.TrimPrefix(p, "/"), "/", 3)
		if len(parts) == 3 && parts[2] == "v1/chat/completions" && r.Method == http.MethodPost {
			s.chat(sw, r, body, parts[0], parts[1])
			return
		}
		if len(parts) == 3 && parts[2] == "v1/models" && r.Method == http.MethodGet {
			s.models(sw, r, parts[0], parts[1])
			return
		}
		// Envoy answers an unmatched route with an empty 404.
		sw.WriteHeader(http.StatusNotFound)
	}
}

// readBody reads the request body, refusing it with 413 above the body cap
// (an Envoy buffer limit; case B17, envoyproxy/ai-gateway#827).
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	limit := s.bodyLimit.Load()
	max := int64(8 << 20)
	if limit > 0 {
		max = limit
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return nil, false
	}
	if int64(len(b)) > max {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, "Payload Too Large")
		return nil, false
	}
	return b, true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeText(w http.ResponseWriter, status int, text string) {
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, text)
}

// openAIError writes an OpenAI-format error object.
func openAIError(w http.ResponseWriter, status int, typ, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": status}})
}

func (s *Server) get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	o, err := s.o.Reader.Get(ctx, gvk, ns, name)
	if err != nil {
		return nil
	}
	return o
}

func (s *Server) list(ctx context.Context, gvk schema.GroupVersionKind, ns, sel string) []*unstructured.Unstructured {
	l, _ := s.o.Reader.List(ctx, gvk, ns, sel)
	return l
}

func str(u *unstructured.Unstructured, path ...string) string {
	if u == nil {
		return ""
	}
	v, _, _ := unstructured.NestedString(u.Object, path...)
	return v
}

func condTrue(u *unstructured.Unstructured, typ string) bool {
	if u == nil {
		return false
	}
	c, ok := waiters.GetCondition(u, typ)
	return ok && c.Status == "True"
}

// maasAPIUp reports whether Deployment maas-api is Available: the Service
// behind the maas-api HTTPRoute then has ready endpoints.
func (s *Server) maasAPIUp(ctx context.Context) bool {
	d := s.get(ctx, verify.DeploymentGVK, s.inv.RHOAI.MaaSAPINamespace, "maas-api")
	return condTrue(d, "Available")
}

// authServiceUp reports whether the Kuadrant instance is Ready. While it is
// not (case B01: MissingDependency), the gateway cannot evaluate the
// AuthPolicies and token and API-key calls fail with AUTH_FAILURE
// (opendatahub-io/models-as-a-service#330).
//
// The Wasm shim calls Authorino through its authorization Service
// (kuadrant.authorinoService): with no ready endpoint behind it (the
// Authorino Deployment scaled to 0 or the Service gone while its operator
// is down, and Kuadrant's status stale) the call fails the same way.
func (s *Server) authServiceUp(ctx context.Context) bool {
	k := s.get(ctx, verify.KuadrantGVK, s.inv.Kuadrant.Namespace, s.inv.Kuadrant.Name)
	if !condTrue(k, "Ready") {
		return false
	}
	ns, name := s.inv.Kuadrant.Namespace, s.inv.Kuadrant.AuthorinoService
	if s.get(ctx, verify.ServiceGVK, ns, name) == nil {
		return false
	}
	for _, es := range s.list(ctx, verify.EndpointSliceGVK, ns, "kubernetes.io/service-name="+name) {
		eps, _, _ := unstructured.NestedSlice(es.Object, "endpoints")
		for _, e := range eps {
			em, _ := e.(map[string]any)
			c, _ := em["conditions"].(map[string]any)
			if ready, ok := c["ready"].(bool); !ok || ready {
				return true
			}
		}
	}
	return false
}

func authFailure(w http.ResponseWriter) {
	writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "AUTH_FAILURE", "message": "authorization service unavailable"})
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	// maas-api /health needs no authentication (docs/content/reference/
	// maas-api-overview.md).
	if !s.maasAPIUp(r.Context()) {
		writeText(w, http.StatusServiceUnavailable, noHealthyUpstream)
		return
	}
	// maas-api's /health itself checks nothing, but a maas-api that could
	// not connect to its database at start has exited (db.go): no
	// healthy upstream.
	if _, err := s.instance(r.Context()); err != nil {
		writeText(w, http.StatusServiceUnavailable, noHealthyUpstream)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "healthy"})
}

func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// unauthorized is Authorino's denial: 401, a WWW-Authenticate challenge
// and no body.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="maas"`)
	w.WriteHeader(http.StatusUnauthorized)
}

// dbFailure is maas-api's 500 for a failed statement (db.go: "error" is
// maas-api's text, "cause" its log line).
func dbFailure(w http.ResponseWriter, err error) {
	var de *dbError
	if !errors.As(err, &de) {
		de = &dbError{Public: "internal error", Cause: err.Error()}
	}
	writeJSON(w, http.StatusInternalServerError, struct {
		Cause string `json:"cause"`
		Error string `json:"error"`
	}{de.Cause, de.Public})
}

// caller authenticates the OpenShift token of a maas-api call and returns
// the running maas-api instance.
func (s *Server) caller(w http.ResponseWriter, r *http.Request) (verify.Identity, *maasAPIInstance, bool) {
	if !s.authServiceUp(r.Context()) {
		authFailure(w)
		return verify.Identity{}, nil, false
	}
	tok := bearer(r)
	var id verify.Identity
	if s.gw != nil {
		// The gateway's AuthPolicy covers maas-api's route: Authorino
		// authenticates the caller and maas-api reads who it is from the
		// headers it added (no header: maas-api refuses).
		gid, ok := s.gw.authorize(w, r, r.URL.Path)
		if !ok {
			return verify.Identity{}, nil, false
		}
		user, groups, _ := gid.maasCaller()
		if user == "" || strings.HasPrefix(tok, KeyPrefix) {
			unauthorized(w)
			return verify.Identity{}, nil, false
		}
		id = verify.Identity{User: user, Groups: groups}
	} else {
		if tok == "" || strings.HasPrefix(tok, KeyPrefix) {
			// Keys are minted with the OpenShift/OIDC token, never with a key
			// (api-key-management.md FAQ).
			unauthorized(w)
			return verify.Identity{}, nil, false
		}
		var err error
		if id, err = s.o.Auth.Authenticate(r.Context(), tok); err != nil {
			unauthorized(w)
			return verify.Identity{}, nil, false
		}
	}
	if !s.maasAPIUp(r.Context()) {
		writeText(w, http.StatusServiceUnavailable, noHealthyUpstream)
		return verify.Identity{}, nil, false
	}
	in, err := s.instance(r.Context())
	if err != nil {
		// maas-api exited at start (its database): no healthy upstream.
		writeText(w, http.StatusServiceUnavailable, noHealthyUpstream)
		return verify.Identity{}, nil, false
	}
	return id, in, true
}

func (s *Server) apiKeys(w http.ResponseWriter, r *http.Request, body []byte) {
	id, in, ok := s.caller(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	now := s.o.Now()
	p := r.URL.Path
	switch {
	case p == "/maas-api/v1/api-keys" && r.Method == http.MethodPost:
		s.mint(w, r, in, id, body)
	case (p == "/maas-api/v1/api-keys" && r.Method == http.MethodGet) || (p == "/maas-api/v1/api-keys/search" && r.Method == http.MethodPost):
		keys, err := s.listKeys(ctx, in, id.User, now)
		if err != nil {
			dbFailure(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": keys})
	case strings.HasPrefix(p, "/maas-api/v1/api-keys/"):
		kid := strings.TrimPrefix(p, "/maas-api/v1/api-keys/")
		k, err := s.getKey(ctx, in, kid, now)
		if err != nil {
			dbFailure(w, err)
			return
		}
		// Non-admins see and revoke only their own keys.
		if k == nil || k.Username != id.User {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "api key not found"})
			return
		}
		switch r.Method {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, k)
		case http.MethodDelete:
			if err := s.revokeKey(ctx, in, kid); err != nil {
				dbFailure(w, err)
				return
			}
			k, err := s.getKey(ctx, in, kid, now)
			if err != nil || k == nil {
				dbFailure(w, &dbError{Public: "Key revoked but failed to retrieve metadata", Cause: fmt.Sprint(err)})
				return
			}
			writeJSON(w, http.StatusOK, k)
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}

// mint creates a key: body {"name", "description", "expiresIn",
// "subscription"} → {"id", "key", "name", "subscription", "createdAt",
// "expiresAt", "ephemeral"} (api-key-management.md). The subscription must
// exist and be owned by the caller; omitted, the highest-priority owned
// subscription is chosen.
func (s *Server) mint(w http.ResponseWriter, r *http.Request, in *maasAPIInstance, id verify.Identity, body []byte) {
	var req struct {
		Name         string `json:"name"`
		Description  string `json:"description"`
		ExpiresIn    any    `json:"expiresIn"`
		Subscription string `json:"subscription"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid JSON body"})
		return
	}
	if req.Name == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "name is required"})
		return
	}
	ttl, err := parseExpiresIn(req.ExpiresIn)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if ttl > MaxExpiration {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "expiresIn exceeds the maximum of 90 days"})
		return
	}
	sub := s.pickSubscription(r.Context(), id, req.Subscription)
	if sub == nil {
		msg := "no accessible subscription"
		if req.Subscription != "" {
			msg = fmt.Sprintf("subscription %q not found or not accessible", req.Subscription)
		}
		writeJSON(w, http.StatusForbidden, map[string]string{"error": msg})
		return
	}
	k := &Key{Name: req.Name, Description: req.Description, Username: id.User, Groups: append([]string(nil), id.Groups...), Subscription: sub.GetName()}
	now := s.o.Now()
	plain, err := s.mintKey(r.Context(), in, k, now, ttl)
	if err != nil {
		dbFailure(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": k.ID, "key": plain, "name": k.Name, "subscription": k.Subscription,
		"createdAt": k.Created.UTC().Format(time.RFC3339), "expiresAt": k.Expires.UTC().Format(time.RFC3339), "ephemeral": false,
	})
}

// owns reports whether a subscription's owner (or a policy's subjects) at
// field includes the identity.
func owns(o *unstructured.Unstructured, field string, id verify.Identity) bool {
	users, _, _ := unstructured.NestedStringSlice(o.Object, "spec", field, "users")
	if id.User != "" && slices.Contains(users, id.User) {
		return true
	}
	groups, _, _ := unstructured.NestedSlice(o.Object, "spec", field, "groups")
	for _, g := range groups {
		m, _ := g.(map[string]any)
		if n, _ := m["name"].(string); n != "" && slices.Contains(id.Groups, n) {
			return true
		}
	}
	return false
}

func (s *Server) pickSubscription(ctx context.Context, id verify.Identity, name string) *unstructured.Unstructured {
	var best *unstructured.Unstructured
	var bestPrio int64
	for _, sub := range s.list(ctx, verify.MaaSSubscriptionGVK, s.inv.RHOAI.MaaSNamespace, "") {
		if !owns(sub, "owner", id) {
			continue
		}
		if name != "" {
			if sub.GetName() == name {
				return sub
			}
			continue
		}
		prio, _, _ := unstructured.NestedInt64(sub.Object, "spec", "priority")
		if best == nil || prio > bestPrio {
			best, bestPrio = sub, prio
		}
	}
	return best
}

// keyIdentity authenticates an sk-oai- key for a model call (Authorino
// calling maas-api's /internal/v1/api-keys/validate).
func (s *Server) keyIdentity(w http.ResponseWriter, r *http.Request) (*Key, bool) {
	if !s.authServiceUp(r.Context()) {
		authFailure(w)
		return nil, false
	}
	return s.keyRecord(w, r)
}

// keyRecord is maas-api's own reading of the request's sk-oai- key: its
// stored record (401 for anything else).
func (s *Server) keyRecord(w http.ResponseWriter, r *http.Request) (*Key, bool) {
	tok := bearer(r)
	if !strings.HasPrefix(tok, KeyPrefix) {
		// Model routes accept only API keys; an OpenShift token gets 401
		// (deployment README troubleshooting).
		unauthorized(w)
		return nil, false
	}
	// Authorino asks maas-api's /internal/v1/api-keys/validate; when
	// maas-api is down or its database fails, the call fails and the
	// request is denied.
	in, err := s.instance(r.Context())
	if err != nil {
		unauthorized(w)
		return nil, false
	}
	k, _, err := s.lookupKey(r.Context(), in, tok, s.o.Now())
	if err != nil || k == nil {
		unauthorized(w)
		return nil, false
	}
	return k, true
}

// modelRef finds the MaaSModelRef a request names: in ns when given, else
// among the key's subscription's models, else in any namespace.
func (s *Server) modelRef(ctx context.Context, sub *unstructured.Unstructured, ns, name string) *unstructured.Unstructured {
	if ns != "" {
		return s.get(ctx, verify.MaaSModelRefGVK, ns, name)
	}
	if sub != nil {
		for _, ref := range modelRefs(sub) {
			if ref.name == name {
				if m := s.get(ctx, verify.MaaSModelRefGVK, ref.namespace, name); m != nil {
					return m
				}
			}
		}
	}
	for _, m := range s.list(ctx, verify.MaaSModelRefGVK, "", "") {
		if m.GetName() == name {
			return m
		}
	}
	return nil
}

type ref struct {
	name, namespace string
	limits          []any
}

func modelRefs(o *unstructured.Unstructured) []ref {
	l, _, _ := unstructured.NestedSlice(o.Object, "spec", "modelRefs")
	var out []ref
	for _, x := range l {
		m, _ := x.(map[string]any)
		n, _ := m["name"].(string)
		ns, _ := m["namespace"].(string)
		lim, _ := m["tokenRateLimits"].([]any)
		out = append(out, ref{n, ns, lim})
	}
	return out
}

// authorized is the generated AuthPolicy's check: an Active MaaSAuthPolicy
// that lists the model grants one of the key's groups or its user (OR
// logic, MaaSAuthPolicy CRD spec.subjects). Groups are the snapshot taken
// when the key was minted.
func (s *Server) authorized(ctx context.Context, k *Key, model *unstructured.Unstructured) bool {
	id := verify.Identity{User: k.Username, Groups: k.Groups}
	for _, p := range s.list(ctx, verify.MaaSAuthPolicyGVK, s.inv.RHOAI.MaaSNamespace, "") {
		if str(p, "status", "phase") != "Active" {
			continue
		}
		for _, ref := range modelRefs(p) {
			if ref.name == model.GetName() && ref.namespace == model.GetNamespace() && owns(p, "subjects", id) {
				return true
			}
		}
	}
	return false
}

// limitsFor returns the key's subscription's token limits for model, and
// false when the subscription does not cover the caller for this model:
// the gateway then answers 429 ("authenticated but no subscription gives
// 429", opendatahub-io/models-as-a-service PR #429).
func (s *Server) limitsFor(ctx context.Context, k *Key, model *unstructured.Unstructured) (*unstructured.Unstructured, []limit, bool) {
	sub := s.get(ctx, verify.MaaSSubscriptionGVK, s.inv.RHOAI.MaaSNamespace, k.Subscription)
	if sub == nil || str(sub, "status", "phase") != "Active" || !owns(sub, "owner", verify.Identity{User: k.Username, Groups: k.Groups}) {
		return sub, nil, false
	}
	for _, ref := range modelRefs(sub) {
		if ref.name != model.GetName() || ref.namespace != model.GetNamespace() {
			continue
		}
		var out []limit
		for _, l := range ref.limits {
			lm, _ := l.(map[string]any)
			var n int64
			switch v := lm["limit"].(type) {
			case int64:
				n = v
			case float64:
				n = int64(v)
			}
			ws, _ := lm["window"].(string)
			win, err := parseWindow(ws)
			if err != nil || n <= 0 {
				continue
			}
			out = append(out, limit{Tokens: n, Window: win})
		}
		return sub, out, true
	}
	return sub, nil, false
}

// tooMany is Limitador's answer: 429 with a tiny body, at once.
func tooMany(w http.ResponseWriter) { writeText(w, http.StatusTooManyRequests, "Too Many Requests\n") }

func (s *Server) models(w http.ResponseWriter, r *http.Request, ns, name string) {
	var k *Key
	var ok bool
	if s.gw != nil {
		k, ok = s.gatewayCaller(w, r, r.URL.Path)
		if ok && ns == "" {
			// Past the gateway, maas-api's own listing reads the key's
			// record itself (owner, groups snapshot, bound subscription)
			// and answers API keys only (an OpenShift token gets 401,
			// deployment README troubleshooting). It does not rely on
			// the X-MaaS-* headers here: on a path that names no model
			// the policy's identity filter fails (subscription-info was
			// not fetched), and Authorino then cancels the response
			// items of the same priority that have not run yet
			// (authorino v0.27.0 pkg/service/auth_pipeline.go
			// evaluateResponseConfigs, evaluateAllAuthConfigs), so which
			// headers arrive varies from call to call.
			k, ok = s.keyRecord(w, r)
		}
	} else {
		k, ok = s.keyIdentity(w, r)
	}
	if !ok {
		return
	}
	ctx := r.Context()
	sub := s.get(ctx, verify.MaaSSubscriptionGVK, s.inv.RHOAI.MaaSNamespace, k.Subscription)
	// An API key lists only the models of the subscription bound to it,
	// and only those the caller may call (model-listing-flow.md).
	var data []any
	if sub != nil {
		for _, ref := range modelRefs(sub) {
			if ns != "" && (ref.namespace != ns || ref.name != name) {
				continue
			}
			m := s.get(ctx, verify.MaaSModelRefGVK, ref.namespace, ref.name)
			// A path-routed listing's access was Authorino's; maas-api's
			// own listing filters by the caller's access itself.
			if m == nil || ((s.gw == nil || ns == "") && !s.authorized(ctx, k, m)) {
				continue
			}
			data = append(data, map[string]any{
				"id": m.GetName(), "object": "model", "created": m.GetCreationTimestamp().Unix(),
				"owned_by": m.GetNamespace(), "url": str(m, "status", "endpoint"),
				"ready":         str(m, "status", "phase") == "Ready",
				"subscriptions": []any{map[string]any{"name": sub.GetName()}},
			})
		}
	}
	if data == nil {
		data = []any{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}

// chatRequest is the part of an OpenAI chat completion request the fake
// model reads.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	MaxTokens *int `json:"max_tokens"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request, body []byte, ns, name string) {
	if s.gw != nil {
		s.chatViaGateway(w, r, body, ns, name)
		return
	}
	k, ok := s.keyIdentity(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON in request body")
		return
	}
	if name == "" {
		name = req.Model
	}
	if name == "" {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "model is required")
		return
	}
	sub := s.get(ctx, verify.MaaSSubscriptionGVK, s.inv.RHOAI.MaaSNamespace, k.Subscription)
	model := s.modelRef(ctx, sub, ns, name)
	if model == nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("model %q not found", name))
		return
	}
	if !s.authorized(ctx, k, model) {
		// Authorino's deny: 403 with no body.
		w.WriteHeader(http.StatusForbidden)
		return
	}
	s.serveChat(w, r, req, k, model)
}

// chatViaGateway is chat with the auth decision Authorino's: the Wasm
// filter runs before the route's backend, so a path-routed call is asked
// about first; a body-routed one (/v1/chat/completions) first has its
// model resolved from the body, as the routing extension does, and is
// asked about as a call to that model's path with the
// X-Gateway-Model-Name header it sets.
func (s *Server) chatViaGateway(w http.ResponseWriter, r *http.Request, body []byte, ns, name string) {
	ctx := r.Context()
	var req chatRequest
	badJSON := json.Unmarshal(body, &req) != nil
	path := r.URL.Path
	if ns == "" {
		if badJSON || req.Model == "" {
			openAIError(w, http.StatusBadRequest, "invalid_request_error", "model is required")
			return
		}
		m := s.modelRef(ctx, nil, "", req.Model)
		if m == nil {
			openAIError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("model %q not found", req.Model))
			return
		}
		ns, name = m.GetNamespace(), m.GetName()
		path = "/" + ns + "/" + name + "/v1/chat/completions"
		r.Header.Set("X-Gateway-Model-Name", ns+"/"+name)
	}
	k, ok := s.gatewayCaller(w, r, path)
	if !ok {
		return
	}
	if badJSON {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid JSON in request body")
		return
	}
	model := s.get(ctx, verify.MaaSModelRefGVK, ns, name)
	if model == nil {
		openAIError(w, http.StatusNotFound, "invalid_request_error", fmt.Sprintf("model %q not found", name))
		return
	}
	s.serveChat(w, r, req, k, model)
}

// gatewayCaller is keyIdentity with Authorino deciding: the caller is the
// identity its answer carries.
func (s *Server) gatewayCaller(w http.ResponseWriter, r *http.Request, path string) (*Key, bool) {
	if !s.authServiceUp(r.Context()) {
		authFailure(w)
		return nil, false
	}
	id, ok := s.gw.authorize(w, r, path)
	if !ok {
		return nil, false
	}
	user, groups, sub := id.maasCaller()
	k := &Key{Username: id.User, Groups: id.Groups, Subscription: id.Subscription}
	if k.Username == "" {
		k.Username, k.Groups = user, groups
	}
	if k.Subscription == "" {
		k.Subscription = sub
	}
	return k, true
}

// serveChat is the part of a chat call after auth: the subscription's
// token limits (Limitador's stand-in), the model server, the answer.
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, req chatRequest, k *Key, model *unstructured.Unstructured) {
	ctx := r.Context()
	_, limits, covered := s.limitsFor(ctx, k, model)
	if !covered {
		tooMany(w)
		return
	}
	scope := fmt.Sprintf("%s/%s|%s/%s|%s", s.inv.RHOAI.MaaSNamespace, k.Subscription, model.GetNamespace(), model.GetName(), k.Username)
	now := s.o.Now()
	if _, over := s.limits.exceeded(scope, limits, now); over {
		tooMany(w)
		return
	}
	if msg := s.backendProblem(ctx, model); msg != "" {
		writeText(w, http.StatusServiceUnavailable, msg)
		return
	}
	resp, total := complete(req, model, now)
	s.limits.add(scope, limits, total, now)
	writeJSON(w, http.StatusOK, resp)
}

// backendProblem says why the model server cannot answer: the route is
// missing (the gateway has nothing to send it to), the switch says the
// server refuses connections, or the in-cluster Service behind the
// ExternalProvider has no ready endpoints (Envoy: "no healthy upstream").
func (s *Server) backendProblem(ctx context.Context, model *unstructured.Unstructured) string {
	if s.modelDown.Load() {
		return connFailure
	}
	emName := str(model, "spec", "modelRef", "name")
	em := s.get(ctx, verify.ExternalModelGVK, model.GetNamespace(), emName)
	if em == nil || str(em, "status", "phase") != "Ready" {
		return noHealthyUpstream
	}
	refs, _, _ := unstructured.NestedSlice(em.Object, "spec", "externalProviderRefs")
	for _, x := range refs {
		m, _ := x.(map[string]any)
		rm, _ := m["ref"].(map[string]any)
		pname, _ := rm["name"].(string)
		p := s.get(ctx, verify.ExternalProviderGVK, model.GetNamespace(), pname)
		if p == nil || str(p, "status", "phase") != "Ready" {
			continue
		}
		host := str(p, "spec", "endpoint")
		parts := strings.Split(host, ".")
		if len(parts) < 3 || parts[2] != "svc" {
			return "" // an external provider: reachable as far as the test knows
		}
		if s.get(ctx, verify.ServiceGVK, parts[1], parts[0]) == nil {
			continue
		}
		for _, es := range s.list(ctx, verify.EndpointSliceGVK, parts[1], "kubernetes.io/service-name="+parts[0]) {
			eps, _, _ := unstructured.NestedSlice(es.Object, "endpoints")
			for _, e := range eps {
				em, _ := e.(map[string]any)
				c, _ := em["conditions"].(map[string]any)
				if ready, ok := c["ready"].(bool); !ok || ready {
					return ""
				}
			}
		}
	}
	return noHealthyUpstream
}

// countTokens is the fake model's tokenizer: one token per
// whitespace-separated word.
func countTokens(s string) int { return len(strings.Fields(s)) }

func contentText(c any) string {
	switch x := c.(type) {
	case string:
		return x
	case []any:
		var parts []string
		for _, p := range x {
			m, _ := p.(map[string]any)
			if t, _ := m["text"].(string); t != "" {
				parts = append(parts, t)
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// complete is the tiny fake model: it echoes the last user message, cut to
// max_tokens words, and reports usage like llama.cpp's OpenAI server (3
// tokens of template overhead per message).
func complete(req chatRequest, model *unstructured.Unstructured, now time.Time) (map[string]any, int64) {
	prompt, last := 0, ""
	for _, m := range req.Messages {
		t := contentText(m.Content)
		prompt += countTokens(t) + 3
		if m.Role == "user" {
			last = t
		}
	}
	words := append([]string{"echo:"}, strings.Fields(last)...)
	max := 16
	if req.MaxTokens != nil && *req.MaxTokens > 0 {
		max = *req.MaxTokens
	}
	finish := "stop"
	if len(words) > max {
		words, finish = words[:max], "length"
	}
	target := str(model, "status", "resolvedModelAlias")
	if target == "" {
		target = model.GetName()
	}
	total := int64(prompt + len(words))
	id, _ := randomString(24)
	return map[string]any{
		"id": "chatcmpl-" + id, "object": "chat.completion", "created": now.Unix(), "model": target,
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": finish,
			"message": map[string]any{"role": "assistant", "content": strings.Join(words, " ")},
		}},
		"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": total},
	}, total
}
