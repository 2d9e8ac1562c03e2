package sim

import (
	"encoding/json"
	"strings"
	"testing"

	"go.uber.org/zap/zaptest"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestWritesKeepManagedFields: the simulators send their status writes,
// finalizer and spec updates without metadata.managedFields (issue 16:
// they are a third of a MaaS object's JSON). The real API server must keep
// every manager's entry, the server-side applier's above all (TestKillAnywhere
// compares the fields maasctl owns through it), and add the simulator's
// own for the status subresource and for the main resource.
func TestWritesKeepManagedFields(t *testing.T) {
	c := startAPIServerOnly(t, Options{})
	m, err := newManager(c.cfg, Options{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// A class no simulated controller reconciles (not openshiftGatewayController).
	data, _ := json.Marshal(map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "managed-fields"},
		"spec":     map[string]any{"controllerName": "example.com/not-simulated"},
	})
	force := true
	applied, err := c.dyn.Resource(gvrGatewayClass).Patch(ctx, "managed-fields", types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "maasctl", Force: &force})
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	out, err := m.writeStatus(ctx, gvrGatewayClass, applied, map[string]any{
		"conditions": conditions(nil, cond("Accepted", false, "Pending", "not simulated").gen(applied.GetGeneration())),
	})
	if err != nil || out == nil {
		t.Fatalf("writeStatus: %v (object %v)", err, out)
	}
	u := out.DeepCopy()
	u.SetLabels(map[string]string{"example.com/touched": "yes"})
	u.SetManagedFields(nil)
	if _, err := c.dyn.Resource(gvrGatewayClass).Update(ctx, u, metaUpdate); err != nil {
		t.Fatalf("update without managedFields: %v", err)
	}
	live, err := c.dyn.Resource(gvrGatewayClass).Get(ctx, "managed-fields", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if reason := mstr(findCondition(live, "Accepted"), "reason"); reason != "Pending" {
		t.Errorf("status condition Accepted reason %q, want Pending (the status write did not land)", reason)
	}
	if live.GetLabels()["example.com/touched"] != "yes" {
		t.Errorf("labels %v: the update did not land", live.GetLabels())
	}
	found := map[string]string{}
	for _, e := range live.GetManagedFields() {
		raw := ""
		if e.FieldsV1 != nil {
			raw = string(e.FieldsV1.Raw)
		}
		found[e.Manager+"|"+string(e.Operation)+"|"+e.Subresource] = raw
	}
	for k, field := range map[string]string{
		"maasctl|Apply|":            `"f:controllerName"`,
		"maasctl-sim|Update|status": `"f:conditions"`,
		"maasctl-sim|Update|":       `"f:example.com/touched"`,
	} {
		if raw, ok := found[k]; !ok || !strings.Contains(raw, field) {
			t.Errorf("managedFields entry %s owning %s: got %q (present %v); all entries: %v", k, field, raw, ok, found)
		}
	}
}
