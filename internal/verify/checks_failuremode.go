package verify

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WasmPluginGVK is the Istio WasmPlugin through which older Kuadrant
// operators configured the Wasm shim of a gateway (extensions.istio.io
// v1alpha1; spec.pluginConfig is the shim's config).
var WasmPluginGVK = schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin"}

// EnvoyFilterGVK is the Istio EnvoyFilter through which kuadrant-operator
// v1.5 configures the Wasm shim of a gateway: one per gateway, named like
// the WasmPlugin it replaces (WasmPluginName), labelled kuadrant.io/wasm;
// the operator deletes the gateway's old WasmPlugin when it writes it
// (kuadrant-operator v1.5.2 internal/controller/istio_extension_reconciler.go).
var EnvoyFilterGVK = schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"}

// RateLimitFailOpen names, in a failed MAAS-V017 check's cause, a gateway
// whose Wasm shim lets requests through unmetered when Limitador fails
// (case N05).
const RateLimitFailOpen = "RATELIMIT_FAIL_OPEN"

// AuthFailOpen names a gateway whose Wasm shim lets requests through
// unauthenticated when Authorino fails.
const AuthFailOpen = "AUTH_FAIL_OPEN"

// WasmPluginName is the name Kuadrant gives the WasmPlugin or EnvoyFilter
// of gateway ("kuadrant-<gateway>", in the Gateway's namespace;
// kuadrant-operator internal/wasm ExtensionName).
func WasmPluginName(gateway string) string { return "kuadrant-" + gateway }

// WasmConfigJSON returns the Wasm shim's configuration (kuadrant-operator
// internal/wasm Config, JSON) in the EnvoyFilter f: the string at
// configPatches[].patch.value.typed_config.value.config.configuration.value
// of the envoy.filters.http.wasm patch (kuadrant-operator internal/istio
// BuildEnvoyFilterWasmPatch). ok is false when no patch carries one (the
// operator empties the filter before it deletes it).
func WasmConfigJSON(f *unstructured.Unstructured) (config string, ok bool) {
	patches, _, _ := unstructured.NestedSlice(f.Object, "spec", "configPatches")
	for _, p := range patches {
		pm, _ := p.(map[string]any)
		if raw, found, _ := unstructured.NestedString(pm, "patch", "value", "typed_config", "value", "config", "configuration", "value"); found {
			return raw, true
		}
	}
	return "", false
}

// wasmServices returns the services of the Wasm shim config
// (services.<name>.{type, endpoint, failureMode, timeout}) in the
// EnvoyFilter f (WasmConfigJSON). It is nil when no patch carries a config
// or the JSON does not parse.
func wasmServices(f *unstructured.Unstructured) map[string]any {
	raw, ok := WasmConfigJSON(f)
	if !ok {
		return nil
	}
	var cfg struct {
		Services map[string]any `json:"services"`
	}
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		return nil
	}
	return cfg.Services
}

// checkFailureModes (MAAS-V017): the effective failure modes of the Wasm
// shim Kuadrant configured for the MaaS Gateway, read from its
// EnvoyFilter (kuadrant-operator v1.5, wasmServices) or, when there is
// none, its WasmPlugin (older operators; spec.pluginConfig.services).
// Each service has a type (auth, ratelimit, ratelimit-check,
// ratelimit-report) and a failureMode: every rate-limit service fails as
// kuadrant.rateLimitFailureMode says, and auth fails closed (deny,
// Kuadrant's default). The Subscription's env (MAAS-V013) is only the
// intent: the operator writes these values when it reconciles, with the
// env of its running process.
func checkFailureModes(s *State) Check {
	g := s.Inv.Gateway
	name := WasmPluginName(g.Name)
	var svcs map[string]any
	kind := "EnvoyFilter"
	if s.WasmFilter != nil {
		svcs = wasmServices(s.WasmFilter)
	}
	if svcs == nil && s.WasmPlugin != nil {
		kind = "WasmPlugin"
		svcs, _, _ = unstructured.NestedMap(s.WasmPlugin.Object, "spec", "pluginConfig", "services")
	}
	c := newCheck(CodeFailureModes, describe(kind, g.Namespace, name))
	if svcs == nil {
		filter := s.MissingReason("EnvoyFilter", g.Namespace, name)
		if s.WasmFilter != nil {
			filter = "holds no Wasm shim config"
		}
		return c.skip(fmt.Sprintf("EnvoyFilter %s; WasmPlugin %s (Kuadrant writes one once a policy targets the Gateway)", filter, s.MissingReason("WasmPlugin", g.Namespace, name)))
	}
	want := s.Inv.Kuadrant.RateLimitFailureMode
	names := make([]string, 0, len(svcs))
	for n := range svcs {
		names = append(names, n)
	}
	sort.Strings(names)
	var rlOpen, authOpen, seen []string
	for _, n := range names {
		m, _ := svcs[n].(map[string]any)
		typ, _ := m["type"].(string)
		mode, _ := m["failureMode"].(string)
		switch {
		case strings.HasPrefix(typ, "ratelimit"):
			seen = append(seen, n+"="+mode)
			if want != "" && mode != want {
				rlOpen = append(rlOpen, fmt.Sprintf("%s (%s) failureMode %s", n, typ, orNone(mode)))
			}
		case typ == "auth":
			seen = append(seen, n+"="+mode)
			if mode != "deny" {
				authOpen = append(authOpen, fmt.Sprintf("%s (%s) failureMode %s", n, typ, orNone(mode)))
			}
		}
	}
	if len(rlOpen)+len(authOpen) == 0 {
		return c.pass(fmt.Sprintf("gateway %s: %s", g.Name, strings.Join(seen, ", ")))
	}
	var causes []string
	if len(rlOpen) > 0 {
		causes = append(causes, fmt.Sprintf("%s on gateway %s: %s, the inventory wants %s (kuadrant.rateLimitFailureMode): when Limitador is down, restarting or not yet scheduled, requests pass without token or request quota", RateLimitFailOpen, g.Name, strings.Join(rlOpen, ", "), want))
	}
	if len(authOpen) > 0 {
		causes = append(causes, fmt.Sprintf("%s on gateway %s: %s: when Authorino fails, requests pass without an API key check", AuthFailOpen, g.Name, strings.Join(authOpen, ", ")))
	}
	k := s.Inv.Kuadrant
	fix := "maasctl install (sets the failure modes in the RHCL Subscription's spec.config.env, waits for the operator pod to run with them); if the Subscription already holds them, the running operator has not rewritten the " + kind + ": " + KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector)
	return c.fail(strings.Join(append(rlOpen, authOpen...), "; "), strings.Join(causes, "; "), fix)
}
