package e2e

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
	"github.com/maasctl/maasctl/steps"
)

// TestEngineRunsAStepRegisteredOutsideSteps is the contract of a new step:
// its phase (here: this test), its manifest (Manifests) and one registry
// line (RegistryOf) are all it takes. The engine then plans it, diffs it,
// renders it for GitOps, installs it with checkpoints and the run record,
// finds it unchanged on a re-run, and uninstalls what it created, against
// the real kube-apiserver, without any step-ID table knowing it.
func TestEngineRunsAStepRegisteredOutsideSteps(t *testing.T) {
	parallel(t)
	c := newCaseCluster(t, caseOptions{noSim: true})
	ctx := context.Background()
	inv := inventory.Default()
	inv.Gateway.Hostname = appsHost

	const ns, name = "engine-demo", "engine-demo-settings"
	manifests := func(*inventory.Inventory, assets.Facts) ([]*unstructured.Unstructured, error) {
		nsObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": ns, "labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue}}}}
		cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns, "labels": map[string]any{assets.ManagedByLabel: assets.ManagedByValue}},
			"data":     map[string]any{"greeting": "hello"}}}
		return []*unstructured.Unstructured{nsObj, cm}, nil
	}
	reg, err := steps.RegistryOf([]*steps.Step{
		{ID: "demo/settings", Title: "a ConfigMap of a phase the steps package does not know", Manifests: manifests},
	}, []string{"demo"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := steps.RegistryOf([]*steps.Step{{ID: "other/x", Title: "x"}}, []string{"demo"}); err == nil || !strings.Contains(err.Error(), "removal order") {
		t.Errorf("a step whose removal group is not in the removal order: err = %v, want one naming the removal order", err)
	}
	cfg := c.env.RESTConfig()
	plan := steps.PlanOptions{Config: cfg, Inventory: inv, ToolVersion: "engine-test", Registry: reg}

	// render: one file for the step, in apply order, plus
	// kustomization.yaml and README.md.
	files, err := steps.RenderManifestsOf(reg, inv, assets.Facts{Host: appsHost})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 || files[0].Name != "01-demo-settings.yaml" || !strings.Contains(string(files[0].Data), "greeting: hello") || files[1].Name != "kustomization.yaml" {
		t.Fatalf("render: %d files, first %q:\n%s", len(files), files[0].Name, files[0].Data)
	}

	// plan and diff before the install: the step would run and create both.
	p, err := steps.Plan(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Run()) != 1 || p.Run()[0].ID != "demo/settings" {
		t.Fatalf("plan before install runs %+v, want demo/settings", p.Run())
	}
	d, err := steps.Diff(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Objects) != 2 || d.Objects[1].Action != steps.DiffCreate || d.Objects[1].Object != "ConfigMap "+ns+"/"+name {
		t.Fatalf("diff before install: %+v, want the Namespace and the ConfigMap created", d.Objects)
	}

	install := steps.InstallOptions{Config: cfg, Inventory: inv, ToolVersion: "engine-test", Registry: reg}
	sum, err := steps.Install(ctx, install)
	if err != nil {
		t.Fatalf("install: %v", err)
	}
	if len(sum.Done) != 1 || sum.Done[0] != "demo/settings" {
		t.Fatalf("install done %v, want [demo/settings]", sum.Done)
	}
	cmStub := &unstructured.Unstructured{}
	cmStub.SetAPIVersion("v1")
	cmStub.SetKind("ConfigMap")
	cmStub.SetNamespace(ns)
	cmStub.SetName(name)
	if live, err := c.clients.Get(ctx, cmStub); err != nil {
		t.Fatalf("the step's ConfigMap after install: %v", err)
	} else if v, _, _ := unstructured.NestedString(live.Object, "data", "greeting"); v != "hello" {
		t.Errorf("data.greeting = %q, want hello", v)
	}
	rec, err := steps.LoadRecord(ctx, c.clients)
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := rec.Lookup(cmStub); !ok || e.Origin != steps.OriginCreated || e.Step != "demo/settings" {
		t.Errorf("record entry of the ConfigMap: %+v (found %v), want created by demo/settings", e, ok)
	}

	// A re-run, plan and diff find it done.
	again, err := steps.Install(ctx, install)
	if err != nil {
		t.Fatalf("second install: %v", err)
	}
	if len(again.Unchanged) != 1 || again.Writes != 0 {
		t.Errorf("second install: unchanged %v, %d writes; want the step unchanged and no write", again.Unchanged, again.Writes)
	}
	if p, err := steps.Plan(ctx, plan); err != nil || len(p.Run()) != 0 {
		t.Errorf("plan after install: %+v, %v; want nothing to run", p, err)
	}
	if d, err := steps.Diff(ctx, plan); err != nil || d.Changed() {
		t.Errorf("diff after install: %+v, %v; want no change", d, err)
	}

	// uninstall removes what the step created, Namespace included.
	rep, err := steps.Uninstall(ctx, steps.UninstallOptions{Config: cfg, Inventory: inv, Registry: reg})
	if err != nil {
		t.Fatalf("uninstall: %v", err)
	}
	if len(rep.Steps) != 2 || rep.Steps[0].ID != "demo/settings" || rep.Steps[1].ID != steps.NamespacesStepID {
		t.Errorf("uninstall steps %+v, want demo/settings then %s", rep.Steps, steps.NamespacesStepID)
	}
	if _, err := c.clients.Get(ctx, cmStub); !apierrors.IsNotFound(err) {
		t.Errorf("the step's ConfigMap after uninstall: err = %v, want NotFound", err)
	}
	if _, err := c.clients.Kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Namespace %s after uninstall: err = %v, want NotFound", ns, err)
	}
}
