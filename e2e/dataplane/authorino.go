package dataplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/ext"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/verify"
)

// AuthorinoOptions make the gateway stand-in ask a real Authorino for the
// auth decision of every model call, as the Kuadrant Wasm shim in the
// gateway's Envoy does (Kuadrant/wasm-shim v0.14: the auth action of a
// matching action set sends an envoy.service.auth.v3 Check whose context
// extension "host" is the action's scope, the name under which Authorino
// indexes the AuthConfig kuadrant-operator generated from the
// AuthPolicies). The action sets are read live from the Gateway's
// EnvoyFilter (or WasmPlugin) that the real kuadrant-operator writes
// (verify.WasmPluginName), so a policy that the operator did not
// translate protects nothing, and one it did is enforced by Authorino
// alone: 401 and 403 come from the AuthConfig, not from this package.
//
// Authorino's HTTP metadata calls reach maas-api's internal endpoints
// (internal.go) on a listener of their own, serving MaaSAPICert and
// registered with Route under maas-api's Service name.
//
// Not done here, for want of a data plane: Limitador. The rate-limit
// actions are skipped and token limits stay with limits.go, keyed by the
// identity Authorino returned.
type AuthorinoOptions struct {
	// Addr returns the host address ("127.0.0.1:PORT") of Authorino's
	// ext_authz gRPC listener, false while none runs (testenv
	// Env.ExposedAddr(testenv.AuthorinoServer); it changes when the
	// process restarts). Required.
	Addr func() (string, bool)
	// ServiceCA is the PEM of the CA that signs Authorino's listener
	// certificate (the OpenShift service CA). The call uses TLS, checked
	// against it for the Service name, when the Authorino CR turns listener
	// TLS on; plaintext otherwise. What on OpenShift makes the gateway's
	// auth cluster speak TLS is the ODH gateway's
	// security.opendatahub.io/authorino-tls-bootstrap (ods-ci PR #2972);
	// kuadrant-operator v1.5.2 itself writes the cluster without TLS
	// unless Kuadrant mTLS is on.
	ServiceCA []byte
	// MaaSAPICert is maas-api's serving certificate for its Service name
	// (maas-api.<ns>.svc.cluster.local), signed by a CA Authorino trusts.
	// Required.
	MaaSAPICert tls.Certificate
	// Route registers a Service "name:port" with the loopback address that
	// serves it (testenv ServiceProxy.Route). Required.
	Route func(hostPort, target string) error
}

// gateway is the Wasm shim stand-in.
type gateway struct {
	s    *Server
	o    AuthorinoOptions
	ln   net.Listener
	srv  *http.Server
	env  *cel.Env
	mu   sync.Mutex
	conn map[string]*grpc.ClientConn // by address and TLS mode
	prg  sync.Map                    // predicate → cel.Program, or nil when it does not compile
}

// wasmConfig is the part of the Wasm shim's configuration the stand-in
// uses (kuadrant-operator v1.5.2 internal/wasm types.go).
type wasmConfig struct {
	ActionSets []struct {
		Name                string `json:"name"`
		RouteRuleConditions struct {
			Hostnames  []string `json:"hostnames"`
			Predicates []string `json:"predicates"`
		} `json:"routeRuleConditions"`
		Actions []struct {
			Service    string   `json:"service"`
			Scope      string   `json:"scope"`
			Predicates []string `json:"predicates"`
		} `json:"actions"`
	} `json:"actionSets"`
	Services map[string]struct {
		Type        string `json:"type"`
		FailureMode string `json:"failureMode"`
	} `json:"services"`
}

// authIdentity is what an allowed call carries on: the identity filter of
// the gateway policy (Authorino's dynamic metadata "identity").
type authIdentity struct {
	User         string
	Groups       []string
	Subscription string
	// Headers are the request headers Authorino adds on OK (the policy's
	// response.success.headers: X-MaaS-Username, X-MaaS-Group as a JSON
	// list, X-MaaS-Subscription), by lower-case name.
	Headers map[string]string
}

// maasCaller is what maas-api reads of its caller from the headers the
// gateway added: the user, the groups and the subscription named for it.
func (id authIdentity) maasCaller() (user string, groups []string, subscription string) {
	user = id.Headers["x-maas-username"]
	if g := id.Headers["x-maas-group"]; g != "" {
		_ = json.Unmarshal([]byte(g), &groups)
	}
	return user, groups, id.Headers["x-maas-subscription"]
}

