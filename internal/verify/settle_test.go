package verify

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/inventory"
)

// changingReader serves a StaticReader and, on the n-th Get of the
// gateway AuthPolicy, runs then (the owner finishing its work between two
// reads, as Kuadrant does seconds after an install).
type changingReader struct {
	*StaticReader
	mu   sync.Mutex
	gets int
	n    int
	then func()
}

func (r *changingReader) Get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	if gvk == AuthPolicyGVK && name == "maas-gateway-auth" {
		r.mu.Lock()
		r.gets++
		if r.gets == r.n && r.then != nil {
			r.then()
		}
		r.mu.Unlock()
	}
	return r.StaticReader.Get(ctx, gvk, ns, name)
}

func TestSettle(t *testing.T) {
	defer func(d time.Duration) { settleInterval = d }(settleInterval)
	settleInterval = 10 * time.Millisecond
	const syncing = "AuthPolicy waiting for the following components to sync: [AuthConfig (5f0e3a1c9b)]"
	inv := inventory.Default()

	tests := []struct {
		name string
		// breakf breaks the healthy deployment before the first read.
		breakf func(t *testing.T, r *StaticReader)
		// fixAt is the read of the gateway AuthPolicy that sees it
		// fixed (0: never).
		fixAt  int
		settle time.Duration
		// wantPassed, wantReads (of the gateway AuthPolicy) and
		// wantWaiting (the messages given to Waiting).
		wantPassed  bool
		wantReads   int
		wantWaiting []string
	}{
		{name: "syncing, then enforced", fixAt: 3, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: true, wantReads: 3,
			wantWaiting: []string{"MAAS-V010 AuthPolicy openshift-ingress/maas-gateway-auth: Accepted=True (Accepted); Enforced=False (Unknown): " + syncing}},
		{name: "older generation, then judged", fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", func(o *unstructured.Unstructured) {
					o.SetGeneration(2)
					_ = unstructured.SetNestedField(o.Object, int64(1), "status", "observedGeneration")
				})
			},
			wantPassed: true, wantReads: 2,
			wantWaiting: []string{"status is for generation 1, the policy is at 2"}},
		{name: "syncing past the bound", settle: 50 * time.Millisecond,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: false, wantWaiting: []string{"MAAS-V010"}},
		{name: "settle 0 reads once", fixAt: 2, settle: 0,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
			},
			wantPassed: false, wantReads: 1},
		{name: "a class Kuadrant does not take is not waited for", fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Gateway (openshift-ingress/maas-default-gateway)]"))
			},
			wantPassed: false, wantReads: 1},
		{name: "another failure beside it is reported at once", fixAt: 2, settle: time.Minute,
			breakf: func(t *testing.T, r *StaticReader) {
				edit(t, r, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced(syncing))
				edit(t, r, MaaSAuthPolicyGVK, "models-as-a-service", "llama-coder-access", setPhase("Pending"))
			},
			wantPassed: false, wantReads: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			healthy := healthyReader(t)
			fixed, err := healthy.Get(context.Background(), AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth")
			if err != nil {
				t.Fatal(err)
			}
			s := healthyReader(t)
			tc.breakf(t, s)
			r := &changingReader{StaticReader: s, n: tc.fixAt, then: func() { s.Put(fixed.DeepCopy()) }}
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
			if tc.wantReads > 0 && r.gets != tc.wantReads {
				t.Errorf("the gateway AuthPolicy was read %d times, want %d", r.gets, tc.wantReads)
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
				for _, c := range rep.Failed() {
					if c.Code == CodeAuthEnforced && tc.name != "another failure beside it is reported at once" && c.Pending != strings.Contains(c.Detail, syncing) {
						t.Errorf("MAAS-V010 Pending %v for detail %q", c.Pending, c.Detail)
					}
				}
			}
		})
	}
}

// TestSettleStopsWithTheContext: an interrupt during the settle wait ends
// Run with the context's error.
func TestSettleStopsWithTheContext(t *testing.T) {
	s := healthyReader(t)
	edit(t, s, AuthPolicyGVK, "openshift-ingress", "maas-gateway-auth", notEnforced("AuthPolicy waiting for the following components to sync: [Limitador]"))
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err := Run(ctx, Options{Inventory: inventory.Default(), Reader: s, Settle: time.Hour, Waiting: func(string) { cancel() }})
	if err != context.Canceled {
		t.Fatalf("Run: %v, want context.Canceled", err)
	}
}
