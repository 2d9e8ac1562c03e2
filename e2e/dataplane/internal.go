package dataplane

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
)

// maas-api's internal endpoints, the ones the gateway AuthPolicy's HTTP
// metadata evaluators call from Authorino (opendatahub-io/
// models-as-a-service maas-api: internal/api_keys ValidationResult,
// internal/subscription SelectRequest/SelectResponse). Both answer 200
// with JSON whatever the verdict; the AuthPolicy's OPA rules decide.
// They are served only on the internal listener (maas-api's Service
// maas-api.<ns>.svc:8443), never through the gateway.

// validateRequest is the body of POST /internal/v1/api-keys/validate.
type validateRequest struct {
	Key string `json:"key"`
}

// validateResponse is maas-api's ValidationResult, with the subscription
// bound to the key, which the gateway policy's celSubscription reads.
type validateResponse struct {
	Valid        bool     `json:"valid"`
	UserID       string   `json:"userId,omitempty"`
	Username     string   `json:"username,omitempty"`
	KeyID        string   `json:"keyId,omitempty"`
	KeyName      string   `json:"keyName,omitempty"`
	Groups       []string `json:"groups"`
	Subscription string   `json:"subscription,omitempty"`
	Reason       string   `json:"reason,omitempty"`
}

// selectRequest is the body of POST /internal/v1/subscriptions/select.
type selectRequest struct {
	Groups                []string `json:"groups"`
	Username              string   `json:"username"`
	RequestedSubscription string   `json:"requestedSubscription"`
	RequestedModel        string   `json:"requestedModel"` // namespace/name
}

// selectResponse is maas-api's SelectResponse: the subscription, or an
// error code (bad_request, not_found, access_denied,
// multiple_subscriptions, internal_error) and message.
type selectResponse struct {
	Name              string `json:"name,omitempty"`
	Namespace         string `json:"namespace,omitempty"`
	Phase             string `json:"phase,omitempty"`
	DeletionTimestamp string `json:"deletionTimestamp,omitempty"`
	Error             string `json:"error,omitempty"`
	Message           string `json:"message,omitempty"`
}

// serveInternal answers maas-api's internal endpoints. Like the public
// ones they need maas-api running: while its Deployment is not Available
// the Service has no ready endpoint and the call fails (503 here; Authorino
// then has no metadata and the policy's rules deny).
func (s *Server) serveInternal(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
	defer func() { s.record(r, sw.status) }()
	if r.Method != http.MethodPost {
		sw.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	if !s.maasAPIUp(r.Context()) {
		writeText(sw, http.StatusServiceUnavailable, noHealthyUpstream)
		return
	}
	switch r.URL.Path {
	case "/internal/v1/api-keys/validate":
		s.validateKey(sw, r)
	case "/internal/v1/subscriptions/select":
		s.selectSubscription(sw, r)
	default:
		sw.WriteHeader(http.StatusNotFound)
	}
}

func (s *Server) validateKey(w http.ResponseWriter, r *http.Request) {
	var req validateRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.Key == "" {
		writeJSON(w, http.StatusOK, validateResponse{Reason: "invalid request body"})
		return
	}
	if !strings.HasPrefix(req.Key, KeyPrefix) {
		writeJSON(w, http.StatusOK, validateResponse{Reason: "invalid key format"})
		return
	}
	in, err := s.instance(r.Context())
	if err != nil {
		dbFailure(w, err)
		return
	}
	k, why, err := s.lookupKey(r.Context(), in, req.Key, s.o.Now())
	switch {
	case err != nil:
		dbFailure(w, err)
	case k == nil:
		writeJSON(w, http.StatusOK, validateResponse{Reason: why})
	default:
		writeJSON(w, http.StatusOK, validateResponse{
			Valid: true, UserID: k.Username, Username: k.Username, KeyID: k.ID, KeyName: k.Name,
			Groups: append([]string{}, k.Groups...), Subscription: k.Subscription,
		})
	}
}

// selectSubscription picks the caller's MaaSSubscription (maas-api
// internal/subscription Selector.Select): the requested one when the
// caller owns it, else the only one the caller owns; with a requested
// model, only a subscription whose modelRefs include it qualifies.
func (s *Server) selectSubscription(w http.ResponseWriter, r *http.Request) {
	var req selectRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&req); err != nil || req.Username == "" {
		writeJSON(w, http.StatusOK, selectResponse{Error: "bad_request", Message: "invalid request body: username is required"})
		return
	}
	id := verify.Identity{User: req.Username, Groups: req.Groups}
	covers := func(sub *unstructured.Unstructured) bool {
		if req.RequestedModel == "" {
			return true
		}
		return slices.ContainsFunc(modelRefs(sub), func(m ref) bool { return m.namespace+"/"+m.name == req.RequestedModel })
	}
	subs := s.list(r.Context(), verify.MaaSSubscriptionGVK, s.inv.RHOAI.MaaSNamespace, "")
	if name := req.RequestedSubscription; name != "" {
		if i := strings.LastIndex(name, "/"); i >= 0 {
			name = name[i+1:]
		}
		i := slices.IndexFunc(subs, func(u *unstructured.Unstructured) bool { return u.GetName() == name })
		switch {
		case i < 0:
			writeJSON(w, http.StatusOK, selectResponse{Error: "not_found", Message: fmt.Sprintf("subscription %q not found", name)})
		case !owns(subs[i], "owner", id):
			writeJSON(w, http.StatusOK, selectResponse{Error: "access_denied", Message: fmt.Sprintf("user %q has no access to subscription %q", req.Username, name)})
		case !covers(subs[i]):
			writeJSON(w, http.StatusOK, selectResponse{Error: "not_found", Message: fmt.Sprintf("subscription %q does not include model %s", name, req.RequestedModel)})
		default:
			writeJSON(w, http.StatusOK, selected(subs[i]))
		}
		return
	}
	var mine []*unstructured.Unstructured
	for _, sub := range subs {
		if owns(sub, "owner", id) && covers(sub) {
			mine = append(mine, sub)
		}
	}
	switch len(mine) {
	case 0:
		writeJSON(w, http.StatusOK, selectResponse{Error: "not_found", Message: fmt.Sprintf("no subscription found for user %q", req.Username)})
	case 1:
		writeJSON(w, http.StatusOK, selected(mine[0]))
	default:
		names := make([]string, len(mine))
		for i, m := range mine {
			names[i] = m.GetName()
		}
		writeJSON(w, http.StatusOK, selectResponse{Error: "multiple_subscriptions", Message: "user has access to multiple subscriptions (" + strings.Join(names, ", ") + "): select one with the X-MaaS-Subscription header"})
	}
}

func selected(sub *unstructured.Unstructured) selectResponse {
	out := selectResponse{Name: sub.GetName(), Namespace: sub.GetNamespace(), Phase: str(sub, "status", "phase")}
	if ts := sub.GetDeletionTimestamp(); ts != nil {
		out.DeletionTimestamp = ts.UTC().Format("2006-01-02T15:04:05Z")
	}
	return out
}
