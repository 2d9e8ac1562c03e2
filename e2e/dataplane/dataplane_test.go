package dataplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/verify"
)

const (
	aliceToken = "alice-openshift-token"
	bobToken   = "bob-openshift-token"
	model      = "qwen35-9b-coder"
)

var identities = StaticTokens{
	aliceToken: {User: "alice", Groups: []string{"developers", "system:authenticated"}},
	bobToken:   {User: "bob", Groups: []string{"system:authenticated"}},
}

func healthy(t *testing.T) *verify.StaticReader {
	t.Helper()
	b, err := os.ReadFile("../../internal/verify/testdata/healthy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := verify.ParseObjects(b)
	if err != nil {
		t.Fatal(err)
	}
	return verify.NewStaticReader(verify.Identity{}, objs...)
}

// clock is a settable test clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

type client struct {
	t   *testing.T
	s   *Server
	hc  *http.Client
	clk *clock
}

func start(t *testing.T, r *verify.StaticReader, o Options) *client {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	clk := &clock{t: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
	o.Reader, o.Auth, o.Now = r, identities, clk.now
	o.DBHosts = freshDatabase(t)
	s, err := Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.CACertPEM()) {
		t.Fatal("bad CA PEM")
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	return &client{t: t, s: s, hc: hc, clk: clk}
}

func (c *client) do(method, path, bearer string, body any) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, c.s.URL()+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// mint returns the key and its id for token and subscription.
func (c *client) mint(token, sub string) (string, string) {
	c.t.Helper()
	st, b := c.do(http.MethodPost, "/maas-api/v1/api-keys", token, map[string]any{"name": "t", "expiresIn": "1h", "subscription": sub})
	if st != http.StatusCreated {
		c.t.Fatalf("mint: HTTP %d %s", st, b)
	}
	var res struct{ ID, Key string }
	if err := json.Unmarshal(b, &res); err != nil {
		c.t.Fatal(err)
	}
	return res.Key, res.ID
}

func chat(max int) map[string]any {
	return map[string]any{"model": model, "max_tokens": max, "messages": []any{map[string]any{"role": "user", "content": "say hello to the test"}}}
}

func TestKeysAndChat(t *testing.T) {
	c := start(t, healthy(t), Options{})
	key, id := c.mint(aliceToken, "llama-coder-default")
	if !strings.HasPrefix(key, "sk-oai-") || len(key) < 40 {
		t.Fatalf("key %q: want sk-oai- and 40+ characters", key)
	}
	st, b := c.do(http.MethodGet, "/v1/models", key, nil)
	if st != http.StatusOK || !strings.Contains(string(b), `"id":"`+model+`"`) {
		t.Fatalf("/v1/models: HTTP %d %s", st, b)
	}
	st, b = c.do(http.MethodPost, "/v1/chat/completions", key, chat(4))
	if st != http.StatusOK {
		t.Fatalf("chat: HTTP %d %s", st, b)
	}
	var res struct {
		Object  string
		Choices []struct {
			Message      struct{ Role, Content string }
			FinishReason string `json:"finish_reason"`
		}
		Usage struct {
			Prompt     int `json:"prompt_tokens"`
			Completion int `json:"completion_tokens"`
			Total      int `json:"total_tokens"`
		}
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	// "say hello to the test" is 5 words + 3 overhead; the echo is cut to 4.
	if res.Object != "chat.completion" || res.Choices[0].Message.Content != "echo: say hello to" || res.Choices[0].FinishReason != "length" ||
		res.Usage.Prompt != 8 || res.Usage.Completion != 4 || res.Usage.Total != 12 {
		t.Errorf("chat answer %s", b)
	}
	// The per-model endpoint of the MaaSModelRef serves too.
	if st, b := c.do(http.MethodPost, "/llm-coding-assistant/"+model+"/v1/chat/completions", key, chat(2)); st != http.StatusOK {
		t.Errorf("per-model path: HTTP %d %s", st, b)
	}
	// Only the owner revokes; a revoked key gets 401 at once.
	if st, _ := c.do(http.MethodDelete, "/maas-api/v1/api-keys/"+id, bobToken, nil); st != http.StatusNotFound {
		t.Errorf("bob revoking alice's key: HTTP %d, want 404", st)
	}
	if st, b := c.do(http.MethodDelete, "/maas-api/v1/api-keys/"+id, aliceToken, nil); st != http.StatusOK || !strings.Contains(string(b), `"status":"revoked"`) {
		t.Errorf("revoke: HTTP %d %s", st, b)
	}
	if st, _ := c.do(http.MethodGet, "/v1/models", key, nil); st != http.StatusUnauthorized {
		t.Errorf("revoked key: HTTP %d, want 401", st)
	}
	// The plaintext key is nowhere in the key listing.
	_, b = c.do(http.MethodGet, "/maas-api/v1/api-keys", aliceToken, nil)
	if strings.Contains(string(b), key) || !strings.Contains(string(b), id) {
		t.Errorf("key listing leaks the key or misses its id: %s", b)
	}
}

func TestEnforcement(t *testing.T) {
	tests := []struct {
		name   string
		breakf func(r *verify.StaticReader, c *client)
		method string
		path   string
		auth   string // "key", "token", "" or a literal
		body   any
		want   int
		inBody string
	}{
		{name: "no key", method: "POST", path: "/v1/chat/completions", auth: "", body: chat(2), want: 401},
		{name: "OpenShift token instead of a key", method: "POST", path: "/v1/chat/completions", auth: "token", body: chat(2), want: 401},
		{name: "unknown key", method: "POST", path: "/v1/chat/completions", auth: "sk-oai-doesnotexist", body: chat(2), want: 401},
		{name: "minting with a key", method: "POST", path: "/maas-api/v1/api-keys", auth: "key", body: map[string]any{"name": "x"}, want: 401},
		{name: "minting without a name", method: "POST", path: "/maas-api/v1/api-keys", auth: "token", body: map[string]any{"subscription": "llama-coder-default"}, want: 400},
		{name: "minting for a subscription the caller does not own", method: "POST", path: "/maas-api/v1/api-keys", auth: "token",
			body: map[string]any{"name": "x", "subscription": "other"}, want: 403},
		{name: "health", method: "GET", path: "/maas-api/health", want: 200},
		{name: "maas-api down", method: "GET", path: "/maas-api/health", want: 503, inBody: noHealthyUpstream,
			breakf: func(r *verify.StaticReader, _ *client) {
				setStatus(r, verify.DeploymentGVK, "redhat-ai-gateway-infra", "maas-api", "conditions", []any{})
			}},
		{name: "auth policy does not match the groups", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 403,
			breakf: func(r *verify.StaticReader, _ *client) {
				setSpec(r, verify.MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", []any{map[string]any{"name": "platform-admins"}}, "subjects", "groups")
			}},
		{name: "auth policy names the caller", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 200,
			breakf: func(r *verify.StaticReader, _ *client) {
				setSpec(r, verify.MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", []any{map[string]any{"name": "platform-admins"}}, "subjects", "groups")
				setSpec(r, verify.MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", []any{"alice"}, "subjects", "users")
			}},
		{name: "subscription deleted after minting", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 429,
			breakf: func(r *verify.StaticReader, _ *client) {
				r.Remove(verify.MaaSSubscriptionGVK, "models-as-a-service", "llama-coder-default")
			}},
		{name: "model server has no ready endpoints", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 503, inBody: noHealthyUpstream,
			breakf: func(r *verify.StaticReader, _ *client) {
				r.Remove(verify.EndpointSliceGVK, "llm-coding-assistant", "llama-coder-x1")
			}},
		{name: "model server refuses connections", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 503, inBody: "connection failure",
			breakf: func(_ *verify.StaticReader, c *client) { c.s.SetModelDown(true) }},
		{name: "Kuadrant MissingDependency", method: "POST", path: "/v1/chat/completions", auth: "key", body: chat(2), want: 500, inBody: "AUTH_FAILURE",
			breakf: func(r *verify.StaticReader, _ *client) {
				setStatus(r, verify.KuadrantGVK, "kuadrant-system", "kuadrant", "conditions", []any{map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency"}})
			}},
		{name: "body over the cap", method: "POST", path: "/v1/chat/completions", auth: "key", body: []byte(`{"model":"` + model + `","pad":"` + strings.Repeat("x", 2048) + `"}`), want: 413,
			breakf: func(_ *verify.StaticReader, c *client) { c.s.SetBodyLimit(1024) }},
		{name: "unknown model", method: "POST", path: "/v1/chat/completions", auth: "key", body: map[string]any{"model": "nope", "messages": []any{}}, want: 404},
		{name: "invalid JSON", method: "POST", path: "/v1/chat/completions", auth: "key", body: []byte(`{"model":`), want: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy(t)
			c := start(t, r, Options{})
			key, _ := c.mint(aliceToken, "llama-coder-default")
			if tc.breakf != nil {
				tc.breakf(r, c)
			}
			auth := tc.auth
			switch auth {
			case "key":
				auth = key
			case "token":
				auth = aliceToken
			}
			st, b := c.do(tc.method, tc.path, auth, tc.body)
			if st != tc.want || !strings.Contains(string(b), tc.inBody) {
				t.Errorf("HTTP %d %q, want %d containing %q", st, b, tc.want, tc.inBody)
			}
			if st == http.StatusTooManyRequests && len(b) > verify.TinyBody {
				t.Errorf("429 body is %d bytes; Limitador's is tiny", len(b))
			}
		})
	}
}

// TestTokenLimit checks the TokenRateLimitPolicy semantics: the counter is
// checked before the request and charged with usage.total_tokens after, per
// user, per fixed window.
func TestTokenLimit(t *testing.T) {
	r := healthy(t)
	setSpec(r, verify.MaaSSubscriptionGVK, "models-as-a-service", "llama-coder-default", []any{map[string]any{
		"name": model, "namespace": "llm-coding-assistant",
		"tokenRateLimits": []any{map[string]any{"limit": int64(20), "window": "1m"}},
	}}, "modelRefs")
	c := start(t, r, Options{})
	alice, _ := c.mint(aliceToken, "llama-coder-default")
	alice2, _ := c.mint(aliceToken, "llama-coder-default")
	bob, _ := c.mint(bobToken, "llama-coder-default")
	var got []int
	for i := 0; i < 3; i++ {
		st, _ := c.do(http.MethodPost, "/v1/chat/completions", alice, chat(4)) // 12 tokens each
		got = append(got, st)
	}
	if want := []int{200, 200, 429}; !equalInts(got, want) {
		t.Errorf("alice: %v, want %v (12 + 12 tokens cross the limit of 20 only after the second answer)", got, want)
	}
	if st, _ := c.do(http.MethodPost, "/v1/chat/completions", alice2, chat(4)); st != http.StatusTooManyRequests {
		t.Errorf("alice's second key: HTTP %d, want 429 (limits are per user, not per key)", st)
	}
	if st, _ := c.do(http.MethodPost, "/v1/chat/completions", bob, chat(4)); st != http.StatusOK {
		t.Errorf("bob: HTTP %d, want 200 (his own counter)", st)
	}
	c.clk.add(time.Minute)
	if st, _ := c.do(http.MethodPost, "/v1/chat/completions", alice, chat(4)); st != http.StatusOK {
		t.Errorf("alice after the window: HTTP %d, want 200", st)
	}
}

func TestExpiresIn(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want time.Duration
		err  bool
	}{
		{name: "omitted", in: nil, want: MaxExpiration},
		{name: "hours", in: "720h", want: 720 * time.Hour},
		{name: "days with fraction", in: "1.5d", want: 36 * time.Hour},
		{name: "combined", in: "2h30m", want: 150 * time.Minute},
		{name: "seconds as a number", in: float64(86400), want: 24 * time.Hour},
		{name: "garbage", in: "soon", err: true},
		{name: "zero", in: "0h", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseExpiresIn(tc.in)
			if (err != nil) != tc.err || (!tc.err && got != tc.want) {
				t.Errorf("parseExpiresIn(%v) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestExpiredKey(t *testing.T) {
	c := start(t, healthy(t), Options{})
	key, _ := c.mint(aliceToken, "llama-coder-default") // 1h
	c.clk.add(time.Hour)
	if st, _ := c.do(http.MethodGet, "/v1/models", key, nil); st != http.StatusUnauthorized {
		t.Errorf("expired key: HTTP %d, want 401", st)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mutate(r *verify.StaticReader, gvkObj func() (*unstructured.Unstructured, error), f func(*unstructured.Unstructured)) {
	o, err := gvkObj()
	if err != nil {
		panic(err)
	}
	f(o)
	r.Put(o)
}

func setSpec(r *verify.StaticReader, gvk schema.GroupVersionKind, ns, name string, v any, path ...string) {
	mutate(r, func() (*unstructured.Unstructured, error) { return r.Get(context.Background(), gvk, ns, name) }, func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(o.Object, v, append([]string{"spec"}, path...)...)
	})
}

func setStatus(r *verify.StaticReader, gvk schema.GroupVersionKind, ns, name string, field string, v any) {
	mutate(r, func() (*unstructured.Unstructured, error) { return r.Get(context.Background(), gvk, ns, name) }, func(o *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(o.Object, v, "status", field)
	})
}
