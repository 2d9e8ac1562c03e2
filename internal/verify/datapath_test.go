package verify_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/e2e/dataplane"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

const adminToken = "admin-openshift-token"

var admin = verify.Identity{User: "admin", Groups: []string{"system:masters", "system:authenticated"}}

func healthy(t *testing.T) *verify.StaticReader {
	t.Helper()
	b, err := os.ReadFile("testdata/healthy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := verify.ParseObjects(b)
	if err != nil {
		t.Fatal(err)
	}
	return verify.NewStaticReader(admin, objs...)
}

// staticProbes stands in for the MaaS controller: a created probe
// subscription turns Active at once.
type staticProbes struct {
	r       *verify.StaticReader
	mu      sync.Mutex
	created []string
	deleted []string
	// deleteErr, when set, is what Delete returns after it removed the
	// subscription (ClusterProbes.Delete's wait for the model's policy).
	deleteErr error
}

func (p *staticProbes) Create(_ context.Context, sub *unstructured.Unstructured) error {
	s := sub.DeepCopy()
	_ = unstructured.SetNestedField(s.Object, "Active", "status", "phase")
	p.r.Put(s)
	p.mu.Lock()
	p.created = append(p.created, s.GetName())
	p.mu.Unlock()
	return nil
}

func (p *staticProbes) Delete(_ context.Context, ns, name string) error {
	p.r.Remove(verify.MaaSSubscriptionGVK, ns, name)
	p.mu.Lock()
	p.deleted = append(p.deleted, name)
	p.mu.Unlock()
	return p.deleteErr
}

func startPlane(t *testing.T, r *verify.StaticReader) (*dataplane.Server, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s, err := dataplane.Start(ctx, dataplane.Options{Reader: r, Auth: dataplane.StaticTokens{adminToken: admin}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	ca, err := s.WriteCAFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s, ca
}

func byCode(checks []verify.Check) map[string][]verify.Check {
	m := map[string][]verify.Check{}
	for _, c := range checks {
		m[c.Code] = append(m[c.Code], c)
	}
	return m
}

// TestDataPathAgainstDataplane runs the whole verify against the simulated
// data plane: healthy passes every check including the probe 429, every
// minted key is revoked, and the probe subscription is deleted; the broken
// states fail with the right code.
func TestDataPathAgainstDataplane(t *testing.T) {
	tests := []struct {
		name      string
		breakf    func(r *verify.StaticReader, s *dataplane.Server)
		deleteErr error
		token     string
		wantFail  string
		wantCause string
	}{
		{name: "healthy", token: adminToken},
		{name: "no token", token: "", wantFail: verify.CodeMintKey, wantCause: "OpenShift token"},
		{name: "model server down", token: adminToken, wantFail: verify.CodeChat, wantCause: "no ready endpoints",
			breakf: func(_ *verify.StaticReader, s *dataplane.Server) { s.SetModelDown(true) }},
		{name: "auth policy does not match the caller's groups", token: adminToken, wantFail: verify.CodeChat, wantCause: "no MaaSAuthPolicy grants caller admin",
			breakf: func(r *verify.StaticReader, _ *dataplane.Server) {
				p, _ := r.Get(context.Background(), verify.MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access")
				_ = unstructured.SetNestedSlice(p.Object, []any{map[string]any{"name": "developers"}}, "spec", "subjects", "groups")
				r.Put(p)
			}},
		{name: "Kuadrant not ready", token: adminToken, wantFail: verify.CodeMintKey, wantCause: "AUTH_FAILURE",
			breakf: func(r *verify.StaticReader, _ *dataplane.Server) {
				k, _ := r.Get(context.Background(), verify.KuadrantGVK, "kuadrant-system", "kuadrant")
				_ = unstructured.SetNestedSlice(k.Object, []any{map[string]any{"type": "Ready", "status": "False", "reason": "MissingDependency"}}, "status", "conditions")
				r.Put(k)
			}},
		{name: "the model's policy is not in force again after the probe", token: adminToken, wantFail: verify.CodeQuota429, wantCause: "not in force again within 1m0s",
			deleteErr: errors.New("after the probe: timed out waiting for TokenRateLimitPolicy llm-coding-assistant/maas-trlp-qwen35-9b-coder (Enforced=False (Unknown): waiting for the following components to sync: [Limitador])")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := healthy(t)
			plane, ca := startPlane(t, r)
			if tc.breakf != nil {
				tc.breakf(r, plane)
			}
			probes := &staticProbes{r: r, deleteErr: tc.deleteErr}
			rep, _, err := verify.Run(context.Background(), verify.Options{
				Inventory: inventory.Default(), Reader: r,
				DataPath: &verify.DataPathOptions{Endpoint: plane.URL(), Token: tc.token, CAFile: ca, ProbeQuota: true, ProbeBodySize: 200 << 10, Probes: probes},
			})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := rep.WriteJSON(&out); err != nil {
				t.Fatal(err)
			}
			if err := rep.WriteText(&out); err != nil {
				t.Fatal(err)
			}
			for _, k := range plane.IssuedKeys() {
				if strings.Contains(out.String(), k) {
					t.Errorf("report contains an issued API key")
				}
			}
			if strings.Contains(out.String(), adminToken) {
				t.Errorf("report contains the bearer token")
			}
			for _, k := range plane.Keys() {
				if k.Status != "revoked" {
					t.Errorf("key %s (%s) left %s", k.ID, k.Name, k.Status)
				}
			}
			if len(probes.created) != len(probes.deleted) {
				t.Errorf("probe subscriptions created %v, deleted %v", probes.created, probes.deleted)
			}
			m := byCode(rep.Checks)
			if tc.wantFail == "" {
				if !rep.Passed {
					t.Fatalf("healthy run failed:\n%s", out.String())
				}
				for _, code := range []string{verify.CodeHealth, verify.CodeMintKey, verify.CodeListModels, verify.CodeChat, verify.CodeNoKey401, verify.CodeBogusKey, verify.CodeQuota429, verify.CodeBodySize, verify.CodeKeysRevoked} {
					if len(m[code]) == 0 || m[code][0].Result != verify.Pass {
						t.Errorf("%s: %+v", code, m[code])
					}
				}
				if len(plane.Keys()) != 2 || len(probes.created) != 1 {
					t.Errorf("keys %d, probe subscriptions %d; want 2 and 1", len(plane.Keys()), len(probes.created))
				}
				return
			}
			if rep.Passed {
				t.Fatalf("broken state passed:\n%s", out.String())
			}
			got := m[tc.wantFail]
			if len(got) == 0 || got[0].Result != verify.Fail || !strings.Contains(got[0].Cause, tc.wantCause) {
				t.Fatalf("%s = %+v, want fail with cause containing %q\n%s", tc.wantFail, got, tc.wantCause, out.String())
			}
			if tc.deleteErr != nil && !strings.Contains(got[0].Detail, "probe cleanup: "+tc.deleteErr.Error()) {
				t.Errorf("%s detail does not carry the cleanup error: %s", tc.wantFail, got[0].Detail)
			}
		})
	}
}

// scripted is one scripted gateway answer (case B17's test harness).
type scripted struct {
	status  int
	body    string
	latency time.Duration
}

// scriptedGateway answers the maas-api calls normally and /v1/chat/
// completions as scripted, choosing by request size: above largeFrom bytes
// the large answer is used.
func scriptedGateway(t *testing.T, small, large scripted, largeFrom int) *httptest.Server {
	t.Helper()
	revoked := false
	var mu sync.Mutex
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.URL.Path == "/maas-api/health":
			w.WriteHeader(200)
		case r.URL.Path == "/maas-api/v1/api-keys" && r.Method == "POST":
			w.WriteHeader(201)
			_ = json.NewEncoder(w).Encode(map[string]string{"id": "k1", "key": "sk-oai-scriptedKEY123"})
		case strings.HasPrefix(r.URL.Path, "/maas-api/v1/api-keys/") && r.Method == "DELETE":
			revoked = true
			w.WriteHeader(200)
		case auth == "Bearer sk-oai-scriptedKEY123" && revoked:
			// A revoked key gets 403: the MaaS Gateway AuthPolicy's
			// auth-valid rule refuses it.
			w.WriteHeader(403)
		case auth != "Bearer sk-oai-scriptedKEY123":
			// Only the key it minted is accepted (a bogus key gets 401,
			// as from Authorino).
			w.WriteHeader(401)
		case r.URL.Path == "/v1/models":
			_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"qwen35-9b-coder"}]}`)
		case r.URL.Path == "/v1/chat/completions":
			a := small
			if len(b) > largeFrom {
				a = large
			}
			if a.latency > 0 {
				// Simulated gateway latency, not a wait for state.
				time.Sleep(a.latency)
			}
			w.WriteHeader(a.status)
			_, _ = io.WriteString(w, a.body)
		default:
			w.WriteHeader(404)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

const okChat = `{"choices":[{"message":{"role":"assistant","content":"ok"}}],"usage":{"total_tokens":12}}`

// TestResponseDiagnosis is case B17's test: each scripted gateway answer
// maps to the right diagnosis in verify's output.
func TestResponseDiagnosis(t *testing.T) {
	tests := []struct {
		name      string
		small     scripted
		large     scripted
		code      string
		wantCause string
	}{
		{name: "401", small: scripted{401, "", 0}, code: verify.CodeChat, wantCause: "API key or token was rejected"},
		{name: "403", small: scripted{403, "", 0}, code: verify.CodeChat, wantCause: "no MaaSAuthPolicy grants caller admin"},
		{name: "429 tiny and fast: exhausted", small: scripted{429, "Too Many Requests\n", 0}, code: verify.CodeChat, wantCause: "MaaSSubscription llama-coder-default allows 200000 tokens per 1h per user"},
		{name: "429 tiny plain text, slow (a loaded machine): still the gateway's", small: scripted{429, "Too Many Requests\n", 950 * time.Millisecond}, code: verify.CodeChat, wantCause: "MaaSSubscription llama-coder-default allows 200000 tokens per 1h per user"},
		{name: "429 tiny JSON error, slow: the model server's own", small: scripted{429, `{"error":{"message":"busy"}}`, 600 * time.Millisecond},
			code: verify.CodeChat, wantCause: "model server itself answered 429"},
		{name: "429 large and slow: the model server's own", small: scripted{429, `{"error":{"message":"` + strings.Repeat("server busy ", 40) + `"}}`, 600 * time.Millisecond},
			code: verify.CodeChat, wantCause: "model server itself answered 429"},
		{name: "503 no healthy upstream", small: scripted{503, "no healthy upstream", 0}, code: verify.CodeChat, wantCause: "could not reach the backend"},
		{name: "500 AUTH_FAILURE", small: scripted{500, `{"error":"AUTH_FAILURE"}`, 0}, code: verify.CodeChat, wantCause: "auth service failed"},
		{name: "413 above 64 KiB", small: scripted{200, okChat, 0}, large: scripted{413, "Payload Too Large", 0}, code: verify.CodeBodySize, wantCause: "gateway request body limit"},
		{name: "400 invalid JSON only above 64 KiB", small: scripted{200, okChat, 0}, large: scripted{400, `{"error":"invalid JSON"}`, 0}, code: verify.CodeBodySize, wantCause: "gateway request body limit"},
		{name: "500 only above 64 KiB", small: scripted{200, okChat, 0}, large: scripted{500, "internal error", 0}, code: verify.CodeBodySize, wantCause: "gateway request body limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.large.status == 0 {
				tc.large = tc.small
			}
			srv := scriptedGateway(t, tc.small, tc.large, 64<<10)
			rep, _, err := verify.Run(context.Background(), verify.Options{
				Inventory: inventory.Default(), Reader: healthy(t),
				DataPath: &verify.DataPathOptions{Endpoint: srv.URL, Token: adminToken, HTTPClient: srv.Client(), ProbeBodySize: 256 << 10},
			})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_ = rep.WriteText(&out)
			if strings.Contains(out.String(), "sk-oai-scriptedKEY123") {
				t.Errorf("output holds the key")
			}
			got := byCode(rep.Checks)[tc.code]
			if len(got) == 0 || got[0].Result != verify.Fail || !strings.Contains(got[0].Cause, tc.wantCause) {
				t.Fatalf("%s = %+v\nwant a failure whose cause contains %q\n%s", tc.code, got, tc.wantCause, out.String())
			}
			if rv := byCode(rep.Checks)[verify.CodeKeysRevoked]; len(rv) == 0 || rv[0].Result != verify.Pass {
				t.Errorf("key not revoked: %+v", rv)
			}
		})
	}
}

// TestN04NegativeProbes is case N04's verify test: the data path always
// sends a request without credentials and one with a bogus API key, each
// must get 401 or 403, and a 2xx on either fails as AUTH_BYPASS naming the
// probe, although every control-plane check passes (the snapshot is
// healthy). Variants: a gateway answering 200 to everything; one that
// refuses a request without credentials but serves any key (the whole
// kind: a check of the no-key case alone would pass it); one that refuses
// with 403; and one that refuses both with 401.
func TestN04NegativeProbes(t *testing.T) {
	tests := []struct {
		name string
		// answer is the status of /v1/models and /v1/chat/completions for
		// the request's Authorization header ("" = none; the minted key is
		// mintedKey); nil answers 200 to every request.
		answer     func(auth string) int
		wantBypass []string // codes that must fail as AUTH_BYPASS
		wantPass   []string // codes that must pass
	}{
		// Every path, whatever the headers (minting then gets no key, and
		// the probes still run).
		{name: "200 for everything", answer: nil,
			wantBypass: []string{verify.CodeNoKey401, verify.CodeBogusKey}},
		{name: "401 without a token, any key served", answer: func(auth string) int {
			if auth == "" {
				return 401
			}
			return 200
		}, wantBypass: []string{verify.CodeBogusKey}, wantPass: []string{verify.CodeNoKey401}},
		{name: "403 for both", answer: func(auth string) int {
			if auth == "Bearer "+mintedKey {
				return 200
			}
			return 403
		}, wantPass: []string{verify.CodeNoKey401, verify.CodeBogusKey}},
		{name: "401 for both", answer: func(auth string) int {
			if auth == "Bearer "+mintedKey {
				return 200
			}
			return 401
		}, wantPass: []string{verify.CodeNoKey401, verify.CodeBogusKey}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var chatAuths []string
			revoked := false
			srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				auth := r.Header.Get("Authorization")
				mu.Lock()
				gone := revoked && auth == "Bearer "+mintedKey
				if r.URL.Path == "/v1/chat/completions" {
					chatAuths = append(chatAuths, auth)
				}
				mu.Unlock()
				switch {
				case tc.answer == nil:
					_, _ = io.WriteString(w, okChat)
				case gone:
					w.WriteHeader(401)
				case r.URL.Path == "/maas-api/health":
					w.WriteHeader(200)
				case r.URL.Path == "/maas-api/v1/api-keys" && r.Method == "POST":
					w.WriteHeader(201)
					_ = json.NewEncoder(w).Encode(map[string]string{"id": "k1", "key": mintedKey})
				case strings.HasPrefix(r.URL.Path, "/maas-api/v1/api-keys/"):
					mu.Lock()
					revoked = true
					mu.Unlock()
					w.WriteHeader(200)
				case r.URL.Path == "/v1/models":
					w.WriteHeader(tc.answer(auth))
					_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"qwen35-9b-coder"}]}`)
				case r.URL.Path == "/v1/chat/completions":
					w.WriteHeader(tc.answer(auth))
					_, _ = io.WriteString(w, okChat)
				default:
					w.WriteHeader(404)
				}
			}))
			t.Cleanup(srv.Close)
			rep, _, err := verify.Run(context.Background(), verify.Options{
				Inventory: inventory.Default(), Reader: healthy(t),
				DataPath: &verify.DataPathOptions{Endpoint: srv.URL, Token: adminToken, HTTPClient: srv.Client()},
			})
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			_ = rep.WriteText(&out)
			m := byCode(rep.Checks)
			for _, code := range []string{verify.CodeDSCReady, verify.CodeKuadrantReady, verify.CodeAuthEnforced} {
				if len(m[code]) == 0 || m[code][0].Result != verify.Pass {
					t.Fatalf("control-plane check %s must pass on the healthy snapshot: %+v", code, m[code])
				}
			}
			probes := map[string]string{verify.CodeNoKey401: `"no credentials"`, verify.CodeBogusKey: `"bogus API key"`}
			for _, code := range tc.wantBypass {
				got := m[code]
				if len(got) != 1 || got[0].Result != verify.Fail || got[0].Class != string(verify.ClassAuthBypass) ||
					!strings.Contains(got[0].Cause, verify.AuthBypass) || !strings.Contains(got[0].Cause, probes[code]) {
					t.Errorf("%s = %+v, want one AUTH_BYPASS failure naming the probe %s", code, got, probes[code])
				}
			}
			for _, code := range tc.wantPass {
				if got := m[code]; len(got) != 1 || got[0].Result != verify.Pass {
					t.Errorf("%s = %+v, want pass", code, got)
				}
			}
			if len(tc.wantBypass) > 0 {
				if rep.Passed {
					t.Errorf("verify passed on an open gateway:\n%s", out.String())
				}
				if !strings.Contains(out.String(), verify.AuthBypass) {
					t.Errorf("report does not say %s:\n%s", verify.AuthBypass, out.String())
				}
			} else if !rep.Passed {
				t.Errorf("verify failed on a gateway that refuses both probes:\n%s", out.String())
			}
			// Both probes were sent: one without a header, one with a
			// bogus sk-oai- key that is not the minted one.
			mu.Lock()
			defer mu.Unlock()
			var none, bogus bool
			for _, a := range chatAuths {
				none = none || a == ""
				bogus = bogus || strings.HasPrefix(a, "Bearer "+verify.BogusKeyPrefix)
			}
			if !none || !bogus {
				t.Errorf("chat requests %q: want one without credentials and one with a bogus key", chatAuths)
			}
			if strings.Contains(out.String(), mintedKey) {
				t.Errorf("output holds the minted key")
			}
		})
	}
}

