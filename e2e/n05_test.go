package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// TestN05RateLimitFailsClosed: Kuadrant's rate limiting fails open
// unless deny is configured and reaches the data plane (case N05). It runs
// on the real Kuadrant operator (kuadrant-operator v1.5.2): the failure
// modes it checks are the ones the operator writes, from the env of its
// process, into the EnvoyFilter of the MaaS Gateway.
//
// What maasctl already did before this test (and TestB19RHCLSubscriptionEnv
// covers): kuadrant.rateLimitFailureMode (default deny) becomes the three
// RATELIMIT_*_FAILURE_MODE variables of the RHCL Subscription's env, the
// Kuadrant CR waits for an operator pod running with them, verify
// MAAS-V013 names a missing one. New here: verify MAAS-V017 reads the
// effective value, the Wasm shim config Kuadrant writes for the Gateway
// (RATELIMIT_FAIL_OPEN), the install waits for the operator to rewrite it
// after a restart, and the variants: a Subscription value patched to
// allow (present but wrong, not missing), the inventory choosing allow,
// and a bad value refused before any write.
func TestN05RateLimitFailsClosed(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{})
	mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180"))
	verifyLive := func(t *testing.T, args ...string) (map[string]verify.Check, run) {
		t.Helper()
		r := c.maasctl(t, append([]string{"verify", "--live-only", "-o", "json"}, args...)...)
		var rep verify.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("verify -o json: %v\n%s\n%s", err, r.stdout, r.stderr)
		}
		out := map[string]verify.Check{}
		for _, ch := range rep.Checks {
			out[ch.Code] = ch
		}
		return out, r
	}
	sub := lobj{"operators.coreos.com/v1alpha1", "Subscription", "openshift-operators", "rhcl-operator"}
	filter := lobj{"networking.istio.io/v1alpha3", "EnvoyFilter", "openshift-ingress", verify.WasmPluginName("maas-default-gateway")}
	// The first install's verify waited for the operator's EnvoyFilter:
	// the operator pod ran with deny before the Kuadrant CR existed.
	if got := n05FilterModes(t, c, filter); got["ratelimit-check-service"] != "deny" || got["ratelimit-report-service"] != "deny" || got["auth-service"] != "deny" {
		t.Fatalf("after the install the EnvoyFilter's failure modes are %v, want deny for all", got)
	}

	t.Run("an operator without the env writes a fail-open EnvoyFilter: named, and restored by a re-run", func(t *testing.T) {
		// The case's trigger: the operator runs without the
		// RATELIMIT_*_FAILURE_MODE variables (someone replaced the
		// Subscription's env list), so it writes its default, allow.
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		var kept []any
		for _, e := range env {
			if n, _ := e.(map[string]any)["name"].(string); !strings.HasPrefix(n, "RATELIMIT_") {
				kept = append(kept, e)
			}
		}
		if len(kept) == len(env) {
			t.Fatalf("spec.config.env holds no RATELIMIT_ variable: %v", env)
		}
		old, _ := json.Marshal(env)
		repl, _ := json.Marshal(kept)
		c.patch(t, sub, types.JSONPatchType, fmt.Sprintf(`[{"op":"test","path":"/spec/config/env","value":%s},{"op":"replace","path":"/spec/config/env","value":%s}]`, old, repl))
		n05WaitModes(t, c, filter, "allow")
		v, r := verifyLive(t)
		ch := v[verify.CodeFailureModes]
		if r.exit == 0 || ch.Result != verify.Fail {
			t.Fatalf("verify exit %d, %s %s (%s): want failed on a fail-open EnvoyFilter", r.exit, ch.Code, ch.Result, ch.Detail)
		}
		mustContain(t, "MAAS-V017", ch.Object+" "+ch.Cause+" "+ch.Detail, "EnvoyFilter", verify.RateLimitFailOpen, "gateway maas-default-gateway", "ratelimit-check-service (ratelimit-check) failureMode allow", "ratelimit-report-service (ratelimit-report) failureMode allow", "wants deny")
		if strings.Contains(ch.Detail, "auth-service") {
			t.Errorf("MAAS-V017 names the auth service, which fails closed: %s", ch.Detail)
		}
		if ch := v[verify.CodeOperatorEnv]; ch.Result != verify.Fail || !strings.Contains(ch.Detail, inventory.EnvRateLimitCheckFailure) {
			t.Errorf("MAAS-V013 %s (%s): want failed naming %s", ch.Result, ch.Detail, inventory.EnvRateLimitCheckFailure)
		}
		d := c.maasctl(t, "doctor", "--live-only", "-o", "json")
		var drep doctor.Report
		if err := json.Unmarshal([]byte(d.stdout), &drep); err != nil {
			t.Fatalf("doctor -o json: %v\n%s", err, d.stderr)
		}
		// doctor names the root cause once: the Subscription's env (its
		// D025 finding explains MAAS-V017 too, VerifyCoverage).
		f := findingOf(&drep, doctor.CodeOperatorEnv, "Subscription openshift-operators/rhcl-operator")
		if f == nil || d.exit == 0 || !strings.Contains(f.Evidence, verify.CodeOperatorEnv) || !strings.Contains(f.Cause, "fail open") || !strings.HasPrefix(f.Fix, "maasctl install") {
			t.Fatalf("doctor exit %d, no %s finding on the Subscription naming the fail-open effect and the fix: %+v", d.exit, doctor.CodeOperatorEnv, drep.Findings)
		}
		// The re-run puts the variables back; OLM rolls the operator out
		// with them and the operator rewrites the EnvoyFilter seconds
		// after its new pod is Ready: the install's verify waits for that
		// (a first read right after the rollout still sees allow).
		again := c.install(t, "--set", "waitTimeoutSeconds=180")
		mustSucceed(t, again)
		mustContain(t, "operators/rhcl progress", progress(again, "operators/rhcl"), inventory.EnvRateLimitCheckFailure)
		if got := n05FilterModes(t, c, filter); got["ratelimit-check-service"] != "deny" || got["ratelimit-report-service"] != "deny" {
			t.Errorf("after the re-run the EnvoyFilter's failure modes are %v, want deny", got)
		}
		if v, r := verifyLive(t); r.exit != 0 {
			t.Errorf("verify after the re-run: exit %d, %s %s", r.exit, v[verify.CodeFailureModes].Result, v[verify.CodeFailureModes].Detail)
		}
	})

	t.Run("a Subscription value patched to allow is named and restored", func(t *testing.T) {
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		i := -1
		for j, e := range env {
			if e.(map[string]any)["name"] == inventory.EnvRateLimitCheckFailure {
				i = j
			}
		}
		if i < 0 {
			t.Fatalf("spec.config.env has no %s: %v", inventory.EnvRateLimitCheckFailure, env)
		}
		// Someone opens the rate limits on the Subscription by hand: the
		// variable is there, with the fail-open value.
		c.patch(t, sub, types.JSONPatchType, fmt.Sprintf(`[{"op":"replace","path":"/spec/config/env/%d/value","value":"allow"}]`, i))
		v, r := verifyLive(t)
		ch := v[verify.CodeOperatorEnv]
		if r.exit == 0 || ch.Result != verify.Fail {
			t.Fatalf("verify exit %d, %s %s (%s): want failed on RATELIMIT_CHECK_SERVICE_FAILURE_MODE=allow", r.exit, ch.Code, ch.Result, ch.Detail)
		}
		mustContain(t, "MAAS-V013", ch.Detail+" "+ch.Cause, inventory.EnvRateLimitCheckFailure+"=deny", "fail open")
		again := c.install(t, "--set", "waitTimeoutSeconds=180")
		mustSucceed(t, again)
		mustContain(t, "operators/rhcl progress", progress(again, "operators/rhcl"), inventory.EnvRateLimitCheckFailure)
		env, _, _ = unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		if got := inventory.EnvByName(env)[inventory.EnvRateLimitCheckFailure]; got != "deny" {
			t.Errorf("after the re-run %s=%q, want deny", inventory.EnvRateLimitCheckFailure, got)
		}
		if v, r := verifyLive(t); r.exit != 0 {
			t.Errorf("verify after the re-run: exit %d, %s %s", r.exit, v[verify.CodeOperatorEnv].Result, v[verify.CodeOperatorEnv].Detail)
		}
	})

	t.Run("the inventory's mode: a bad value is refused before any write, allow is honoured", func(t *testing.T) {
		bad := c.install(t, "--set", "kuadrant.rateLimitFailureMode=open")
		if bad.exit != 2 {
			t.Errorf("install with kuadrant.rateLimitFailureMode=open: exit %d, want 2", bad.exit)
		}
		mustContain(t, "install stderr", bad.stderr, "kuadrant.rateLimitFailureMode", "deny", "allow")
		if s := summaryOrNil(bad.events); s != nil && s.Writes != 0 {
			t.Errorf("the refused install wrote %d times", s.Writes)
		}
		// allow on purpose: the env holds allow, the operator restarts
		// with it and writes allow into the EnvoyFilter; install's last
		// step (verify) waits to see allow there.
		mustSucceed(t, c.install(t, "--set", "waitTimeoutSeconds=180", "--set", "kuadrant.rateLimitFailureMode=allow"))
		env, _, _ := unstructured.NestedSlice(c.live(t, sub).Object, "spec", "config", "env")
		have := inventory.EnvByName(env)
		for _, n := range []string{inventory.EnvRateLimitFailure, inventory.EnvRateLimitCheckFailure, inventory.EnvRateLimitReportFailure} {
			if have[n] != "allow" {
				t.Errorf("%s=%q, want allow", n, have[n])
			}
		}
		if got := n05FilterModes(t, c, filter); got["ratelimit-check-service"] != "allow" || got["auth-service"] != "deny" {
			t.Errorf("EnvoyFilter failure modes %v after the install with allow, want ratelimit allow, auth deny", got)
		}
		if v, _ := verifyLive(t, "--set", "kuadrant.rateLimitFailureMode=allow"); v[verify.CodeFailureModes].Result != verify.Pass {
			t.Errorf("MAAS-V017 with the inventory's allow: %s %s", v[verify.CodeFailureModes].Result, v[verify.CodeFailureModes].Detail)
		}
	})
}

