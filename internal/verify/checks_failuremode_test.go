package verify

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

func wasmPlugin(modes map[string][2]string) *unstructured.Unstructured {
	svcs := map[string]any{}
	for n, tm := range modes {
		svcs[n] = map[string]any{"type": tm[0], "failureMode": tm[1], "endpoint": "kuadrant-" + tm[0] + "-service", "timeout": "100ms"}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.istio.io/v1alpha1", "kind": "WasmPlugin",
		"metadata": map[string]any{"name": "kuadrant-maas-default-gateway", "namespace": "openshift-ingress"},
		"spec":     map[string]any{"pluginConfig": map[string]any{"services": svcs}},
	}}
}

// wasmFilter is the EnvoyFilter kuadrant-operator v1.5 writes instead, in
// the shape of its BuildEnvoyFilterWasmPatch (as a real v1.5.2 operator
// wrote it in TestVerifyDoctorGather with MAASCTL_REAL_KUADRANT=1): the shim config is a JSON
// string inside the wasm HTTP filter patch; a cluster patch follows.
func wasmFilter(t *testing.T, modes map[string][2]string) *unstructured.Unstructured {
	svcs := map[string]any{}
	for n, tm := range modes {
		svcs[n] = map[string]any{"type": tm[0], "failureMode": tm[1], "endpoint": "kuadrant-" + tm[0] + "-service", "timeout": "100ms"}
	}
	cfg, err := json.Marshal(map[string]any{"services": svcs, "actionSets": []any{map[string]any{"name": "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter",
		"metadata": map[string]any{"name": "kuadrant-maas-default-gateway", "namespace": "openshift-ingress", "labels": map[string]any{"kuadrant.io/wasm": "true"}},
		"spec": map[string]any{"configPatches": []any{
			map[string]any{"applyTo": "HTTP_FILTER", "patch": map[string]any{"operation": "INSERT_BEFORE", "value": map[string]any{
				"name": "envoy.filters.http.wasm",
				"typed_config": map[string]any{"@type": "type.googleapis.com/udpa.type.v1.TypedStruct", "value": map[string]any{"config": map[string]any{
					"name":          "kuadrant-wasm-shim",
					"configuration": map[string]any{"@type": "type.googleapis.com/google.protobuf.StringValue", "value": string(cfg)},
				}}},
			}}},
			map[string]any{"applyTo": "CLUSTER", "patch": map[string]any{"operation": "ADD", "value": map[string]any{"name": "kuadrant-wasm-server"}}},
		}},
	}}
}

// TestFailureModeCheck: MAAS-V017 reads the effective failure modes from
// Kuadrant's WasmPlugin (case N05).
func TestFailureModeCheck(t *testing.T) {
	fail := [2]string{"ratelimit-check", "allow"}
	for _, tc := range []struct {
		name   string
		plugin *unstructured.Unstructured
		filter *unstructured.Unstructured
		mode   string
		want   Result
		in     []string
	}{
		{"no WasmPlugin or EnvoyFilter yet", nil, nil, "deny", Skip, []string{"EnvoyFilter not found; WasmPlugin not found"}},
		{"fail closed", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": {"ratelimit-check", "deny"}, "ratelimit-report-service": {"ratelimit-report", "deny"}}), nil, "deny", Pass,
			[]string{"ratelimit-check-service=deny", "auth-service=deny"}},
		{"rate limits fail open (the case)", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail, "ratelimit-report-service": {"ratelimit-report", "allow"}}), nil, "deny", Fail,
			[]string{"RATELIMIT_FAIL_OPEN on gateway maas-default-gateway", "ratelimit-check-service (ratelimit-check) failureMode allow", "ratelimit-report-service (ratelimit-report) failureMode allow", "maasctl install", "oc delete pod -n openshift-operators", "rewritten the WasmPlugin"}},
		{"allow is what the inventory says", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail}), nil, "allow", Pass, nil},
		{"auth fails open", wasmPlugin(map[string][2]string{"auth-service": {"auth", "allow"}, "ratelimit-service": {"ratelimit", "deny"}}), nil, "deny", Fail,
			[]string{"AUTH_FAIL_OPEN", "auth-service (auth) failureMode allow"}},
		{"EnvoyFilter (kuadrant-operator v1.5) fails closed", nil, wasmFilter(t, map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": {"ratelimit-check", "deny"}, "ratelimit-report-service": {"ratelimit-report", "deny"}}), "deny", Pass,
			[]string{"ratelimit-report-service=deny", "auth-service=deny"}},
		{"EnvoyFilter rate limits fail open", nil, wasmFilter(t, map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail}), "deny", Fail,
			[]string{"RATELIMIT_FAIL_OPEN on gateway maas-default-gateway", "ratelimit-check-service (ratelimit-check) failureMode allow", "rewritten the EnvoyFilter"}},
		{"the EnvoyFilter wins over a stale WasmPlugin", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": {"ratelimit-check", "deny"}}), wasmFilter(t, map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail}), "deny", Fail,
			[]string{"ratelimit-check-service (ratelimit-check) failureMode allow"}},
		{"an emptied EnvoyFilter and no WasmPlugin", nil, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1alpha3", "kind": "EnvoyFilter",
			"metadata": map[string]any{"name": "kuadrant-maas-default-gateway", "namespace": "openshift-ingress"},
			"spec":     map[string]any{"targetRefs": []any{map[string]any{"kind": "Gateway", "name": "maas-default-gateway"}}},
		}}, "deny", Skip, []string{"EnvoyFilter holds no Wasm shim config; WasmPlugin not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyReader(t)
			if tc.plugin != nil {
				r.Put(tc.plugin)
			}
			if tc.filter != nil {
				r.Put(tc.filter)
			}
			inv := inventory.Default()
			inv.Kuadrant.RateLimitFailureMode = tc.mode
			s, err := Snapshot(context.Background(), r, inv, release.Release{})
			if err != nil {
				t.Fatal(err)
			}
			c := checkFailureModes(s)
			all := c.Detail + " | " + c.Cause + " | " + c.Fix
			if c.Result != tc.want {
				t.Fatalf("result %s, want %s: %s", c.Result, tc.want, all)
			}
			for _, w := range tc.in {
				if !strings.Contains(all, w) {
					t.Errorf("lacks %q: %s", w, all)
				}
			}
			if tc.want == Fail && strings.Contains(c.Detail, "auth-service") != strings.Contains(tc.name, "auth") {
				t.Errorf("names the wrong services: %s", c.Detail)
			}
		})
	}
}

