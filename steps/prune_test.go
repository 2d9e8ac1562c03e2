package steps

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/maasctl/maasctl/assets"
	"github.com/maasctl/maasctl/inventory"
)

// TestRecordDropped: only what an earlier run of the step created (with a
// UID) and the step no longer lists is dropped, in reverse apply order;
// adopted, absent and owned objects, Namespaces, other steps' objects and
// those still listed (also under another API group) never are.
func TestRecordDropped(t *testing.T) {
	r, err := decodeRecord(nil)
	if err != nil {
		t.Fatal(err)
	}
	models := testEntries("models/model", 5)
	origins := []Origin{OriginCreated, OriginCreated, OriginAdopted, OriginCreated, OriginOwned}
	for i, en := range models {
		r.set(en.Object(), en.Step, en.Order, origins[i], en.UID)
	}
	noUID := testEntries("models/model", 7)[6]
	r.set(noUID.Object(), noUID.Step, noUID.Order, OriginCreated, "")
	absent := testEntries("models/model", 8)[7]
	r.set(absent.Object(), absent.Step, absent.Order, OriginAbsent, "")
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName("team-b")
	r.set(ns, "models/model", 9, OriginCreated, "ns-uid")
	moved := testEntries("models/model", 11)[10]
	r.set(moved.Object(), moved.Step, moved.Order, OriginCreated, moved.UID)
	other := testEntries("access/subscription", 1)[0]
	r.set(other.Object(), other.Step, other.Order, OriginCreated, other.UID)

	// The step now lists only model-0000 (the inventory dropped the rest).
	s := &Step{ID: "models/model", Objects: func(*Env, *Step) []*unstructured.Unstructured {
		// model-0010 is still listed, under the API group another
		// RHOAI release serves ExternalModel in.
		m := moved.Object()
		m.SetAPIVersion("inference.opendatahub.io/v1alpha1")
		return []*unstructured.Unstructured{models[0].Object(), m}
	}}
	var got []string
	for _, en := range r.Dropped(&Env{}, s) {
		got = append(got, en.Name)
	}
	if want := []string{"model-0003", "model-0001"}; !slices.Equal(got, want) {
		t.Errorf("Dropped = %v, want %v (created with a UID, not listed, reverse apply order)", got, want)
	}
	msg := droppedMessage(r.Dropped(&Env{}, s))
	if !strings.Contains(msg, "ExternalModel llm-coding-assistant/model-0003, ExternalModel llm-coding-assistant/model-0001") || !strings.HasSuffix(msg, "install removes them") {
		t.Errorf("droppedMessage = %q", msg)
	}
	if m := droppedMessage(nil); m != "" {
		t.Errorf("droppedMessage(nil) = %q, want empty", m)
	}
}

// TestPruneStepsAndAccess: exactly the steps whose objects are the
// inventory's own lists prune, none of those that hold data; a pruning
// step's Access includes delete on its kinds but never on Namespaces.
func TestPruneStepsAndAccess(t *testing.T) {
	inv := inventory.Default()
	objs, err := assets.Render(inv, assets.Facts{Host: "maas.apps.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(inv)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{Inv: inv, Objects: objs}
	var pruning []string
	for _, s := range reg.Steps {
		if !s.Removal.Prune {
			continue
		}
		pruning = append(pruning, s.ID)
		if s.Removal.Data != "" {
			t.Errorf("%s prunes although its objects hold data (%s)", s.ID, s.Removal.Data)
		}
		deletes := 0
		for _, a := range s.access(env, func(gvk schema.GroupVersionKind) string { return strings.ToLower(gvk.Kind) + "s" }) {
			if a.Verb != "delete" {
				continue
			}
			deletes++
			if a.Resource == "namespaces" {
				t.Errorf("%s: Access deletes Namespaces", s.ID)
			}
		}
		if deletes == 0 {
			t.Errorf("%s prunes but its Access has no delete", s.ID)
		}
	}
	if want := []string{"models/provider", "models/model", "access/auth-policy", "access/subscription"}; !slices.Equal(pruning, want) {
		t.Errorf("pruning steps %v, want %v", pruning, want)
	}
}