const mintedKey = "sk-oai-n04MintedKEY0123456789"

// TestDataPathUnreachableFailsOnce: an endpoint that gives no HTTP answer
// (nothing listens on its port) fails MAAS-V020 alone, naming the cause;
// every later data-path check is skipped, pointing at it, and no probe
// subscription is created. Before, one cause failed four checks.
func TestDataPathUnreachableFailsOnce(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "https://" + l.Addr().String()
	l.Close()
	r := healthy(t)
	probes := &staticProbes{r: r}
	rep, _, err := verify.Run(context.Background(), verify.Options{
		Inventory: inventory.Default(), Reader: r,
		DataPath: &verify.DataPathOptions{Endpoint: endpoint, Token: adminToken, ProbeQuota: true, ProbeBodySize: 1 << 10, Probes: probes},
	})
	if err != nil {
		t.Fatal(err)
	}
	dataPath := map[string]bool{}
	for _, ci := range verify.Catalogue {
		dataPath[ci.Code] = ci.DataPath
	}
	var failed, skipped []string
	for _, c := range rep.Checks {
		if !dataPath[c.Code] {
			continue
		}
		switch c.Result {
		case verify.Fail:
			failed = append(failed, c.Code)
			if !strings.Contains(c.Cause, "unreachable") || !strings.Contains(c.Detail, "connection refused") {
				t.Errorf("%s: detail %q cause %q, want the refused connection and the unreachable endpoint", c.Code, c.Detail, c.Cause)
			}
		case verify.Skip:
			skipped = append(skipped, c.Code)
			if !strings.Contains(c.Detail, verify.CodeHealth) {
				t.Errorf("%s skipped with %q, want it to name %s", c.Code, c.Detail, verify.CodeHealth)
			}
		default:
			t.Errorf("%s: %s on an endpoint that does not answer", c.Code, c.Result)
		}
	}
	wantSkipped := []string{verify.CodeMintKey, verify.CodeListModels, verify.CodeChat, verify.CodeNoKey401, verify.CodeBogusKey, verify.CodeQuota429, verify.CodeBodySize, verify.CodeKeysRevoked}
	if !slices.Equal(failed, []string{verify.CodeHealth}) || !slices.Equal(skipped, wantSkipped) {
		t.Errorf("failed %v, skipped %v; want failed [%s], skipped %v", failed, skipped, verify.CodeHealth, wantSkipped)
	}
	if rep.Passed {
		t.Error("report passed with an unreachable endpoint")
	}
	if len(probes.created) != 0 {
		t.Errorf("probe subscriptions created for an unreachable endpoint: %v", probes.created)
	}
}

