package verify

import (
	"context"
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

// TestFailureModeCheck: MAAS-V017 reads the effective failure modes from
// Kuadrant's WasmPlugin (case N05).
func TestFailureModeCheck(t *testing.T) {
	fail := [2]string{"ratelimit-check", "allow"}
	for _, tc := range []struct {
		name   string
		plugin *unstructured.Unstructured
		mode   string
		want   Result
		in     []string
	}{
		{"no WasmPlugin yet", nil, "deny", Skip, []string{"not found"}},
		{"fail closed", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": {"ratelimit-check", "deny"}, "ratelimit-report-service": {"ratelimit-report", "deny"}}), "deny", Pass,
			[]string{"ratelimit-check-service=deny", "auth-service=deny"}},
		{"rate limits fail open (the case)", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail, "ratelimit-report-service": {"ratelimit-report", "allow"}}), "deny", Fail,
			[]string{"RATELIMIT_FAIL_OPEN on gateway maas-default-gateway", "ratelimit-check-service (ratelimit-check) failureMode allow", "ratelimit-report-service (ratelimit-report) failureMode allow", "maasctl install", "oc delete pod -n openshift-operators"}},
		{"allow is what the inventory says", wasmPlugin(map[string][2]string{"auth-service": {"auth", "deny"}, "ratelimit-check-service": fail}), "allow", Pass, nil},
		{"auth fails open", wasmPlugin(map[string][2]string{"auth-service": {"auth", "allow"}, "ratelimit-service": {"ratelimit", "deny"}}), "deny", Fail,
			[]string{"AUTH_FAIL_OPEN", "auth-service (auth) failureMode allow"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyReader(t)
			if tc.plugin != nil {
				r.Put(tc.plugin)
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
