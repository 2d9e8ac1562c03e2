package e2e

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// TestEngineEveryRunStep is the Runner's side of Step.EveryRun and
// Step.ReadOnly (issue 14, item 9), generic: a read-only probe step that
// the steps package does not know runs its Apply on every install, its
// progress reaches the events each time, and a converged re-run still
// writes nothing (its checkpoint is not rewritten) while the step after it
// stays unchanged. A probe that fails on a later run fails and blocks its
// dependent; the run after that finds it done again. Against the real
// kube-apiserver (checkpoints, record, Lease).
func TestEngineEveryRunStep(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{noSim: true})
	ctx := context.Background()
	inv := inventory.Default()
	inv.Gateway.Hostname = appsHost

	var probes atomic.Int32
	var failProbe atomic.Bool
	probe := &steps.Step{
		ID: "demo/probe", Title: "a read-only check that reports on every run",
		EveryRun: true, ReadOnly: true,
		Apply: func(_ context.Context, e *steps.Env, s *steps.Step) error {
			probes.Add(1)
			e.Progress(s.ID, "warning demo: probe ran")
			if failProbe.Load() {
				return errors.New("demo probe failed")
			}
			return nil
		},
		Check: func(context.Context, *steps.Env, *steps.Step) (bool, string, error) { return true, "", nil },
	}
	const ns, name = "engine-everyrun", "engine-everyrun-settings"
	settings := &steps.Step{
		ID: "demo/settings", Title: "a ConfigMap after the probe", After: []string{"demo/probe"},
		Manifests: func(*inventory.Inventory, assets.Facts) ([]*unstructured.Unstructured, error) {
			return []*unstructured.Unstructured{
				{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
					"metadata": map[string]any{"name": ns, "labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue}}}},
				{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue}},
					"data":     map[string]any{"greeting": "hello"}}},
			}, nil
		},
	}
	reg, err := steps.RegistryOf([]*steps.Step{probe, settings}, []string{"demo"})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var evs []steps.Event
	install := steps.InstallOptions{Config: c.env.RESTConfig(), Inventory: inv, ToolVersion: "everyrun-test", Registry: reg,
		Emit: func(ev steps.Event) { mu.Lock(); evs = append(evs, ev); mu.Unlock() }}
	runOnce := func(what string) (*steps.Summary, []steps.Event, error) {
		t.Helper()
		mu.Lock()
		evs = nil
		mu.Unlock()
		sum, err := steps.Install(ctx, install)
		mu.Lock()
		defer mu.Unlock()
		if sum == nil {
			t.Fatalf("%s: no summary: %v", what, err)
		}
		return sum, slices.Clone(evs), err
	}
	progressOf := func(evs []steps.Event, id string) []string {
		var out []string
		for _, ev := range evs {
			if ev.Type == steps.EventProgress && ev.Step == id {
				out = append(out, ev.Message)
			}
		}
		return out
	}
	checkpointRV := func() string {
		cm, err := c.clients.Kube.CoreV1().ConfigMaps(steps.StateNamespace).Get(ctx, steps.CheckpointsConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("checkpoints ConfigMap: %v", err)
		}
		return cm.ResourceVersion
	}

	sum, evs1, err := runOnce("first install")
	if err != nil {
		t.Fatalf("first install: %v", err)
	}
	if !slices.Equal(sum.Done, []string{"demo/probe", "demo/settings"}) || probes.Load() != 1 {
		t.Fatalf("first install: done %v, probe ran %d times; want both done and one probe", sum.Done, probes.Load())
	}
	if p := progressOf(evs1, "demo/probe"); len(p) != 1 {
		t.Errorf("first install: probe progress %v, want one message", p)
	}
	rv := checkpointRV()

	// A converged re-run: the probe runs again and reports, nothing is
	// written (no checkpoint rewrite), the ConfigMap step stays unchanged.
	sum, evs2, err := runOnce("second install")
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	if probes.Load() != 2 {
		t.Errorf("second install: the EveryRun probe ran %d times in all, want 2", probes.Load())
	}
	if p := progressOf(evs2, "demo/probe"); len(p) != 1 || !strings.Contains(p[0], "probe ran") {
		t.Errorf("second install: probe progress %v, want its warning again", p)
	}
	if !slices.Contains(stepsWith(evs2, steps.EventStarted), "demo/probe") {
		t.Errorf("second install: no started event for the probe: %v", evs2)
	}
	if len(sum.Done) != 0 || !slices.Equal(sum.Unchanged, []string{"demo/probe", "demo/settings"}) || sum.Writes != 0 {
		t.Errorf("second install: done %v, unchanged %v, %d writes; want both unchanged and no write", sum.Done, sum.Unchanged, sum.Writes)
	}
	if got := checkpointRV(); got != rv {
		t.Errorf("second install rewrote the checkpoints ConfigMap (resourceVersion %s -> %s)", rv, got)
	}

	// A drifted step that is not EveryRun is re-applied and done (its
	// checkpoint matched; only EveryRun steps report unchanged then).
	cm, err := c.clients.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["greeting"] = "edited"
	if _, err := c.clients.Kube.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sum, _, err = runOnce("install after a drift")
	if err != nil {
		t.Fatalf("install after a drift: %v", err)
	}
	if !slices.Equal(sum.Done, []string{"demo/settings"}) || !slices.Equal(sum.Unchanged, []string{"demo/probe"}) {
		t.Errorf("install after a drift: done %v, unchanged %v; want the settings re-applied (done) and the probe unchanged", sum.Done, sum.Unchanged)
	}
	if cm, err := c.clients.Kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{}); err != nil || cm.Data["greeting"] != "hello" {
		t.Errorf("the drifted ConfigMap was not repaired: %v %v", cm.Data, err)
	}

	// The probe now fails: its dependent is not run, its checkpoint says
	// failed.
	failProbe.Store(true)
	sum, _, err = runOnce("install with a failing probe")
	if err == nil || !strings.Contains(err.Error(), "demo probe failed") {
		t.Errorf("third install with a failing probe: err = %v, want the probe's failure", err)
	}
	if !slices.Equal(sum.Failed, []string{"demo/probe"}) || !slices.Equal(sum.Blocked, []string{"demo/settings"}) {
		t.Errorf("third install: failed %v, blocked %v; want the probe failed and the settings blocked", sum.Failed, sum.Blocked)
	}

	// Passing again: done (its checkpoint said failed), the settings step
	// unchanged.
	failProbe.Store(false)
	sum, _, err = runOnce("fourth install")
	if err != nil {
		t.Fatalf("fourth install: %v", err)
	}
	if !slices.Equal(sum.Done, []string{"demo/probe"}) || !slices.Equal(sum.Unchanged, []string{"demo/settings"}) {
		t.Errorf("fourth install: done %v, unchanged %v; want the probe done and the settings unchanged", sum.Done, sum.Unchanged)
	}
	if probes.Load() != 5 {
		t.Errorf("the probe ran %d times in five installs, want 5", probes.Load())
	}
}
