package steps

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/internal/verify"
)

// TestOnlyKuadrantPending: the install's verify waits for a late
// Kuadrant write only while nothing but policy enforcement or the
// EnvoyFilter's failure modes fail.
func TestOnlyKuadrantPending(t *testing.T) {
	check := func(code string, r verify.Result) verify.Check { return verify.Check{Code: code, Result: r} }
	for _, tc := range []struct {
		name   string
		checks []verify.Check
		want   bool
	}{
		{"all pass", []verify.Check{check(verify.CodeDSCReady, verify.Pass)}, false},
		{"auth policy not enforced yet", []verify.Check{check(verify.CodeDSCReady, verify.Pass), check(verify.CodeAuthEnforced, verify.Fail)}, true},
		{"both policies not enforced yet", []verify.Check{check(verify.CodeAuthEnforced, verify.Fail), check(verify.CodeTokenLimitEnf, verify.Fail)}, true},
		{"another check fails too", []verify.Check{check(verify.CodeTokenLimitEnf, verify.Fail), check(verify.CodeSubscriptionAct, verify.Fail)}, false},
		{"only another check fails", []verify.Check{check(verify.CodeDBConfig, verify.Fail)}, false},
		{"failure modes not rewritten yet", []verify.Check{check(verify.CodeOperatorEnv, verify.Pass), check(verify.CodeFailureModes, verify.Fail)}, true},
		{"failure modes and the operator env both fail", []verify.Check{check(verify.CodeOperatorEnv, verify.Fail), check(verify.CodeFailureModes, verify.Fail)}, false},
	} {
		if got := onlyKuadrantPending(&verify.Report{Checks: tc.checks}); got != tc.want {
			t.Errorf("%s: onlyKuadrantPending = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSettle: the wait reads again while pending, reports each new
// message once, stops as soon as nothing is pending, at the deadline, or
// on the first read error.
func TestSettle(t *testing.T) {
	defer func(d time.Duration) { verifyRetry = d }(verifyRetry)
	verifyRetry = time.Millisecond
	var lines []string
	e := &Env{Progress: func(id, msg string) { lines = append(lines, id+": "+msg) }}
	state, reads := []string{"a", "a", "b", ""}, 0
	pending := func() (bool, string) { return state[reads] != "", state[reads] }
	read := func() error { reads++; return nil }
	if err := settle(context.Background(), e, "verify/status", time.Minute, pending, read); err != nil {
		t.Fatal(err)
	}
	if want := []string{"verify/status: waiting for: a", "verify/status: waiting for: b"}; reads != 3 || !slices.Equal(lines, want) {
		t.Errorf("reads %d, progress %q; want 3 reads and %q", reads, lines, want)
	}

	reads = 0
	if err := settle(context.Background(), e, "x", 0, func() (bool, string) { return true, "forever" }, read); err != nil || reads != 0 {
		t.Errorf("a wait of 0: err %v, %d reads; want none", err, reads)
	}
	boom := errors.New("boom")
	if err := settle(context.Background(), e, "x", time.Minute, func() (bool, string) { return true, "forever" }, func() error { return boom }); !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want %v", err, boom)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := settle(ctx, e, "x", time.Minute, func() (bool, string) { return true, "forever" }, read); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: got %v, want context.Canceled", err)
	}
}

// TestSettleFresh: every kind whose state the lagging checks judge is read
// again on each retry of the settle wait; the kinds of the checks that
// passed are not.
func TestSettleFresh(t *testing.T) {
	envoyFilter := schema.GroupVersionKind{Group: "networking.istio.io", Version: "v1alpha3", Kind: "EnvoyFilter"}
	wasmPlugin := schema.GroupVersionKind{Group: "extensions.istio.io", Version: "v1alpha1", Kind: "WasmPlugin"}
	for _, g := range []schema.GroupVersionKind{verify.AuthPolicyGVK, verify.TokenRateLimitPolicyGVK, verify.MaaSSubscriptionGVK, verify.MaaSAuthPolicyGVK, verify.KuadrantGVK, envoyFilter, wasmPlugin} {
		if !settleFresh(g) {
			t.Errorf("%s is not read again while the wait lasts", g)
		}
	}
	for _, g := range []schema.GroupVersionKind{verify.RouteGVK, verify.DeploymentGVK, verify.PodGVK, verify.SubscriptionGVK, verify.CSVGVK, verify.SecretGVK, verify.DSCGVK, verify.GatewayGVK} {
		if settleFresh(g) {
			t.Errorf("%s is read again on every retry; its check passed before the wait", g)
		}
	}
}
