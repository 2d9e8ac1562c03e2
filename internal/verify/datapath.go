package verify

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

// DataPathOptions configure the data-path checks (MAAS-V020 to MAAS-V028).
type DataPathOptions struct {
	// Endpoint is the MaaS base URL, e.g. https://maas.apps.example.com.
	Endpoint string
	// Token is the caller's Kubernetes/OpenShift bearer token, used only to
	// mint and revoke API keys (POST/DELETE /maas-api/v1/api-keys). It is
	// never printed.
	Token string
	// CAFile is a PEM bundle to trust in addition to the system roots.
	CAFile string
	// InsecureSkipTLSVerify turns off server certificate checks.
	InsecureSkipTLSVerify bool
	// Subscription is the MaaSSubscription the verify key is bound to.
	// Default: the highest-priority inventory subscription the caller owns.
	Subscription string
	// ProbeQuota creates a dedicated low-limit probe MaaSSubscription owned
	// by the caller, expects a 429 once its limit is used, and deletes it.
	ProbeQuota bool
	// ProbeBodySize, when > 0, sends a ~1 KiB and then a request of this
	// many bytes to detect a gateway body cap (case B17).
	ProbeBodySize int
	// MaxTokens bounds the completion of each verify chat. Default 8.
	MaxTokens int
	// RequestTimeout bounds each HTTP request. Default 60 s.
	RequestTimeout time.Duration
	// ProbeTimeout bounds the wait for the probe subscription to turn
	// Active. Default 2 min.
	ProbeTimeout time.Duration
	// Probes creates and deletes the probe subscription (required with
	// ProbeQuota).
	Probes ProbeSubscriptions
	// HTTPClient overrides the client built from CAFile and
	// InsecureSkipTLSVerify (tests).
	HTTPClient *http.Client
}

// ProbeSubscriptions creates and removes the probe MaaSSubscription.
type ProbeSubscriptions interface {
	// Create creates sub and waits until its phase is Active.
	Create(ctx context.Context, sub *unstructured.Unstructured) error
	// Delete deletes the subscription (missing is not an error).
	Delete(ctx context.Context, namespace, name string) error
}

// HTTPClient builds the HTTP client of the data path from o: o.HTTPClient
// when set, else one trusting the system roots plus CAFile (or nothing
// with InsecureSkipTLSVerify), with RequestTimeout per request.
func HTTPClient(o DataPathOptions) (*http.Client, error) {
	if o.HTTPClient != nil {
		return o.HTTPClient, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureSkipTLSVerify} //nolint:gosec // user asked for it
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read --ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s: no PEM certificate found", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	tr.Proxy = http.ProxyFromEnvironment
	return &http.Client{Transport: tr, Timeout: o.RequestTimeout}, nil
}

// dataPath runs the data-path checks against one endpoint.
type dataPath struct {
	s      *State
	o      DataPathOptions
	c      *http.Client
	base   string
	minted []mintedKey
	secret []string // values to scrub from every message
	// unreachable is set when the health request got no HTTP answer at
	// all (DNS, connection, TLS handshake, timeout).
	unreachable bool
}

type mintedKey struct {
	id, key, subscription string
}