func startGateway(ctx context.Context, s *Server, o AuthorinoOptions) (*gateway, error) {
	if o.Addr == nil || o.Route == nil || len(o.MaaSAPICert.Certificate) == 0 {
		return nil, errors.New("dataplane: AuthorinoOptions needs Addr, Route and MaaSAPICert")
	}
	env, err := cel.NewEnv(cel.Variable("request", cel.MapType(cel.StringType, cel.DynType)), ext.Strings())
	if err != nil {
		return nil, fmt.Errorf("dataplane: CEL environment: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("dataplane: maas-api internal listener: %w", err)
	}
	svc := "maas-api." + s.inv.RHOAI.MaaSAPINamespace + ".svc.cluster.local:8443"
	if err := o.Route(svc, ln.Addr().String()); err != nil {
		_ = ln.Close()
		return nil, err
	}
	g := &gateway{s: s, o: o, ln: ln, env: env, conn: map[string]*grpc.ClientConn{}}
	g.srv = &http.Server{
		Handler:           http.HandlerFunc(s.serveInternal),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{o.MaaSAPICert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	go func() { _ = g.srv.ServeTLS(ln, "", "") }()
	return g, nil
}

func (g *gateway) close() {
	if g.srv != nil {
		_ = g.srv.Close()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.conn {
		_ = c.Close()
	}
}

// config reads the Wasm shim configuration of the MaaS Gateway: the
// EnvoyFilter kuadrant-operator v1.5 writes, else an older operator's
// WasmPlugin. nil when there is none.
func (g *gateway) config(ctx context.Context) *wasmConfig {
	gw := g.s.inv.Gateway
	name := verify.WasmPluginName(gw.Name)
	if f := g.s.get(ctx, verify.EnvoyFilterGVK, gw.Namespace, name); f != nil {
		if raw, ok := verify.WasmConfigJSON(f); ok {
			var c wasmConfig
			if json.Unmarshal([]byte(raw), &c) == nil {
				return &c
			}
		}
	}
	if p := g.s.get(ctx, verify.WasmPluginGVK, gw.Namespace, name); p != nil {
		pc, found, _ := unstructured.NestedMap(p.Object, "spec", "pluginConfig")
		if found {
			b, _ := json.Marshal(pc)
			var c wasmConfig
			if json.Unmarshal(b, &c) == nil {
				return &c
			}
		}
	}
	return nil
}

// eval reports whether every CEL predicate holds for the request
// attributes (wasm-shim: request.{url_path,path,method,host,scheme,
// headers}). A predicate that does not compile or evaluate to a bool is
// false: the shim would not match.
func (g *gateway) eval(preds []string, attrs map[string]any) bool {
	for _, p := range preds {
		prg := g.program(p)
		if prg == nil {
			return false
		}
		out, _, err := prg.Eval(map[string]any{"request": attrs})
		if err != nil {
			return false
		}
		if b, ok := out.Value().(bool); !ok || !b {
			return false
		}
	}
	return true
}

// program is predicate p compiled, once per predicate (the operator
// writes the same few predicates for every request); nil when it does not
// compile.
func (g *gateway) program(p string) cel.Program {
	if v, ok := g.prg.Load(p); ok {
		prg, _ := v.(cel.Program)
		return prg
	}
	var prg cel.Program
	if ast, iss := g.env.Compile(p); iss.Err() == nil {
		prg, _ = g.env.Program(ast)
	}
	g.prg.Store(p, prg)
	return prg
}

// authorize runs the gateway's auth for a request to path (the model route
// of the call: for body-routed calls the path of the model the body
// names, as the routing extension resolves it before the Wasm filter runs).
// It writes the answer and returns false when the request stops here: 500
// when the gateway has no Wasm configuration (strict: a real gateway would
// then pass the call unauthenticated) or Authorino cannot be asked
// (failureMode deny), else Authorino's denial with its status, headers
// and body. With no action set for the request, or no auth action in it,
// it passes with an empty identity.
func (g *gateway) authorize(w http.ResponseWriter, r *http.Request, path string) (authIdentity, bool) {
	ctx := r.Context()
	cfg := g.config(ctx)
	if cfg == nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "AUTH_FAILURE", "message": "the gateway has no Kuadrant Wasm configuration"})
		return authIdentity{}, false
	}
	headers := map[string]string{}
	for k, v := range r.Header {
		headers[strings.ToLower(k)] = strings.Join(v, ",")
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	attrs := map[string]any{"url_path": path, "path": path, "method": r.Method, "host": host, "scheme": "https", "headers": headers}
	for _, set := range cfg.ActionSets {
		if !hostMatches(set.RouteRuleConditions.Hostnames, host) || !g.eval(set.RouteRuleConditions.Predicates, attrs) {
			continue
		}
		for _, a := range set.Actions {
			if cfg.Services[a.Service].Type != "auth" || !g.eval(a.Predicates, attrs) {
				continue // rate-limit actions: no Limitador here (limits.go)
			}
			return g.check(w, r, a.Scope, path, host, headers)
		}
		return authIdentity{}, true
	}
	return authIdentity{}, true
}

// hostMatches reports whether host is one of the action set's hostnames
// (a "*." wildcard matches one or more labels). The stand-in is dialled
// by IP literal, standing for the Route whose host is the Gateway's, so an
// IP literal matches any.
func hostMatches(names []string, host string) bool {
	if net.ParseIP(host) != nil || len(names) == 0 {
		return true
	}
	for _, n := range names {
		if n == host || (strings.HasPrefix(n, "*.") && strings.HasSuffix(host, n[1:])) {
			return true
		}
	}
	return false
}

// check asks Authorino under scope and writes its denial.
func (g *gateway) check(w http.ResponseWriter, r *http.Request, scope, path, host string, headers map[string]string) (authIdentity, bool) {
	client, err := g.client(r.Context())
	if err != nil {
		authFailure(w)
		return authIdentity{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	resp, err := client.Check(ctx, &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
			Host: host, Method: r.Method, Path: path, Scheme: "https", Protocol: r.Proto, Headers: headers,
		}},
		ContextExtensions: map[string]string{"host": scope},
	}})
	if err != nil {
		authFailure(w)
		return authIdentity{}, false
	}
	if resp.GetStatus().GetCode() == int32(code.Code_OK) {
		return identityOf(resp), true
	}
	d := resp.GetDeniedResponse()
	status := http.StatusForbidden
	if d != nil && d.GetStatus() != nil && d.GetStatus().GetCode() != 0 {
		status = int(d.GetStatus().GetCode())
	}
	if d != nil {
		for _, h := range d.GetHeaders() {
			if hv := h.GetHeader(); hv != nil {
				w.Header().Set(hv.GetKey(), headerValue(hv))
			}
		}
	}
	w.WriteHeader(status)
	if d != nil && d.GetBody() != "" {
		_, _ = w.Write([]byte(d.GetBody()))
	}
	return authIdentity{}, false
}