// TestListModelsNamesModelsOfOtherGroups: the inventory has a second model
// granted only to group team-b; the caller's key (subscription
// llama-coder-default) lists the one model it covers, and MAAS-V022
// passes saying which model it expected and why the other is not listed.
func TestListModelsNamesModelsOfOtherGroups(t *testing.T) {
	inv := inventory.Default()
	big := inv.ExternalModels[0]
	big.Name, big.TargetModel = "big-model", "big-model"
	inv.ExternalModels = append(inv.ExternalModels, big)
	ref := inventory.ModelRef{Name: big.Name, Namespace: big.Namespace}
	inv.AuthPolicies = append(inv.AuthPolicies, inventory.AuthPolicy{Name: "team-b-access", Groups: []string{"team-b"}, ModelRefs: []inventory.ModelRef{ref}})
	inv.Subscriptions = append(inv.Subscriptions, inventory.Subscription{Name: "team-b", Priority: 1, Groups: []string{"team-b"},
		ModelRefs: []inventory.SubscriptionModel{{Name: big.Name, Namespace: big.Namespace, TokenRateLimits: []inventory.TokenRateLimit{{Limit: 200000, Window: "1h"}}}}})
	srv := scriptedGateway(t, scripted{200, okChat, 0}, scripted{200, okChat, 0}, 64<<10)
	rep, _, err := verify.Run(context.Background(), verify.Options{
		Inventory: inv, Reader: healthy(t),
		DataPath: &verify.DataPathOptions{Endpoint: srv.URL, Token: adminToken, HTTPClient: srv.Client()},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := byCode(rep.Checks)[verify.CodeListModels]
	if len(got) != 1 || got[0].Result != verify.Pass {
		t.Fatalf("%s = %+v, want one pass", verify.CodeListModels, got)
	}
	for _, want := range []string{"listed: qwen35-9b-coder", "expected for subscription llama-coder-default: qwen35-9b-coder",
		"big-model granted only by subscription team-b (groups team-b; users <none>), not to you (admin, groups system:masters,system:authenticated)"} {
		if !strings.Contains(got[0].Detail, want) {
			t.Errorf("%s detail %q\nwant it to contain %q", verify.CodeListModels, got[0].Detail, want)
		}
	}
}
