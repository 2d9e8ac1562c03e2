package verify

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"time"
)

// Response is one answer of the MaaS gateway as the data-path checks saw
// it. Body holds at most MaxBody bytes.
type Response struct {
	Status int
	Body   []byte
	// Latency is the time from sending the request to reading the body.
	Latency time.Duration
	// RequestSize is the size of the request body in bytes.
	RequestSize int
}

// MaxBody bounds how much of a response body verify keeps, in bytes.
const MaxBody = 64 << 10

// Class is the meaning of a gateway response (case B17).
type Class string

// Response classes.
const (
	ClassOK          Class = "ok"
	ClassUnauth      Class = "unauthorized" // 401: key or token
	ClassForbidden   Class = "forbidden"    // 403: policy subjects
	ClassQuota       Class = "quota"        // 429 from the gateway: no subscription or exhausted
	ClassUpstream429 Class = "upstream-429" // 429 from the model server itself
	ClassBodyLimit   Class = "body-limit"   // 413 (or 400/500 only above a size)
	ClassAuthService Class = "auth-service" // 500 AUTH_FAILURE: Authorino/Kuadrant not working
	ClassUnavailable Class = "unavailable"  // 502/503/504: no healthy upstream
	ClassNotFound    Class = "not-found"    // 404: no route
	ClassBadRequest  Class = "bad-request"  // 400 below the size threshold
	ClassOther       Class = "other"        // anything else
	ClassNoResponse  Class = "no-response"  // transport error
	// ClassAuthBypass is a 2xx to a request that must be refused (no
	// credentials, a bogus key): the gateway does not authenticate
	// (AuthBypass, case N04).
	ClassAuthBypass Class = "auth-bypass"
)

// Thresholds for recognising the gateway's own 429 (case B17, from
// rh-aiservices-bu/rhoai-maas-guide 10-post-upgrade-troubleshooting, issue
// 9: the Limitador 429 has a tiny body and comes back in about 20 ms; a
// model server's own 429 carries an OpenAI error object after queueing).
const (
	TinyBody = 256                    // bytes
	FastCall = 500 * time.Millisecond // latency
)

// Diagnosis is a classified response with the cause and the fix to show.
type Diagnosis struct {
	Class Class
	Cause string
	Fix   string
}

