package steps

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// TestModelCheckNeedsExternalModelReady: the Check of models/model (re-run,
// status, plan) must call an ExternalModel done only when the MaaS
// controller reports it Ready, as the step's Apply waits for, on every
// release: inference.opendatahub.io on 3.5 and maas.opendatahub.io on
// 3.3/3.4 (case B16). A Pending one is not done, a Failed one is not done.
func TestModelCheckNeedsExternalModelReady(t *testing.T) {
	for _, v := range []string{release.RHOAI33, release.RHOAI34, release.RHOAI35} {
		t.Run(v, func(t *testing.T) {
			objs, err := assets.Render(inventory.Default(), assets.Facts{Host: "maas.apps.example.com", Release: release.New(v, "test")})
			if err != nil {
				t.Fatal(err)
			}
			reg, err := NewRegistry(inventory.Default())
			if err != nil {
				t.Fatal(err)
			}
			step := reg.Get("models/model")
			n := 0
			for _, o := range objs["models/model"] {
				if o.GetKind() != "ExternalModel" {
					continue
				}
				n++
				for phase, done := range map[string]bool{"Pending": false, "Failed": false, "Ready": true} {
					live := o.DeepCopy()
					if err := unstructured.SetNestedField(live.Object, phase, "status", "phase"); err != nil {
						t.Fatal(err)
					}
					if got := step.readiness(o)(live).Done; got != done {
						t.Errorf("%s %s phase %s: Check says done=%v, want %v", o.GetAPIVersion(), o.GetKind(), phase, got, done)
					}
				}
			}
			if n == 0 {
				t.Fatal("no ExternalModel rendered")
			}
		})
	}
}

// TestGatewayReadyNamesTheLoadBalancerFix: with gateway.serviceType
// LoadBalancer, a Gateway whose address is not assigned is waited on with
// the fix in its status; a programmed one is done; with ClusterIP the
// table's rule applies unchanged.
func TestGatewayReadyNamesTheLoadBalancerFix(t *testing.T) {
	gw := func(status, reason string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
			"metadata": map[string]any{"name": "maas-default-gateway", "namespace": "openshift-ingress", "generation": int64(1)},
			"status": map[string]any{"conditions": []any{
				map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "observedGeneration": int64(1)},
				map[string]any{"type": "Programmed", "status": status, "reason": reason, "observedGeneration": int64(1),
					"message": "Failed to assign to any requested addresses: address pending for hostname \"maas-default-gateway-openshift-default.openshift-ingress.svc.cluster.local\""},
			}},
		}}
	}
	if gatewayReady("ClusterIP")(gw("False", "AddressNotAssigned")) != nil {
		t.Error("ClusterIP: want the readiness table's rule (nil)")
	}
	cond := gatewayReady("LoadBalancer")(gw("False", "AddressNotAssigned"))
	if cond == nil {
		t.Fatal("LoadBalancer: no rule")
	}
	if r := cond(gw("False", "AddressNotAssigned")); r.Done || r.Failed != nil || !strings.Contains(r.Status, "use gateway.serviceType=ClusterIP") || !strings.Contains(r.Status, "address pending for hostname") {
		t.Errorf("address not assigned: %+v, want a wait naming the fix and the operator's message", r)
	}
	if r := cond(gw("True", "Programmed")); !r.Done {
		t.Errorf("programmed: %+v, want done", r)
	}
}
