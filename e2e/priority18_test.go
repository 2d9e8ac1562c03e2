package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/doctor"
	"github.com/maasctl/maasctl/internal/verify"
	"github.com/maasctl/maasctl/inventory"
)

// TestSubscriptionPriorityShared (issue 18, "the real controller flags two
// subscriptions that share a priority"): a MaaSSubscription made by
// someone else with the priority of the inventory's subscription turns
// both SpecPriorityDuplicate=True (SharedPriority) in the simulated
// maas-controller; doctor names the inventory's subscription with the
// peer, and the printed fix (a free priority for the peer) clears the
// condition on both and the finding.
func TestSubscriptionPriorityShared(t *testing.T) {
	parallel(t)
	fullOnly(t, "a shared MaaSSubscription priority is named by doctor and its printed fix clears it (doctor TestRules covers the finding)")
	c := newCluster(t, clusterOptions{})
	mustSucceed(t, c.install(t))
	inv := inventory.Default()
	own := inv.Subscriptions[0]
	ns := inv.RHOAI.MaaSNamespace
	ri, _, err := c.clients.Resource(verify.MaaSSubscriptionGVK, ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	m := inv.ExternalModels[0]
	peer := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": verify.MaaSSubscriptionGVK.GroupVersion().String(), "kind": "MaaSSubscription",
		"metadata": map[string]any{"name": "team-extra", "namespace": ns},
		"spec": map[string]any{
			"owner":    map[string]any{"groups": []any{map[string]any{"name": "team-extra"}}},
			"priority": int64(own.Priority),
			"modelRefs": []any{map[string]any{"name": m.Name, "namespace": m.Namespace,
				"tokenRateLimits": []any{map[string]any{"limit": int64(1000), "window": "1m"}}}},
		},
	}}
	if _, err := ri.Create(ctx, peer, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create the peer MaaSSubscription: %v", err)
	}
	dup := func(name string) (string, string) {
		u, err := ri.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, x := range conds {
			if cm, _ := x.(map[string]any); cm["type"] == "SpecPriorityDuplicate" {
				s, _ := cm["status"].(string)
				msg, _ := cm["message"].(string)
				return s, msg
			}
		}
		return "", ""
	}
	waitDup := func(name, want string) string {
		t.Helper()
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(300 * time.Millisecond) {
			st, msg := dup(name)
			if st == want {
				return msg
			}
			if time.Now().After(deadline) {
				t.Fatalf("MaaSSubscription %s SpecPriorityDuplicate = %q (%s), want %s", name, st, msg, want)
			}
		}
	}
	if msg := waitDup(own.Name, "True"); !strings.Contains(msg, ns+"/team-extra") {
		t.Errorf("SpecPriorityDuplicate message of %s = %q, want the peer %s/team-extra", own.Name, msg, ns)
	}
	waitDup("team-extra", "True")

	rep, r := doctorRun(t, c, nil)
	f := findingOf(rep, doctor.CodeSharedPriority, "MaaSSubscription "+ns+"/"+own.Name)
	if f == nil {
		t.Fatalf("doctor: no %s on %s; codes %v\n%s", doctor.CodeSharedPriority, own.Name, rep.Codes(), r.stdout)
	}
	if f.Severity != doctor.Warning || !strings.Contains(f.Fix, "oc patch maassubscription team-extra -n "+ns) {
		t.Errorf("finding = %+v, want a warning whose fix patches the peer team-extra", *f)
	}
	applyFix(t, c, f.Fix)
	waitDup(own.Name, "False")
	waitDup("team-extra", "False")
	rep, r = doctorRun(t, c, nil)
	if findingOf(rep, doctor.CodeSharedPriority, "MaaSSubscription "+ns+"/"+own.Name) != nil {
		t.Errorf("doctor after the fix still reports %s\n%s", doctor.CodeSharedPriority, r.stdout)
	}
}