// DataPath runs the data-path checks (MAAS-V020 to MAAS-V028) and revokes
// every API key it minted, also when a check fails. The returned checks
// never contain a key or the token.
func DataPath(ctx context.Context, s *State, o DataPathOptions) []Check {
	if o.MaxTokens <= 0 {
		o.MaxTokens = 8
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 60 * time.Second
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 2 * time.Minute
	}
	c, err := HTTPClient(o)
	if err != nil {
		return []Check{newCheck(CodeHealth, o.Endpoint).fail(err.Error(), "the TLS settings could not be loaded", "check --ca-file")}
	}
	d := &dataPath{s: s, o: o, c: c, base: strings.TrimRight(o.Endpoint, "/"), secret: []string{o.Token}}
	var out []Check
	health := d.health(ctx)
	out = append(out, health)
	if d.unreachable {
		// One cause, one failure: every later request would fail the
		// same way (and the negative probes prove nothing unanswered).
		return append(out, unreachableSkips(d.base)...)
	}
	sub := o.Subscription
	if sub == "" {
		sub = DefaultSubscription(s)
	}
	models := subscriptionModels(s.Inv, sub)
	key, mint := d.mint(ctx, sub, "maasctl-verify")
	out = append(out, mint)
	if key == "" {
		for _, code := range []string{CodeListModels, CodeChat} {
			out = append(out, newCheck(code, d.base).skip("no API key (see "+CodeMintKey+")"))
		}
	} else {
		out = append(out, d.listModels(ctx, key, sub, models))
		for _, m := range models {
			out = append(out, d.chat(ctx, key, sub, m))
		}
	}
	out = append(out, d.negativeProbes(ctx, models)...)
	// The body-size probe runs before the quota probe: creating and
	// deleting the probe MaaSSubscription makes the MaaS controller delete
	// and rebuild the model's TokenRateLimitPolicy, and until Kuadrant has
	// accepted the rebuilt one the verify key's own subscription is
	// Degraded and its requests may be refused. The report keeps the code
	// order.
	body := newCheck(CodeBodySize, d.base).skip("not requested (--probe-body-size)")
	if o.ProbeBodySize > 0 && key != "" && len(models) > 0 {
		body = d.bodySize(ctx, key, models[0])
	}
	if o.ProbeQuota {
		out = append(out, d.probeQuota(ctx, models))
	} else {
		out = append(out, newCheck(CodeQuota429, d.base).skip("not requested (--probe-quota)"))
	}
	out = append(out, body)
	out = append(out, d.revokeAll(ctx))
	return out
}

// unreachableSkips are the data-path checks after MAAS-V020 (in the
// order DataPath runs them), each skipped because the endpoint gave no
// HTTP answer: no key was minted, so none is left to revoke.
func unreachableSkips(base string) []Check {
	why := "not run: the endpoint did not answer (see " + CodeHealth + ")"
	codes := []string{CodeMintKey, CodeListModels, CodeChat, CodeNoKey401, CodeBogusKey, CodeQuota429, CodeBodySize, CodeKeysRevoked}
	out := make([]Check, 0, len(codes))
	for _, code := range codes {
		out = append(out, newCheck(code, base).skip(why))
	}
	return out
}

// DefaultSubscription picks the subscription verify binds its key to: the
// highest-priority inventory subscription whose owners include the caller,
// else the first one (the rule maas-api applies when "subscription" is
// omitted, docs/content/user-guide/api-key-management.md).
func DefaultSubscription(s *State) string {
	best, bestPrio := "", 0
	for _, sub := range s.Inv.Subscriptions {
		if !owns(s.Caller, sub.Groups, sub.Users) {
			continue
		}
		if best == "" || sub.Priority > bestPrio {
			best, bestPrio = sub.Name, sub.Priority
		}
	}
	if best == "" && len(s.Inv.Subscriptions) > 0 {
		best = s.Inv.Subscriptions[0].Name
	}
	return best
}

func owns(id Identity, groups, users []string) bool {
	if slices.Contains(users, id.User) && id.User != "" {
		return true
	}
	for _, g := range groups {
		if slices.Contains(id.Groups, g) {
			return true
		}
	}
	return false
}

// subscriptionModels returns the inventory models the subscription covers
// (all inventory models when the subscription is not in the inventory).
func subscriptionModels(inv *inventory.Inventory, sub string) []inventory.ExternalModel {
	for _, s := range inv.Subscriptions {
		if s.Name != sub {
			continue
		}
		var out []inventory.ExternalModel
		for _, r := range s.ModelRefs {
			for _, m := range inv.ExternalModels {
				if m.Name == r.Name && m.Namespace == r.Namespace {
					out = append(out, m)
				}
			}
		}
		return out
	}
	return inv.ExternalModels
}

// do sends one request and reads at most MaxBody bytes of the answer.
func (d *dataPath) do(ctx context.Context, method, path, bearer string, body []byte) (Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.base+path, rd)
	if err != nil {
		return Response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	t0 := time.Now()
	resp, err := d.c.Do(req)
	if err != nil {
		// The URL error never holds headers, so no token leaks here.
		return Response{RequestSize: len(body)}, fmt.Errorf("%s %s: %s", method, path, Scrub(err.Error(), d.secret...))
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, MaxBody))
	_, _ = io.Copy(io.Discard, resp.Body)
	return Response{Status: resp.StatusCode, Body: b, Latency: time.Since(t0), RequestSize: len(body)}, nil
}