func headerValue(h *corev3.HeaderValue) string {
	if h.GetValue() != "" {
		return h.GetValue()
	}
	return string(h.GetRawValue())
}

// identityOf reads an OK answer: the headers it adds to the request and
// the identity filter of its dynamic metadata (the gateway policy's
// response.success.filters.identity).
func identityOf(resp *authv3.CheckResponse) authIdentity {
	id := authIdentity{Headers: map[string]string{}}
	for _, h := range resp.GetOkResponse().GetHeaders() {
		if hv := h.GetHeader(); hv != nil {
			id.Headers[strings.ToLower(hv.GetKey())] = headerValue(hv)
		}
	}
	st := resp.GetDynamicMetadata().GetFields()["identity"].GetStructValue()
	if st == nil {
		return id
	}
	f := st.GetFields()
	id.User = f["userid"].GetStringValue()
	id.Subscription = f["selected_subscription"].GetStringValue()
	for _, v := range f["groups"].GetListValue().GetValues() {
		id.Groups = append(id.Groups, v.GetStringValue())
	}
	return id
}

// client returns a gRPC client for the Authorino that runs now, over TLS
// when its CR turns listener TLS on.
func (g *gateway) client(ctx context.Context) (authv3.AuthorizationClient, error) {
	addr, ok := g.o.Addr()
	if !ok {
		return nil, errors.New("no Authorino runs")
	}
	k := g.s.inv.Kuadrant
	useTLS := false
	if az := g.s.get(ctx, verify.AuthorinoGVK, k.Namespace, k.AuthorinoName); az != nil {
		useTLS, _, _ = unstructured.NestedBool(az.Object, "spec", "listener", "tls", "enabled")
	}
	key := fmt.Sprintf("%s|%t", addr, useTLS)
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.conn[key]; c != nil {
		return authv3.NewAuthorizationClient(c), nil
	}
	creds := insecure.NewCredentials()
	if useTLS {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(g.o.ServiceCA) {
			return nil, errors.New("no service CA to check Authorino's certificate")
		}
		creds = credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: k.AuthorinoService + "." + k.Namespace + ".svc", MinVersion: tls.VersionTLS12})
	}
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	g.conn[key] = c
	return authv3.NewAuthorizationClient(c), nil
}
