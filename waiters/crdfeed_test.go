package waiters

import (
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/maasctl/maasctl/internal/kube"
)

// TestSlimCRDKeepsWhatWaitsRead: the feed's transform drops a CRD's
// schemas, annotations and managedFields, and keeps what CRDEstablished,
// kindServed and kube.Clients.LearnCRD read: LearnCRD of the slim object
// maps the kind under its accepted names in each served version only (no
// request: the Clients point at an address nothing listens on).
func TestSlimCRDKeepsWhatWaitsRead(t *testing.T) {
	big := map[string]any{"type": "object", "properties": map[string]any{"spec": map[string]any{"type": "object", "description": "a long schema"}}}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{
			"name": "widgets.example.com", "resourceVersion": "42", "uid": "u-1",
			"annotations":   map[string]any{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			"managedFields": []any{map[string]any{"manager": "olm"}},
		},
		"spec": map[string]any{
			"group": "example.com", "scope": "Cluster",
			"names": map[string]any{"kind": "Widget", "plural": "widgets"},
			"versions": []any{
				map[string]any{"name": "v1", "served": true, "storage": true, "schema": map[string]any{"openAPIV3Schema": big}},
				map[string]any{"name": "v1beta1", "served": false, "storage": false, "schema": map[string]any{"openAPIV3Schema": big}},
			},
		},
		"status": map[string]any{
			"conditions":     []any{map[string]any{"type": "Established", "status": "True"}},
			"acceptedNames":  map[string]any{"kind": "Widget", "plural": "widgets"},
			"storedVersions": []any{"v1"},
		},
	}}
	out, err := slimCRD(crd)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*unstructured.Unstructured)
	if s.GetName() != "widgets.example.com" || s.GetResourceVersion() != "42" || len(s.GetAnnotations()) != 0 || len(s.GetManagedFields()) != 0 {
		t.Errorf("metadata kept: %v", s.Object["metadata"])
	}
	vs, _, _ := unstructured.NestedSlice(s.Object, "spec", "versions")
	for _, v := range vs {
		if _, has := v.(map[string]any)["schema"]; has {
			t.Errorf("version %v kept its schema", v)
		}
	}
	if !ConditionTrue("Established")(s).Done {
		t.Error("the slim CRD lost its Established condition")
	}
	if !servesKind(s, schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}) {
		t.Error("servesKind does not see v1 Widget in the slim CRD")
	}
	if _, has := crd.Object["spec"].(map[string]any)["versions"].([]any)[0].(map[string]any)["schema"]; !has {
		t.Error("slimCRD changed its input")
	}

	c, err := kube.New(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.LearnCRD(s) {
		t.Fatal("LearnCRD learned nothing from the slim CRD")
	}
	m, err := c.Mapping(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Resource.Resource != "widgets" || m.Scope.Name() != meta.RESTScopeNameRoot {
		t.Errorf("mapping %v scope %s", m.Resource, m.Scope.Name())
	}
	// v1beta1 is not served: not learned, so Mapping asks discovery, which
	// cannot answer here.
	if _, err := c.Mapping(schema.GroupVersionKind{Group: "example.com", Version: "v1beta1", Kind: "Widget"}); err == nil {
		t.Error("v1beta1, not served, was mapped")
	}
	// Learning the CRD again without v1 served replaces the mapping.
	unserved := s.DeepCopy()
	_ = unstructured.SetNestedSlice(unserved.Object, []any{map[string]any{"name": "v2", "served": true, "storage": true}}, "spec", "versions")
	if !c.LearnCRD(unserved) {
		t.Fatal("LearnCRD of v2 learned nothing")
	}
	if _, err := c.Mapping(schema.GroupVersionKind{Group: "example.com", Version: "v2", Kind: "Widget"}); err != nil {
		t.Errorf("v2 not mapped after learning it: %v", err)
	}
	if _, err := c.Mapping(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}); err == nil {
		t.Error("v1 still mapped after the CRD was learned again without it")
	}
	// Not Established: nothing learned.
	notYet := s.DeepCopy()
	_ = unstructured.SetNestedSlice(notYet.Object, []any{map[string]any{"type": "Established", "status": "False"}}, "status", "conditions")
	notYet.SetName("gadgets.example.com")
	if c.LearnCRD(notYet) {
		t.Error("LearnCRD learned from a CRD that is not Established")
	}
}
