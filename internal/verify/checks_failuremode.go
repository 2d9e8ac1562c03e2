package verify

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WasmPluginGVK is the Istio WasmPlugin the Kuadrant operator writes per
// gateway (kuadrant-operator internal/wasm, extensions.istio.io/v1alpha1).
var WasmPluginGVK = schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin"}

// RateLimitFailOpen names, in a failed MAAS-V017 check's cause, a gateway
// whose Wasm shim lets requests through unmetered when Limitador fails
// (case N05).
const RateLimitFailOpen = "RATELIMIT_FAIL_OPEN"

// AuthFailOpen names a gateway whose Wasm shim lets requests through
// unauthenticated when Authorino fails.
const AuthFailOpen = "AUTH_FAIL_OPEN"

// WasmPluginName is the name Kuadrant gives the WasmPlugin of gateway
// ("kuadrant-<gateway>", in the Gateway's namespace).
func WasmPluginName(gateway string) string { return "kuadrant-" + gateway }

// checkFailureModes (MAAS-V017): the effective failure modes, read from
// the WasmPlugin Kuadrant wrote for the MaaS Gateway
// (spec.pluginConfig.services.<name>.{type, failureMode}; service types
// auth, ratelimit, ratelimit-check, ratelimit-report): every rate-limit
// service fails as kuadrant.rateLimitFailureMode says, and auth fails
// closed (deny, Kuadrant's default). The Subscription's env (MAAS-V013)
// is only the intent: the operator writes these values when it
// reconciles, with the env of its running process.
func checkFailureModes(s *State) Check {
	g := s.Inv.Gateway
	name := WasmPluginName(g.Name)
	c := newCheck(CodeFailureModes, describe("WasmPlugin", g.Namespace, name))
	if s.WasmPlugin == nil {
		return c.skip("WasmPlugin " + s.MissingReason("WasmPlugin", g.Namespace, name) + " (Kuadrant writes it once a policy targets the Gateway)")
	}
	want := s.Inv.Kuadrant.RateLimitFailureMode
	svcs, _, _ := unstructured.NestedMap(s.WasmPlugin.Object, "spec", "pluginConfig", "services")
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
	fix := "maasctl install (sets the failure modes in the RHCL Subscription's spec.config.env, waits for the operator pod to run with them); if the Subscription already holds them, the running operator has not rewritten the WasmPlugin: " + KuadrantRestartCommand(k.OperatorNamespace, k.OperatorSelector)
	return c.fail(strings.Join(append(rlOpen, authOpen...), "; "), strings.Join(causes, "; "), fix)
}
