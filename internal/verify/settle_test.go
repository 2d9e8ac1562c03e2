package verify

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
)

func TestSettle(t *testing.T) {
	defer func(d time.Duration) { settleInterval = d }(settleInterval)
	settleInterval = 10 * time.Millisecond
	const (
		syncing = "AuthPolicy waiting for the following components to sync: [AuthConfig (5f0e3a1c9b)]"
		mns     = "llm-coding-assistant"
		trlp    = "maas-trlp-qwen35-9b-coder"
		// kuadrant-operator v1.5.2's refusal of a predicate on auth where
		// no AuthPolicy is in effect yet (seen on the local control plane
		// right after an install).
		authUndeclaredMsg = "validation issues: [ERROR: <input>:1:1: undeclared reference to 'auth' (in container '')\n | auth.identity.selected_subscription_key == \"models-as-a-service/llama-coder-default@llm-coding-assistant/qwen35-9b-coder\"\n | ^]"
	)
	inv := inventory.Default()
	// The object each case breaks, and which the owner fixes later.
	type target struct {
		gvk      schema.GroupVersionKind
		ns, name string
	}
	gatewayAuth := target{AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth"}
	limits := target{TokenRateLimitPolicyGVK, mns, trlp}

	tests := []struct {
		name   string
		target target
		// breakf breaks the healthy deployment before the first read.
		breakf func(t *testing.T, r *StaticReader)
		// fixAt is the read of the target's kind that sees it fixed
		// (0: never).
		fixAt  int
		settle time.Duration
		// wantPassed, wantReads (of the target's kind; 0: not checked),
		// wantPending (the target's check Pending when it failed) and
		// wantWaiting (the messages given to Waiting).
		wantPassed  bool
		wantReads   int
		wantPending bool
		wantWaiting []string
	}{
		{name: "syncing, then enforced", target: gatewayAuth, fixAt: 3, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: true, wantReads: 3,
			wantWaiting: []string{"MAAS-V010 AuthPolicy openshift-ingress/maas-gateway-auth: Accepted=True (Accepted); Enforced=False (Unknown): " + syncing}},
		{name: "older generation, then judged", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", func(o *unstructured.Unstructured) {
					o.SetGeneration(2)
					_ = unstructured.SetNestedField(o.Object, int64(1), "status", "observedGeneration")
				})
			},
			wantPassed: true, wantReads: 2,
			wantWaiting: []string{"status is for generation 1, the policy is at 2"}},
		{name: "no status yet, then judged", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", setConditions())
			},
			wantPassed: true, wantReads: 2,
			wantWaiting: []string{"no Accepted condition; no Enforced condition"}},
		{name: "token limits waiting for Limitador, then enforced", target: limits, fixAt: 4, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, trlp, notEnforced("TokenRateLimitPolicy waiting for the following components to sync: [Limitador]"))
			},
			wantPassed: true, wantReads: 4,
			wantWaiting: []string{"MAAS-V012 TokenRateLimitPolicy llm-coding-assistant/maas-trlp-qwen35-9b-coder: Enforced=False (Unknown)"}},
		{name: "two AuthConfigs and Limitador in one message", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [AuthConfig (a1) AuthConfig (b2) Limitador]"))
			},
			wantPassed: true, wantReads: 2, wantWaiting: []string{"[AuthConfig (a1) AuthConfig (b2) Limitador]"}},
		{name: "syncing past the bound", target: gatewayAuth, settle: 50 * time.Millisecond,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: false, wantPending: true, wantWaiting: []string{"MAAS-V010"}},
		{name: "settle 0 reads once", target: gatewayAuth, fixAt: 2, settle: 0,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: false, wantReads: 1, wantPending: true},
		{name: "a class Kuadrant does not take is not waited for", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Gateway (openshift-ingress/maas-default-gateway)]"))
			},
			wantPassed: false, wantReads: 1},
		{name: "Authorino not Ready is not waited for", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Authorino AuthConfig (a1)]"))
			},
			wantPassed: false, wantReads: 1},
		{name: "not accepted is not waited for", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", setConditions(
					map[string]any{"type": "Accepted", "status": "False", "reason": "Invalid", "message": syncing},
					map[string]any{"type": "Enforced", "status": "False", "reason": "Unknown", "message": syncing}))
			},
			wantPassed: false, wantReads: 1},
		{name: "token limits not accepted (no Enforced condition) are not waited for", target: limits, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, trlp, setConditions(
					map[string]any{"type": "Accepted", "status": "False", "reason": "TargetNotFound", "message": "target not found"}))
			},
			wantPassed: false, wantReads: 1},
		{name: "token limits judged before the gateway AuthPolicy (auth undeclared), then enforced", target: limits, fixAt: 3, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, trlp, setConditions(
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "InvalidCelExpression", "message": authUndeclaredMsg}))
			},
			wantPassed: true, wantReads: 3,
			wantWaiting: []string{"MAAS-V012 TokenRateLimitPolicy llm-coding-assistant/maas-trlp-qwen35-9b-coder: Enforced=False (InvalidCelExpression)"}},
		{name: "auth undeclared while the gateway AuthPolicy is missing is not waited for", target: limits, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, trlp, setConditions(
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "InvalidCelExpression", "message": authUndeclaredMsg}))
				r.Remove(AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth")
			},
			wantPassed: false, wantReads: 1},
		{name: "another CEL error is not waited for", target: limits, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, TokenRateLimitPolicyGVK, mns, trlp, setConditions(
					map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
					map[string]any{"type": "Enforced", "status": "False", "reason": "InvalidCelExpression", "message": "validation issues: [ERROR: <input>:1:6: Syntax error: mismatched input]"}))
			},
			wantPassed: false, wantReads: 1},
		{name: "another failure beside it is reported at once", target: gatewayAuth, fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
				edit(t, r, MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", setPhase("Pending"))
			},
			wantPassed: false, wantReads: 1, wantPending: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fixed, err := healthyReader(t).Get(context.Background(), tc.target.gvk, tc.target.ns, tc.target.name)
			if err != nil {
				t.Fatal(err)
			}
			s := healthyReader(t)
			tc.breakf(t, s)
			// The owner fixes the target on the fixAt-th read of its kind.
			reads := 0
			r := &countingReader{Reader: s, n: map[string]int{}, onRead: func(gvk schema.GroupVersionKind) {
				if gvk != tc.target.gvk {
					return
				}
				if reads++; reads == tc.fixAt {
					s.Put(fixed.DeepCopy())
				}
			}}
			var waiting []string
			start := time.Now()
			rep, _, err := Run(context.Background(), Options{Inventory: inv, Reader: r, Settle: tc.settle,
				Waiting: func(p string) { waiting = append(waiting, p) }})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Passed != tc.wantPassed {
				t.Errorf("passed %v, want %v; failed %v", rep.Passed, tc.wantPassed, rep.FailedCodes())
			}
			if tc.wantReads > 0 && reads != tc.wantReads {
				t.Errorf("%s was read %d times, want %d", tc.target.gvk.Kind, reads, tc.wantReads)
			}
			if len(waiting) != len(tc.wantWaiting) {
				t.Fatalf("Waiting told %q, want %d messages like %q", waiting, len(tc.wantWaiting), tc.wantWaiting)
			}
			for i, w := range tc.wantWaiting {
				if !strings.Contains(waiting[i], w) {
					t.Errorf("Waiting message %d %q, want it to contain %q", i, waiting[i], w)
				}
			}
			if tc.settle > 0 && tc.settle < time.Second {
				if d := time.Since(start); d < tc.settle {
					t.Errorf("gave up after %s, before the bound %s", d, tc.settle)
				}
			}
			if !rep.Passed {
				found := false
				for _, c := range rep.Failed() {
					if c.Object == describe(tc.target.gvk.Kind, tc.target.ns, tc.target.name) {
						found = true
						if c.Pending != tc.wantPending {
							t.Errorf("%s %s Pending %v, want %v (detail %q)", c.Code, c.Object, c.Pending, tc.wantPending, c.Detail)
						}
					}
				}
				if !found {
					t.Errorf("no failed check on %s %s/%s: %v", tc.target.gvk.Kind, tc.target.ns, tc.target.name, rep.FailedCodes())
				}
			}
		})
	}
}