// Classify maps a gateway response to a diagnosis, as case B17 prescribes:
// 401 key or token; 403 policy subjects do not include the caller's groups;
// 429 with a tiny body, fast or plain text: no subscription or subscription exhausted;
// 413 gateway body limit; 500 AUTH_FAILURE auth service (case B01);
// 502/503/504 model server unreachable. 400 "invalid JSON" and 500 are a
// body cap only when a smaller request passed (see ClassifyLarge).
func Classify(r Response) Diagnosis {
	body := strings.ToLower(string(r.Body))
	switch {
	case r.Status >= 200 && r.Status < 300:
		return Diagnosis{Class: ClassOK}
	case r.Status == http.StatusUnauthorized:
		return Diagnosis{ClassUnauth,
			"the API key or token was rejected: the key is missing, expired or revoked, or an OpenShift token was sent where an sk-oai- key is needed",
			"create a new key: POST /maas-api/v1/api-keys with your OpenShift token (deployment README, \"Get an API key\")"}
	case r.Status == http.StatusForbidden:
		return Diagnosis{ClassForbidden,
			"no MaaSAuthPolicy grants the caller's groups (as recorded in the API key) this model",
			"add one of the caller's groups to a MaaSAuthPolicy that lists the model (inventory authPolicies), run maasctl install, then create a new key"}
	case r.Status == http.StatusTooManyRequests:
		// The gateway's own 429 is tiny and, where the machine is not
		// loaded, fast; it is also plain text (Envoy's local reply, "Too
		// Many Requests"), where an OpenAI-compatible model server
		// answers a JSON error object: a tiny plain-text 429 is the
		// gateway's however long it took (a loaded CI machine took
		// 949 ms for one).
		if len(r.Body) <= TinyBody && (r.Latency <= FastCall || !strings.Contains(body, "{")) {
			return Diagnosis{ClassQuota,
				fmt.Sprintf("the gateway's rate limiter refused the request (%d-byte body in %s): the caller has no MaaSSubscription for this model, or its token limit for the window is used up",
					len(r.Body), r.Latency.Round(time.Millisecond)),
				"wait for the window to reset, or raise tokenRateLimits of the subscription (inventory subscriptions[].modelRefs[].tokenRateLimits) and run maasctl install"}
		}
		return Diagnosis{ClassUpstream429,
			fmt.Sprintf("the model server itself answered 429 (%d-byte body in %s): it is overloaded or its provider quota is used up", len(r.Body), r.Latency.Round(time.Millisecond)),
			"check the model server's own limits and load"}
	case r.Status == http.StatusRequestEntityTooLarge:
		return Diagnosis{ClassBodyLimit,
			fmt.Sprintf("gateway request body limit: a %d-byte request was refused with 413", r.RequestSize),
			"raise the gateway's request buffer limit; on Service Mesh before 3.3.1 requests over 16 KB can be truncated: oc get csv -n openshift-operators | grep servicemesh"}
	case r.Status == http.StatusInternalServerError && strings.Contains(body, "auth_failure"):
		return Diagnosis{ClassAuthService,
			"the gateway's auth service failed (AUTH_FAILURE): Kuadrant/Authorino is not ready, e.g. Kuadrant MissingDependency",
			"maasctl doctor; oc get kuadrant -A"}
	case r.Status == http.StatusBadGateway || r.Status == http.StatusServiceUnavailable || r.Status == http.StatusGatewayTimeout:
		return Diagnosis{ClassUnavailable,
			fmt.Sprintf("the gateway could not reach the backend (%d %s): the model server (or maas-api) has no ready endpoints or refuses connections", r.Status, snippet(r.Body, 120)),
			"maasctl doctor; oc logs -n <model namespace> deploy/<model server>"}
	case r.Status == http.StatusNotFound:
		return Diagnosis{ClassNotFound,
			"no route for this path on the gateway: the model's HTTPRoute is missing, or the base URL is not the MaaS gateway",
			"oc get httproute -A; check --endpoint"}
	case r.Status == http.StatusBadRequest:
		return Diagnosis{ClassBadRequest, "the request was refused as invalid: " + snippet(r.Body, 160), "check the model name and request format"}
	case r.Status == 0:
		return Diagnosis{ClassNoResponse, "no HTTP response", "check --endpoint and network access to it"}
	}
	return Diagnosis{ClassOther, fmt.Sprintf("unexpected HTTP %d: %s", r.Status, snippet(r.Body, 160)), "maasctl doctor"}
}

// ClassifyLarge classifies the answer to a large request when a small
// request (smallSize bytes) to the same endpoint passed. A 413, a 500, or a
// 400 saying the JSON is invalid then means a gateway body cap (case B17:
// envoyproxy/ai-gateway#827 413 above 32 KiB, gateway-api-inference-extension
// #854 500 above ~128 KiB, agentgateway#2359 a truncated body reported as
// invalid JSON).
func ClassifyLarge(r Response, smallSize int) Diagnosis {
	body := strings.ToLower(string(r.Body))
	capped := r.Status == http.StatusRequestEntityTooLarge || r.Status == http.StatusInternalServerError ||
		(r.Status == http.StatusBadRequest && (strings.Contains(body, "json") || strings.Contains(body, "truncat")))
	if capped {
		return Diagnosis{ClassBodyLimit,
			fmt.Sprintf("gateway request body limit: a %d-byte request failed with HTTP %d while a %d-byte request passed", r.RequestSize, r.Status, smallSize),
			"raise the gateway's request buffer limit; on Service Mesh before 3.3.1 requests over 16 KB can be truncated: oc get csv -n openshift-operators | grep servicemesh"}
	}
	return Classify(r)
}

var (
	keyPattern    = regexp.MustCompile(`sk-oai-[A-Za-z0-9_\-]+`)
	bearerPattern = regexp.MustCompile(`(?i)(bearer\s+)[A-Za-z0-9._~+/=\-]+`)
)

// Scrub removes API keys (sk-oai-…), bearer tokens and the given secret
// values from s.
func Scrub(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 6 {
			s = strings.ReplaceAll(s, sec, "<redacted>")
		}
	}
	s = keyPattern.ReplaceAllString(s, "sk-oai-<redacted>")
	return bearerPattern.ReplaceAllString(s, "${1}<redacted>")
}

// snippet returns at most n bytes of body on one line, scrubbed.
func snippet(body []byte, n int) string {
	r := []rune(strings.Join(strings.Fields(string(bytes.TrimSpace(body))), " "))
	if len(r) > n {
		r = append(r[:n:n], '…')
	}
	s := string(r)
	if s == "" {
		return "<empty body>"
	}
	return Scrub(s)
}