// n05FilterModes reads the failureMode of each service of the Wasm shim
// config in the EnvoyFilter the Kuadrant operator wrote for the Gateway
// (the JSON at configPatches[].patch.value.typed_config.value.config.
// configuration.value; kuadrant-operator v1.5.2 internal/istio
// BuildEnvoyFilterWasmPatch). It fails the test when the filter is missing
// or holds no config.
func n05FilterModes(t *testing.T, c *cluster, filter lobj) map[string]string {
	t.Helper()
	f := c.live(t, filter)
	if f == nil {
		t.Fatalf("%s does not exist", filter)
	}
	patches, _, _ := unstructured.NestedSlice(f.Object, "spec", "configPatches")
	for _, p := range patches {
		raw, ok, _ := unstructured.NestedString(p.(map[string]any), "patch", "value", "typed_config", "value", "config", "configuration", "value")
		if !ok {
			continue
		}
		var cfg struct {
			Services map[string]struct {
				FailureMode string `json:"failureMode"`
			} `json:"services"`
		}
		if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
			t.Fatalf("%s: the Wasm config does not parse: %v", filter, err)
		}
		out := map[string]string{}
		for n, s := range cfg.Services {
			out[n] = s.FailureMode
		}
		return out
	}
	t.Fatalf("%s holds no Wasm shim config", filter)
	return nil
}

// n05WaitModes waits (3 minutes at most) until the operator has written
// mode as the failureMode of both rate-limit services of filter.
func n05WaitModes(t *testing.T, c *cluster, filter lobj, mode string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		got := n05FilterModes(t, c, filter)
		if got["ratelimit-check-service"] == mode && got["ratelimit-report-service"] == mode {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operator did not write failureMode %s into %s in 3 minutes: %v", mode, filter, got)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// summaryOrNil is the run's summary event, nil when it has none.
func summaryOrNil(evs []steps.Event) *steps.Summary {
	for _, ev := range evs {
		if ev.Summary != nil {
			return ev.Summary
		}
	}
	return nil
}