// TestSettleReadsAgainOnlyWhatItWaitsFor: the retries of the settle wait
// read again the Kuadrant policies and the MaaS objects, not the kinds of
// the checks that passed on the first read.
func TestSettleReadsAgainOnlyWhatItWaitsFor(t *testing.T) {
	defer func(d time.Duration) { settleInterval = d }(settleInterval)
	settleInterval = 10 * time.Millisecond
	s := healthyReader(t)
	edit(t, s, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [AuthConfig (a1)]"))
	counts := &countingReader{Reader: s, n: map[string]int{}}
	var first map[string]int
	// Waiting is told once, after the first snapshot and before the
	// first retry.
	_, _, err := Run(context.Background(), Options{Inventory: inventory.Default(), Reader: counts, Settle: 55 * time.Millisecond,
		Waiting: func(string) { first = counts.take() }})
	if err != nil {
		t.Fatal(err)
	}
	retries := counts.take()
	if first["core"] == 0 || first["apps"] == 0 {
		t.Fatalf("first snapshot read %v: want the core and apps kinds too", first)
	}
	if retries["kuadrant.io"] < 3 {
		t.Errorf("the retries read kuadrant.io %d times, want once per retry (at least 3)", retries["kuadrant.io"])
	}
	for g, n := range retries {
		if g != "kuadrant.io" && g != "maas.opendatahub.io" {
			t.Errorf("the retries read group %q %d times; only the Kuadrant policies and MaaS objects are read again", g, n)
		}
	}
}

// TestSettleStopsWithTheContext: an interrupt during the settle wait ends
// Run with the context's error.
func TestSettleStopsWithTheContext(t *testing.T) {
	s := healthyReader(t)
	edit(t, s, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Limitador]"))
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err := Run(ctx, Options{Inventory: inventory.Default(), Reader: s, Settle: time.Hour, Waiting: func(string) { cancel() }})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
}

// TestTokenLimitsAuthUndeclared: a generated TokenRateLimitPolicy that
// Kuadrant refused because its predicates read auth where no AuthPolicy is
// in effect is explained as such, and the fix names the Gateway AuthPolicy.
func TestTokenLimitsAuthUndeclared(t *testing.T) {
	r := healthyReader(t)
	edit(t, r, TokenRateLimitPolicyGVK, "llm-coding-assistant", "maas-trlp-qwen35-9b-coder", setConditions(
		map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted"},
		map[string]any{"type": "Enforced", "status": "False", "reason": "InvalidCelExpression",
			"message": "validation issues: [ERROR: <input>:1:1: undeclared reference to 'auth' (in container '')]"}))
	rep, _, err := Run(context.Background(), Options{Inventory: inventory.Default(), Reader: r})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Failed() {
		if c.Code != CodeTokenLimitEnf {
			t.Errorf("unexpected failure %s %s: %s", c.Code, c.Object, c.Detail)
			continue
		}
		if !strings.Contains(c.Cause, "auth.identity") || !strings.Contains(c.Cause, "openshift-ingress/maas-gateway-auth") {
			t.Errorf("cause %q, want it to say auth.identity needs the Gateway AuthPolicy openshift-ingress/maas-gateway-auth", c.Cause)
		}
		if !strings.HasPrefix(c.Fix, "oc describe authpolicy maas-gateway-auth -n openshift-ingress; oc describe tokenratelimitpolicy maas-trlp-qwen35-9b-coder -n llm-coding-assistant") {
			t.Errorf("fix %q", c.Fix)
		}
		if !c.Pending {
			t.Error("not Pending although the Gateway AuthPolicy exists")
		}
		return
	}
	t.Fatalf("no %s failure: %v", CodeTokenLimitEnf, rep.FailedCodes())
}

// TestCheckBrief: a check on one line for progress messages, its
// detail's line breaks made spaces and a long detail cut.
func TestCheckBrief(t *testing.T) {
	c := Check{Code: CodeTokenLimitEnf, Object: "TokenRateLimitPolicy ns/p", Detail: "Enforced=False (InvalidCelExpression): [ERROR: <input>:1:1: undeclared reference to 'auth'\n | auth.identity\n | ^]"}
	if got, want := c.Brief(), "MAAS-V012 TokenRateLimitPolicy ns/p: Enforced=False (InvalidCelExpression): [ERROR: <input>:1:1: undeclared reference to 'auth' | auth.identity | ^]"; got != want {
		t.Errorf("Brief() = %q, want %q", got, want)
	}
	c.Detail = strings.Repeat("x", 500)
	if got := []rune(c.Brief()); len(got) != len("MAAS-V012 TokenRateLimitPolicy ns/p: ")+briefDetail || got[len(got)-1] != '…' {
		t.Errorf("Brief() of a 500-rune detail: %d runes, ends %q; want the detail cut to %d runes ending in …", len(got), string(got[len(got)-1]), briefDetail)
	}
}
