package dataplane

import (
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"google.golang.org/protobuf/types/known/structpb"
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