// TestFailureModesPendingWhileEnvHeld: a fail-open EnvoyFilter is Pending
// (a later read may pass: the operator rewrites it on its next reconcile)
// only while the operator already runs with the failure-mode env
// (MAAS-V013 passes); with the env missing it is not, and a settle wait
// ends at once.
func TestFailureModesPendingWhileEnvHeld(t *testing.T) {
	inv := inventory.Default()
	open := map[string][2]string{"ratelimit-check-service": {"ratelimit-check", "allow"}, "auth-service": {"auth", "deny"}}
	checks := func(r Reader) map[string]Check {
		t.Helper()
		rep, _, err := Run(context.Background(), Options{Inventory: inv, Reader: r})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]Check{}
		for _, c := range rep.Checks {
			out[c.Code] = c
		}
		return out
	}
	r := healthyReader(t)
	r.Put(wasmFilter(t, open))
	c := checks(r)
	if env, fm := c[CodeOperatorEnv], c[CodeFailureModes]; env.Result != Pass || fm.Result != Fail || !fm.Pending {
		t.Errorf("env held: MAAS-V013 %s, MAAS-V017 %s pending %v (%s); want pass, and a pending failure", env.Result, fm.Result, fm.Pending, fm.Detail)
	}
	edit(t, r, SubscriptionGVK, "openshift-operators", "rhcl-operator", func(o *unstructured.Unstructured) {
		unstructured.RemoveNestedField(o.Object, "spec", "config", "env")
	})
	c = checks(r)
	if env, fm := c[CodeOperatorEnv], c[CodeFailureModes]; env.Result != Fail || fm.Result != Fail || fm.Pending {
		t.Errorf("env missing: MAAS-V013 %s, MAAS-V017 %s pending %v; want both failed, V017 not pending", env.Result, fm.Result, fm.Pending)
	}
	r.Put(wasmFilter(t, map[string][2]string{"ratelimit-check-service": {"ratelimit-check", "deny"}, "auth-service": {"auth", "deny"}}))
	if fm := checks(r)[CodeFailureModes]; fm.Result != Pass || fm.Pending {
		t.Errorf("closed filter: MAAS-V017 %s pending %v, want a pass", fm.Result, fm.Pending)
	}
}
