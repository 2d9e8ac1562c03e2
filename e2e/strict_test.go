package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/e2e/testenv"
	"github.com/maasctl/maasctl/internal/kube"
	"github.com/maasctl/maasctl/inventory"
)

// crdDir is the shared CRD tree the control plane loads.
func crdDir(t *testing.T) string {
	if d := os.Getenv("MAASCTL_CRDS"); d != "" {
		return d
	}
	d, err := filepath.Abs("../../shared/crds")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// operatorCRDs are the CRD files the operators install (RHOAI 3.5 set).
func operatorCRDs(t *testing.T) []string {
	var files []string
	for _, dir := range []string{"cnpg", "kuadrant", "authorino", "lws-operator", "opendatahub/rhoai-3.5", "odh-dashboard", "kserve", "ai-gateway-operator", "maas"} {
		m, err := filepath.Glob(filepath.Join(crdDir(t), dir, "*.yaml"))
		if err != nil || len(m) == 0 {
			t.Fatalf("no CRDs in %s: %v", dir, err)
		}
		files = append(files, m...)
	}
	return files
}

// TestRenderedObjectsPassStrictValidation sends every object of the default
// install to a real kube-apiserver
// serving the upstream CRDs, as a server-side apply dry run with
// fieldValidation=Strict: a field the CRD does not define, a wrong type or a
// pattern violation is an error there.
func TestRenderedObjectsPassStrictValidation(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	env, err := testenv.Start(ctx, testenv.Options{NoControllers: true})
	if err != nil {
		if os.Getenv("MAASCTL_REQUIRE_TESTENV") == "" {
			t.Skipf("local control plane unavailable: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	if err := testenv.InstallCRDs(ctx, env.RESTConfig(), operatorCRDs(t)...); err != nil {
		t.Fatalf("install operator CRDs: %v", err)
	}
	c, err := kube.New(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	inv := inventory.Default()
	r, err := assets.Render(inv, assets.Facts{Host: appsHost})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	ids := make([]string, 0, len(r))
	for id := range r {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	namespaces := map[string]bool{}
	for _, id := range ids {
		for _, o := range r[id] {
			objs = append(objs, o)
			if o.GetNamespace() != "" {
				namespaces[o.GetNamespace()] = true
			}
		}
	}
	for ns := range namespaces {
		n := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := c.Apply(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	if len(objs) < 25 {
		t.Fatalf("only %d rendered objects; the test would prove little", len(objs))
	}
	// maasctl patches the Authorino the Kuadrant operator creates; create
	// it first as the operator would (spec.listener and spec.oidcServer are
	// required by the CRD).
	authorino := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "operator.authorino.kuadrant.io/v1beta1", "kind": "Authorino",
		"metadata": map[string]any{"name": inv.Kuadrant.AuthorinoName, "namespace": inv.Kuadrant.Namespace},
		"spec": map[string]any{
			"listener":   map[string]any{"tls": map[string]any{"enabled": false}},
			"oidcServer": map[string]any{"tls": map[string]any{"enabled": false}},
		},
	}}
	ri, _, err := c.Resource(authorino.GroupVersionKind(), authorino.GetNamespace())
	if err != nil {
		t.Fatal(err)
	}
	// Created under the operator's field manager: maasctl's apply must not
	// take spec.oidcServer away from it.
	if _, err := ri.Create(ctx, authorino, metav1.CreateOptions{FieldManager: "authorino-operator"}); err != nil {
		t.Fatalf("create the operator's Authorino: %v", err)
	}
	// And the Deployment the authorino-operator makes for that CR, whose
	// container env maasctl sets.
	deploy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": inv.Kuadrant.AuthorinoName, "namespace": inv.Kuadrant.Namespace},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"authorino-resource": inv.Kuadrant.AuthorinoName}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"authorino-resource": inv.Kuadrant.AuthorinoName}},
				"spec":     map[string]any{"containers": []any{map[string]any{"name": "authorino", "image": "quay.io/kuadrant/authorino:v0.27.0"}}},
			},
		},
	}}
	if _, err := c.Dynamic.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}).Namespace(deploy.GetNamespace()).
		Create(ctx, deploy, metav1.CreateOptions{FieldManager: "authorino-operator"}); err != nil {
		t.Fatalf("create the operator's Authorino Deployment: %v", err)
	}
	for _, o := range objs {
		if o.GetKind() == "Service" || o.GetKind() == "Secret" && o.GetName() == "llama-coder-api-key" {
			continue // partial objects that only label/annotate what an operator or the user created
		}
		if _, err := c.DryRunApply(ctx, o); err != nil {
			t.Errorf("%s rejected: %v", kube.Describe(o), err)
		}
	}

	// The check can fail: an unknown field is rejected, not pruned.
	bad := r["rhoai/dsc"][0].DeepCopy()
	_ = unstructured.SetNestedField(bad.Object, "Managed", "spec", "components", "aigateway", "modelsAsService", "managementState")
	_, err = c.DryRunApply(ctx, bad)
	if err == nil || !strings.Contains(err.Error(), "modelsAsService") {
		t.Errorf("a DSC with the misspelt aigateway.modelsAsService was not rejected naming the field (err=%v)", err)
	}
}