func (d *dataPath) scrub(s string) string { return Scrub(s, d.secret...) }

func (d *dataPath) health(ctx context.Context) Check {
	c := newCheck(CodeHealth, d.base+"/maas-api/health")
	r, err := d.do(ctx, http.MethodGet, "/maas-api/health", "", nil)
	if err != nil {
		d.unreachable = true
		return c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable (DNS, Route, TLS or network)", "check --endpoint, --ca-file; oc get route -n "+d.s.Inv.Gateway.Namespace)
	}
	if r.Status == http.StatusOK {
		return c.pass("HTTP 200")
	}
	dg := Classify(r)
	if dg.Class == ClassUnavailable {
		dg.Cause = "maas-api is not serving behind the gateway: " + dg.Cause
		dg.Fix = fmt.Sprintf("oc get deploy maas-api -n %s; oc logs -n %s deploy/maas-api --tail=20", d.s.Release.MaaSAPINamespace(d.s.Inv), d.s.Release.MaaSAPINamespace(d.s.Inv))
	}
	return c.failDiag(fmt.Sprintf("HTTP %d: %s", r.Status, snippet(r.Body, 120)), dg)
}

// mint creates an API key bound to sub; the key is returned only to the
// caller and remembered for revocation.
func (d *dataPath) mint(ctx context.Context, sub, prefix string) (string, Check) {
	c := newCheck(CodeMintKey, d.base+"/maas-api/v1/api-keys")
	if d.o.Token == "" {
		return "", c.fail("no bearer token", "minting a key needs the caller's OpenShift token and the kubeconfig has none (client certificates cannot mint)",
			"oc login, or pass --token")
	}
	name := prefix + "-" + randomSuffix()
	body, _ := json.Marshal(map[string]string{"name": name, "expiresIn": "1h", "subscription": sub})
	r, err := d.do(ctx, http.MethodPost, "/maas-api/v1/api-keys", d.o.Token, body)
	if err != nil {
		return "", c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable", "check --endpoint")
	}
	if r.Status != http.StatusOK && r.Status != http.StatusCreated {
		dg := Classify(r)
		switch dg.Class {
		case ClassUnauth:
			dg.Cause = "maas-api rejected the caller's OpenShift token (expired, or not a user token)"
			dg.Fix = "oc login again, or pass a valid --token"
		case ClassForbidden:
			dg.Cause = fmt.Sprintf("the caller %s is not an owner of MaaSSubscription %s (groups %s)", orNone(d.s.Caller.User), sub, strings.Join(d.s.Caller.Groups, ", "))
			dg.Fix = "use --subscription with a subscription you own, or add your group to subscriptions[].groups and run maasctl install"
		}
		return "", c.failDiag(fmt.Sprintf("HTTP %d for subscription %s: %s", r.Status, sub, snippet(r.Body, 120)), dg)
	}
	var res struct {
		ID           string `json:"id"`
		Key          string `json:"key"`
		Subscription string `json:"subscription"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil || !strings.HasPrefix(res.Key, "sk-oai-") {
		return "", c.fail(fmt.Sprintf("HTTP %d without an sk-oai- key in the answer", r.Status), "the endpoint is not maas-api (wrong base URL?)", "check --endpoint")
	}
	d.minted = append(d.minted, mintedKey{id: res.ID, key: res.Key, subscription: sub})
	d.secret = append(d.secret, res.Key)
	return res.Key, c.pass(fmt.Sprintf("key %s (id %s) bound to subscription %s", name, orNone(res.ID), sub))
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (d *dataPath) listModels(ctx context.Context, key, sub string, models []inventory.ExternalModel) Check {
	c := newCheck(CodeListModels, d.base+"/v1/models")
	r, err := d.do(ctx, http.MethodGet, "/v1/models", key, nil)
	if err != nil {
		return c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable", "check --endpoint")
	}
	if r.Status != http.StatusOK {
		dg := d.explain(Classify(r), r, sub, "")
		return c.failDiag(fmt.Sprintf("HTTP %d: %s", r.Status, snippet(r.Body, 120)), dg)
	}
	var res struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil {
		return c.fail("the answer is not an OpenAI model list", "the endpoint is not the MaaS gateway", "check --endpoint")
	}
	var ids, missing []string
	for _, m := range res.Data {
		ids = append(ids, m.ID)
	}
	for _, m := range models {
		if !slices.Contains(ids, m.Name) {
			missing = append(missing, m.Name)
		}
	}
	detail := "listed: " + orNone(strings.Join(ids, ", "))
	if len(missing) > 0 {
		return c.fail(detail+"; missing: "+strings.Join(missing, ", "),
			"maas-api lists a model only when its MaaSModelRef is Ready and the key's subscription and policies grant it",
			"maasctl verify (see "+CodeModelRefReady+"); oc get maasmodelref -A")
	}
	if others := notExpected(d.s, sub, models); len(others) > 0 {
		var want []string
		for _, m := range models {
			want = append(want, m.Name)
		}
		detail += "; expected for subscription " + sub + ": " + orNone(strings.Join(want, ", ")) + "; not expected: " + strings.Join(others, "; ")
	}
	return c.pass(detail)
}

// notExpected says, for each inventory model outside models (those of the
// key's subscription sub), why GET /v1/models with that key does not list
// it: it is in another subscription of the caller's (a key is for one
// subscription), the inventory grants it only to groups or users the
// caller is not in, or no subscription has it.
func notExpected(s *State, sub string, models []inventory.ExternalModel) []string {
	var out []string
	for _, m := range s.Inv.ExternalModels {
		if slices.ContainsFunc(models, func(x inventory.ExternalModel) bool { return x.Name == m.Name && x.Namespace == m.Namespace }) {
			continue
		}
		var mine, theirs []string
		for _, is := range s.Inv.Subscriptions {
			if !slices.ContainsFunc(is.ModelRefs, func(r inventory.SubscriptionModel) bool { return r.Name == m.Name && r.Namespace == m.Namespace }) {
				continue
			}
			if owns(s.Caller, is.Groups, is.Users) {
				mine = append(mine, is.Name)
			} else {
				theirs = append(theirs, fmt.Sprintf("%s (groups %s; users %s)", is.Name, orNone(strings.Join(is.Groups, ",")), orNone(strings.Join(is.Users, ","))))
			}
		}
		var why string
		switch {
		case len(mine) > 0:
			why = "in subscription " + strings.Join(mine, ", ") + ", not in " + sub + " (an API key lists the models of its own subscription only)"
		case len(theirs) > 0:
			who := "you"
			if s.Caller.User != "" {
				who = fmt.Sprintf("you (%s, groups %s)", s.Caller.User, orNone(strings.Join(s.Caller.Groups, ",")))
			}
			why = "granted only by subscription " + strings.Join(theirs, ", ") + ", not to " + who
		default:
			why = "in no subscription of the inventory"
		}
		out = append(out, m.Name+" "+why)
	}
	return out
}

// chatRequest is the OpenAI chat completion verify sends.
func chatRequest(model string, maxTokens int, padding int) []byte {
	req := map[string]any{
		"model":      model,
		"messages":   []any{map[string]any{"role": "user", "content": "Reply with the single word: ok"}},
		"max_tokens": maxTokens,
	}
	if padding > 0 {
		// Padding goes into a field the model server ignores, so a large
		// probe costs no tokens; gateways cap the whole body anyway.
		req["maasctl_padding"] = strings.Repeat("x", padding)
	}
	b, _ := json.Marshal(req)
	return b
}

func (d *dataPath) chat(ctx context.Context, key, sub string, m inventory.ExternalModel) Check {
	c := newCheck(CodeChat, d.base+"/v1/chat/completions model="+m.Name)
	body := chatRequest(m.Name, d.o.MaxTokens, 0)
	r, err := d.do(ctx, http.MethodPost, "/v1/chat/completions", key, body)
	if err != nil {
		return c.fail(d.scrub(err.Error()), "the MaaS endpoint is unreachable", "check --endpoint")
	}
	if r.Status != http.StatusOK {
		dg := d.explain(Classify(r), r, sub, m.Name)
		return c.failDiag(fmt.Sprintf("HTTP %d in %s: %s", r.Status, r.Latency.Round(time.Millisecond), snippet(r.Body, 160)), dg)
	}
	var res struct {
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage *struct {
			TotalTokens int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Body, &res); err != nil || len(res.Choices) == 0 {
		return c.fail("HTTP 200 without choices", "the answer is not an OpenAI chat completion: the ExternalModel's apiFormat or path does not match the server",
			"oc get externalmodel "+m.Name+" -n "+m.Namespace+" -o yaml")
	}
	detail := fmt.Sprintf("HTTP 200 in %s", r.Latency.Round(time.Millisecond))
	if res.Usage != nil {
		detail += fmt.Sprintf(", %d tokens", res.Usage.TotalTokens)
	} else {
		detail += ", no usage in the answer (token limits cannot be counted)"
	}
	return c.pass(detail)
}

// explain adds what the snapshot says to a 403 or 429 diagnosis.
func (d *dataPath) explain(dg Diagnosis, r Response, sub, model string) Diagnosis {
	s := d.s
	switch dg.Class {
	case ClassForbidden:
		if model == "" {
			break
		}
		var pols []string
		for _, p := range s.AuthPolicies {
			if refersTo(p, model) {
				pols = append(pols, fmt.Sprintf("%s (groups %s; users %s)", p.GetName(), orNone(strings.Join(subjectGroups(p, "subjects"), ", ")), orNone(strings.Join(subjectUsers(p, "subjects"), ", "))))
			}
		}
		if len(pols) == 0 {
			dg.Cause = fmt.Sprintf("no MaaSAuthPolicy lists model %s (check that model_refs names and namespaces match)", model)
		} else {
			dg.Cause = fmt.Sprintf("no MaaSAuthPolicy grants caller %s (groups %s) model %s; policies for it: %s",
				orNone(s.Caller.User), orNone(strings.Join(s.Caller.Groups, ", ")), model, strings.Join(pols, "; "))
		}
	case ClassQuota:
		how := fmt.Sprintf("the gateway's rate limiter answered, not the model: a %d-byte body in %s", len(r.Body), r.Latency.Round(time.Millisecond))
		lim := subscriptionLimits(s, sub, model)
		p := findByName(s.Subscriptions, sub)
		switch {
		case p == nil:
			dg.Cause = fmt.Sprintf("MaaSSubscription %s, which the key is bound to, no longer exists (%s)", sub, how)
			dg.Fix = "create a new key for a subscription you own"
		case !owns(s.Caller, subjectGroups(p, "owner"), subjectUsers(p, "owner")):
			dg.Cause = fmt.Sprintf("caller %s is not an owner of MaaSSubscription %s, so no token limit applies and every request gets 429 (%s)", orNone(s.Caller.User), sub, how)
			dg.Fix = "add one of your groups to subscriptions[].groups in the inventory, run maasctl install, then create a new key"
		case lim == "":
			dg.Cause = fmt.Sprintf("MaaSSubscription %s does not include model %s (%s)", sub, model, how)
			dg.Fix = "add the model to subscriptions[].modelRefs in the inventory and run maasctl install"
		default:
			dg.Cause = fmt.Sprintf("MaaSSubscription %s allows %s per user and the caller's tokens for the window are used up (%s)", sub, lim, how)
		}
	}
	return dg
}

func findByName(l []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	for _, o := range l {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

// refersTo reports whether a MaaS policy's spec.modelRefs names model.
func refersTo(p *unstructured.Unstructured, model string) bool {
	refs, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
	for _, r := range refs {
		m, _ := r.(map[string]any)
		if m["name"] == model {
			return true
		}
	}
	return false
}

// subjectGroups returns spec.<field>.groups[].name.
func subjectGroups(p *unstructured.Unstructured, field string) []string {
	l, _, _ := unstructured.NestedSlice(p.Object, "spec", field, "groups")
	var out []string
	for _, g := range l {
		m, _ := g.(map[string]any)
		if n, _ := m["name"].(string); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// subjectUsers returns spec.<field>.users.
func subjectUsers(p *unstructured.Unstructured, field string) []string {
	l, _, _ := unstructured.NestedStringSlice(p.Object, "spec", field, "users")
	return l
}

// subscriptionLimits renders the token limits of sub for model, e.g.
// "200000 tokens per 1h".
func subscriptionLimits(s *State, sub, model string) string {
	p := findByName(s.Subscriptions, sub)
	if p == nil {
		return ""
	}
	refs, _, _ := unstructured.NestedSlice(p.Object, "spec", "modelRefs")
	var parts []string
	for _, r := range refs {
		m, _ := r.(map[string]any)
		if model != "" && m["name"] != model {
			continue
		}
		ls, _ := m["tokenRateLimits"].([]any)
		for _, l := range ls {
			lm, _ := l.(map[string]any)
			parts = append(parts, fmt.Sprintf("%v tokens per %v", lm["limit"], lm["window"]))
		}
	}
	return strings.Join(parts, ", ")
}

// revokeAll revokes every key this run minted and proves it: a request with
// a revoked key must be refused (401 or 403).
func (d *dataPath) revokeAll(ctx context.Context) Check {
	c := newCheck(CodeKeysRevoked, d.base+"/maas-api/v1/api-keys")
	if len(d.minted) == 0 {
		return c.skip("no key was minted")
	}
	ctx = context.WithoutCancel(ctx)
	var problems, done []string
	for _, k := range d.minted {
		if k.id == "" {
			problems = append(problems, "a key without id cannot be revoked")
			continue
		}
		r, err := d.do(ctx, http.MethodDelete, "/maas-api/v1/api-keys/"+k.id, d.o.Token, nil)
		switch {
		case err != nil:
			problems = append(problems, d.scrub(err.Error()))
			continue
		case r.Status != http.StatusOK && r.Status != http.StatusNoContent:
			problems = append(problems, fmt.Sprintf("DELETE %s: HTTP %d", k.id, r.Status))
			continue
		}
		r, err = d.do(ctx, http.MethodGet, "/v1/models", k.key, nil)
		// Refused is 401 or 403: the MaaS Gateway AuthPolicy takes any
		// sk-oai- key as the identity and lets its auth-valid OPA rule
		// judge maas-api's validation, so a revoked key gets 403
		// (maas-controller maasauthpolicy_controller.go
		// buildGatewayAuthPolicySpec); a gateway that checks the key
		// as the identity answers 401.
		if err == nil && r.Status != http.StatusUnauthorized && r.Status != http.StatusForbidden {
			problems = append(problems, fmt.Sprintf("key %s still accepted after revocation (HTTP %d)", k.id, r.Status))
			continue
		}
		done = append(done, k.id)
	}
	if len(problems) > 0 {
		return c.fail(strings.Join(problems, "; "), "an API key minted by verify may still be valid",
			"revoke it in Gen AI studio → API keys, or: curl -X DELETE $MAAS/maas-api/v1/api-keys/<id> -H \"Authorization: Bearer $(oc whoami -t)\"")
	}
	return c.pass(fmt.Sprintf("%d key(s) revoked and rejected afterwards: %s", len(done), strings.Join(done, ", ")))
}

// errNoEndpoint is returned by ResolveEndpoint when no base URL is known.
var errNoEndpoint = errors.New("no MaaS endpoint: the Route has no host and gateway.hostname is empty; pass --endpoint")

// ResolveEndpoint returns explicit when set, else https://<Route host>,
// else https://<gateway.hostname>.
func ResolveEndpoint(s *State, explicit string) (string, error) {
	if explicit != "" {
		return strings.TrimRight(explicit, "/"), nil
	}
	if h := str(s.Route, "spec", "host"); h != "" {
		return "https://" + h, nil
	}
	if h := s.Inv.Gateway.Hostname; h != "" {
		return "https://" + h, nil
	}
	if g := s.Inv.Gateway; g.CreateRoute && s.Route == nil {
		return "", fmt.Errorf("no MaaS endpoint: Route %s/%s %s (maasctl install re-creates it); or pass --endpoint", g.Namespace, g.RouteName, s.MissingReason("Route", g.Namespace, g.RouteName))
	}
	return "", errNoEndpoint
}
