package dataplane

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

func TestHostMatches(t *testing.T) {
	for _, tc := range []struct {
		names []string
		host  string
		want  bool
	}{
		{[]string{"maas.apps.example.com"}, "maas.apps.example.com", true},
		{[]string{"maas.apps.example.com"}, "other.apps.example.com", false},
		{[]string{"*.apps.example.com"}, "maas.apps.example.com", true},
		{[]string{"*.apps.example.com"}, "apps.example.com", false},
		{[]string{"maas.apps.example.com"}, "127.0.0.1", true}, // the stand-in is dialled by IP
		{nil, "anything.example.com", true},
	} {
		if got := hostMatches(tc.names, tc.host); got != tc.want {
			t.Errorf("hostMatches(%v, %q) = %v, want %v", tc.names, tc.host, got, tc.want)
		}
	}
}

// TestPredicates evaluates predicates of the shape kuadrant-operator v1.5.2
// writes into the Wasm configuration (a route rule's path prefix, the
// gateway AuthPolicy's "when").
func TestPredicates(t *testing.T) {
	env, err := cel.NewEnv(cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{env: env}
	route := []string{`request.url_path.startsWith('/llm-coding-assistant/qwen35-9b-coder')`}
	notHealth := []string{`request.path != "/maas-api/health" || request.method != "GET"`}
	attrs := func(path, method string) map[string]any {
		return map[string]any{"url_path": path, "path": path, "method": method, "host": "maas.example.com", "scheme": "https", "headers": map[string]string{}}
	}
	for _, tc := range []struct {
		name  string
		preds []string
		attrs map[string]any
		want  bool
	}{
		{"model path", route, attrs("/llm-coding-assistant/qwen35-9b-coder/v1/chat/completions", "POST"), true},
		{"other model", route, attrs("/llm-coding-assistant/other/v1/chat/completions", "POST"), false},
		{"health GET skips auth", notHealth, attrs("/maas-api/health", "GET"), false},
		{"health POST is checked", notHealth, attrs("/maas-api/health", "POST"), true},
		{"no predicates", nil, attrs("/", "GET"), true},
		{"does not compile", []string{`request.path ==`}, attrs("/", "GET"), false},
		{"not a bool", []string{`request.path`}, attrs("/", "GET"), false},
	} {
		if got := g.eval(tc.preds, tc.attrs); got != tc.want {
			t.Errorf("%s: eval = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestIdentityOf(t *testing.T) {
	md, err := structpb.NewStruct(map[string]any{"identity": map[string]any{
		"userid": "alice", "groups": []any{"developers", "system:authenticated"}, "selected_subscription": "gold", "keyId": "k1",
	}})
	if err != nil {
		t.Fatal(err)
	}
	id := identityOf(&authv3.CheckResponse{DynamicMetadata: md})
	if id.User != "alice" || id.Subscription != "gold" || len(id.Groups) != 2 || id.Groups[0] != "developers" {
		t.Errorf("identityOf = %+v", id)
	}
	if id := identityOf(&authv3.CheckResponse{}); id.User != "" || id.Groups != nil {
		t.Errorf("identityOf without metadata = %+v, want empty", id)
	}
}

// fakeAuthorino is an ext_authz server with a scripted answer (unit tests
// of the wasm-shim stand-in only; the e2e tests ask the real Authorino).
type fakeAuthorino struct {
	authv3.UnimplementedAuthorizationServer
	mu     sync.Mutex
	answer *authv3.CheckResponse
	got    []*authv3.CheckRequest
}

func (f *fakeAuthorino) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, req)
	return f.answer, nil
}

// TestAuthorize: the stand-in finds the action set of a request in the
// Gateway's EnvoyFilter, asks Authorino under the action's scope over TLS
// checked for the Authorino Service's name (the fixture's Authorino CR
// turns listener TLS on), and answers Authorino's denial as it came; a
// request no action set matches is not asked about; without a Wasm
// configuration or a running Authorino the call fails closed with 500.
func TestAuthorize(t *testing.T) {
	ca, err := testenv.NewCA("test service CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("authorino-authorino-authorization.kuadrant-system.svc")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &fakeAuthorino{}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}})))
	authv3.RegisterAuthorizationServer(gs, fake)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)

	r := healthy(t)
	const scope = "7261f5154b18cc763c66b80aa17607185dc58da8339290debacd3a6fc3ee9a3d"
	config := `{"actionSets":[{"name":"x","routeRuleConditions":{"hostnames":["maas.apps.example.com"],"predicates":["request.url_path.startsWith('/llm-coding-assistant/qwen35-9b-coder')"]},` +
		`"actions":[{"service":"auth-service","scope":"` + scope + `","predicates":["request.path != \"/maas-api/health\" || request.method != \"GET\""]},` +
		`{"service":"ratelimit-check-service","scope":"llm-coding-assistant/qwen35-9b-coder"}]}],` +
		`"services":{"auth-service":{"type":"auth","failureMode":"deny"},"ratelimit-check-service":{"type":"ratelimit-check","failureMode":"deny"}}}`
	r.Put(&unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter",
		"metadata": map[string]any{"name": "kuadrant-maas-default-gateway", "namespace": "openshift-ingress"},
		"spec": map[string]any{"configPatches": []any{map[string]any{"patch": map[string]any{"value": map[string]any{
			"typed_config": map[string]any{"value": map[string]any{"config": map[string]any{"configuration": map[string]any{"value": config}}}}}}}}},
	}})
	env, err := cel.NewEnv(cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		t.Fatal(err)
	}
	running := true
	s := &Server{o: Options{Reader: r}, inv: inventory.Default()}
	g := &gateway{s: s, env: env, conn: map[string]*grpc.ClientConn{}, o: AuthorinoOptions{
		Addr:      func() (string, bool) { return ln.Addr().String(), running },
		ServiceCA: ca.PEM(),
	}}
	t.Cleanup(g.close)
	call := func(path string) (*httptest.ResponseRecorder, authIdentity, bool) {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "https://127.0.0.1:8443"+path, nil)
		req.Header.Set("Authorization", "Bearer sk-oai-abc")
		id, ok := g.authorize(w, req, path)
		return w, id, ok
	}
	const model = "/llm-coding-assistant/qwen35-9b-coder/v1/chat/completions"

	md, _ := structpb.NewStruct(map[string]any{"identity": map[string]any{"userid": "alice", "selected_subscription": "gold"}})
	fake.answer = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_OK)}, DynamicMetadata: md,
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: "X-MaaS-Username", Value: "alice"}}}}}}
	if _, id, ok := call(model); !ok || id.User != "alice" || id.Subscription != "gold" || id.Headers["x-maas-username"] != "alice" {
		t.Fatalf("allowed call: ok %v identity %+v", ok, id)
	}
	if len(fake.got) != 1 {
		t.Fatalf("Authorino asked %d times, want 1", len(fake.got))
	}
	a := fake.got[0].GetAttributes()
	if a.GetContextExtensions()["host"] != scope || a.GetRequest().GetHttp().GetPath() != model || a.GetRequest().GetHttp().GetHeaders()["authorization"] != "Bearer sk-oai-abc" {
		t.Errorf("Check request: context extensions %v, path %q, headers %v", a.GetContextExtensions(), a.GetRequest().GetHttp().GetPath(), a.GetRequest().GetHttp().GetHeaders())
	}

	fake.answer = &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(code.Code_PERMISSION_DENIED)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
			Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "X-Ext-Auth-Reason", Value: "not_found"}}},
			Body:    "no subscription"}}}
	if w, _, ok := call(model); ok || w.Code != http.StatusForbidden || w.Header().Get("X-Ext-Auth-Reason") != "not_found" || w.Body.String() != "no subscription" {
		t.Errorf("denied call: ok %v, HTTP %d, reason %q, body %q", ok, w.Code, w.Header().Get("X-Ext-Auth-Reason"), w.Body.String())
	}

	before := len(fake.got)
	if _, _, ok := call("/other/model/v1/chat/completions"); !ok || len(fake.got) != before {
		t.Errorf("a path no action set matches: ok %v, Authorino asked %d more times; want passed, not asked", ok, len(fake.got)-before)
	}

	running = false
	if w, _, ok := call(model); ok || w.Code != http.StatusInternalServerError {
		t.Errorf("no Authorino running: ok %v HTTP %d, want 500 (failureMode deny)", ok, w.Code)
	}
	running = true
	r.Remove(verify.EnvoyFilterGVK, "openshift-ingress", "kuadrant-maas-default-gateway")
	if w, _, ok := call(model); ok || w.Code != http.StatusInternalServerError {
		t.Errorf("no Wasm configuration: ok %v HTTP %d, want 500", ok, w.Code)
	}
}
