package steps

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

// TestUninstallOrder: derived from the registry in reverse, every step goes
// after the steps that depend on it (so custom resources go while their
// operators run, case B20), and the documented "Remove" order of
// reference/DEPLOYMENT.md holds wherever the dependencies allow it.
func TestUninstallOrder(t *testing.T) {
	reg, err := NewRegistry(inventory.Default())
	if err != nil {
		t.Fatal(err)
	}
	order := UninstallOrder(reg, []string{"legacy/thing"})
	if len(order) != len(reg.Steps)+1 {
		t.Fatalf("order has %d steps, want %d: %v", len(order), len(reg.Steps)+1, order)
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for _, s := range reg.Steps {
		for _, d := range s.After {
			if pos[d] <= pos[s.ID] {
				t.Errorf("%s is removed before %s, which depends on it", d, s.ID)
			}
		}
	}
	// reference/DEPLOYMENT.md "Remove": subscriptions and auth policies,
	// model objects, DSC, DSCI, (Gateway, Route, Kuadrant), the CNPG
	// Cluster, then the operators. Route and Kuadrant depend on the
	// Gateway in the registry, so they go before it.
	doc := [][2]string{
		{"access/subscription", "access/auth-policy"},
		{"access/auth-policy", "models/model"},
		{"models/model", "models/provider"},
		{"models/provider", "rhoai/dsc"},
		{"rhoai/dsc", "rhoai/dsci"},
		{"rhoai/dsci", "platform/gateway"},
		{"platform/route", "platform/gateway"},
		{"platform/kuadrant", "platform/gateway"},
		{"platform/kuadrant", "database/cluster"},
		{"database/cluster", "operators/rhoai"},
		{"database/cluster", "database/operator"},
		{"platform/kuadrant", "operators/rhcl"},
		{"operators/lws-instance", "operators/lws"},
		{"operators/rhcl", "database/operator"},
	}
	for _, p := range doc {
		if pos[p[0]] >= pos[p[1]] {
			t.Errorf("%s must be removed before %s; order: %v", p[0], p[1], order)
		}
	}
	if order[0] != "verify/status" {
		t.Errorf("first step %s, want verify/status", order[0])
	}
}

func TestClassify(t *testing.T) {
	absent := &RecordEntry{Origin: OriginAbsent}
	created := &RecordEntry{Origin: OriginCreated, UID: "u1"}
	adopted := &RecordEntry{Origin: OriginAdopted, UID: "u1"}
	tests := []struct {
		name    string
		prev    *RecordEntry
		exists  bool
		uid     string
		owned   bool
		want    Origin
		wantUID string
	}{
		{"first look, missing", nil, false, "", false, OriginAbsent, ""},
		{"first look, there: adopted", nil, true, "u1", false, OriginAdopted, "u1"},
		{"first look, owned by a controller", nil, true, "u1", true, OriginOwned, "u1"},
		{"absent then made by the step", absent, true, "u2", false, OriginCreated, "u2"},
		{"absent then made by an operator as a child", absent, true, "u2", true, OriginOwned, "u2"},
		{"absent and still missing", absent, false, "", false, OriginAbsent, ""},
		{"created, same object", created, true, "u1", false, OriginCreated, "u1"},
		{"created, re-created by the step", created, true, "u9", false, OriginCreated, "u9"},
		{"adopted stays adopted", adopted, true, "u1", false, OriginAdopted, "u1"},
		{"adopted one deleted, the step made a new one", adopted, true, "u9", false, OriginCreated, "u9"},
		{"created then deleted by hand", created, false, "", false, OriginCreated, "u1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, uid := classify(tt.prev, tt.exists, tt.uid, tt.owned)
			if got != tt.want || uid != tt.wantUID {
				t.Errorf("classify = %s %q, want %s %q", got, uid, tt.want, tt.wantUID)
			}
		})
	}
}

func TestBlockedStatusNamesFinalizers(t *testing.T) {
	ts := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	sub := &unstructured.Unstructured{}
	sub.SetKind("MaaSSubscription")
	sub.SetDeletionTimestamp(&ts)
	sub.SetFinalizers([]string{"maas.opendatahub.io/finalizer"})
	ns := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"conditions": []any{
		map[string]any{"type": "NamespaceFinalizersRemaining", "status": "True", "reason": "SomeFinalizersRemain",
			"message": "Some content in the namespace has finalizers remaining: maas.opendatahub.io/finalizer in 2 resource instances"},
	}}}}
	ns.SetKind("Namespace")
	ns.SetDeletionTimestamp(&ts)
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want []string
	}{
		{"not deleted", &unstructured.Unstructured{Object: map[string]any{}}, []string{"not deleted yet"}},
		{"finalizer", sub, []string{"Terminating since 2026-01-02T03:04:05Z", "finalizers maas.opendatahub.io/finalizer never cleared"}},
		{"terminating namespace", ns, []string{"SomeFinalizersRemain", "in 2 resource instances"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := blockedStatus(tt.obj)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
		})
	}
}
