package sim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// TestDelayIntermediateStates checks the timing model of hold (issue 8):
// within a configured delay the simulators write the statuses upstream
// writes along the way and do their intrinsic work at once, while the
// status that ends a client's wait appears no earlier than the delay after
// its trigger.
//   - OLM: Subscription UpgradePending with currentCSV and installPlanRef
//     comes before installedCSV; AtLatestKnown with installedCSV and CSV
//     Succeeded not before it; the CSV's Installing phase comes before
//     Succeeded (its Deployment is made shortly before the end). The RHOAI
//     operator runs once its CSV Succeeded (operatorRunning) and then
//     creates default-dsci.
//   - DSCI: a spec change is a new trigger; Ready for the new generation
//     waits the whole delay again.
//   - DSC: OdhDashboardConfig and AIGateway are created inside the delay
//     (before the Ready condition's lastTransitionTime); phase Ready not
//     before it.
func TestDelayIntermediateStates(t *testing.T) {
	const (
		olmDelay  = 8 * time.Second
		dsciDelay = 3 * time.Second
		dscDelay  = 8 * time.Second
	)
	c := startCluster(t, Options{RHOAIVersion: RHOAI35, Delay: map[string]time.Duration{
		OLM: olmDelay, DSCI: dsciDelay, DSC: dscDelay,
	}})
	const ns, pkg, csvName = "redhat-ods-operator", "rhods-operator", "rhods-operator.3.5.0"

	start := time.Now()
	c.subscribe(t, ns, pkg, "stable-"+RHOAI35, "redhat-operators", []any{})
	c.waitFor(t, gvrSubscription, ns, pkg, olmDelay, "state UpgradePending with currentCSV and installPlanRef", func(u *unstructured.Unstructured) bool {
		return str(u, "status", "state") == "UpgradePending" && str(u, "status", "currentCSV") == csvName &&
			str(u, "status", "installPlanRef", "name") != "" && str(u, "status", "installedCSV") == ""
	})
	// No time bound on that: the condition itself (no installedCSV yet)
	// shows the state was written before the install ended.
	// The Deployment, and with it phase Installing, comes rolloutLead
	// before the delay ends (the operator's pod starts last on a cluster);
	// on a loaded machine its write can trail that moment, so only its
	// order before Succeeded is checked.
	c.waitFor(t, gvrCSV, ns, csvName, 2*olmDelay, "phase Installing", fieldIs("Installing", "status", "phase"))
	installing := time.Since(start)
	c.waitInstalled(t, ns, pkg, csvName)
	installed := time.Since(start)
	if installed < olmDelay {
		t.Errorf("csv Succeeded and subscription AtLatestKnown %s after the subscription, want at least the %s delay", installed, olmDelay)
	}
	if installing > installed {
		t.Errorf("csv Installing seen %s after the subscription, after it succeeded (%s)", installing, installed)
	}
	c.waitFor(t, gvrDSCI, "", defaultDSCI, olmDelay, "exists", exists)

	t.Run("dsci spec change waits the delay again", func(t *testing.T) {
		d := c.waitFor(t, gvrDSCI, "", defaultDSCI, time.Minute, "phase Ready", fieldIs(phaseReady, "status", "phase"))
		patch := []byte(`{"spec":{"trustedCABundle":{"customCABundle":"# maasctl-sim timing test\n"}}}`)
		changed := time.Now()
		p, err := c.dyn.Resource(gvrDSCI).Patch(t.Context(), defaultDSCI, types.MergePatchType, patch, metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.GetGeneration() == d.GetGeneration() {
			t.Fatalf("patch left generation %d unchanged", p.GetGeneration())
		}
		gen := p.GetGeneration()
		c.waitFor(t, gvrDSCI, "", defaultDSCI, time.Minute, "Ready for the new generation", func(u *unstructured.Unstructured) bool {
			cnd := findCondition(u, "Ready")
			g, _ := cnd["observedGeneration"].(int64)
			return cnd != nil && cnd["status"] == "True" && g == gen
		})
		if got := time.Since(changed); got < dsciDelay {
			t.Errorf("Ready for generation %d %s after the change, want at least the %s delay", gen, got, dsciDelay)
		}
	})

	t.Run("dsc work inside the delay, Ready after it", func(t *testing.T) {
		applied := time.Now()
		c.apply(t, gvrDSC, dsc(map[string]any{
			"dashboard": managed(),
			"aigateway": managed(),
		}))
		dash := c.waitFor(t, gvrDashboardConfig, defaultAppsNamespace, dashboardConfigName, dscDelay, "exists", exists)
		gw := c.waitFor(t, gvrAIGateway, "", aiGatewayInstanceName, dscDelay, "exists", exists)
		d := c.waitFor(t, gvrDSC, "", "default-dsc", 2*time.Minute, "phase Ready", fieldIs(phaseReady, "status", "phase"))
		if got := time.Since(applied); got < dscDelay {
			t.Errorf("DSC Ready %s after it was applied, want at least the %s delay", got, dscDelay)
		}
		// Inside the delay, judged by the timestamps the objects carry
		// (whole seconds) rather than by the test's elapsed time, which a
		// loaded machine stretches: both objects were created before the
		// DSC turned Ready.
		ready := findCondition(d, "Ready")
		at, _ := ready["lastTransitionTime"].(string)
		readyAt, err := time.Parse(time.RFC3339, at)
		if err != nil {
			t.Fatalf("DSC Ready condition's lastTransitionTime: %v (%v)", err, ready)
		}
		for _, o := range []*unstructured.Unstructured{dash, gw} {
			if created := o.GetCreationTimestamp().Time; !created.Before(readyAt) {
				t.Errorf("%s %s created at %s, not before the DSC turned Ready (%s)", o.GetKind(), o.GetName(), created.Format(time.RFC3339), readyAt.Format(time.RFC3339))
			}
		}
	})
}
