package steps

import (
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
