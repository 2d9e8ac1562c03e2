package migrate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestWriteBackup(t *testing.T) {
	st := guideState(t, func(o map[string]*unstructured.Unstructured) {
		o["my-model"].SetManagedFields([]metav1.ManagedFieldsEntry{{Manager: "kubectl"}})
	})
	dir := filepath.Join(t.TempDir(), "maasctl-backup-x")
	now := time.Date(2026, 9, 1, 7, 0, 0, 0, time.UTC)
	b, err := WriteBackup(dir, "maasctl-backup-x", st, now)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]Role{}
	for _, e := range b.Manifest.Entries {
		roles[e.Ref.String()] = e.Role
	}
	if diff := cmp.Diff(map[string]Role{
		"ConfigMap maas-api/tier-to-group-mapping":                          RoleTierConfig,
		"AuthPolicy openshift-ingress/gateway-auth-policy":                  RoleOldPolicy,
		"TokenRateLimitPolicy openshift-ingress/gateway-tier-rate-limits":   RoleOldPolicy,
		"LLMInferenceService llm/my-model":                                  RoleModel,
		"LLMInferenceService llm/premium-model":                             RoleModel,
		"AuthPolicy redhat-ods-applications/gateway-default-auth":           RoleReference,
		"TokenRateLimitPolicy redhat-ods-applications/gateway-default-deny": RoleReference,
	}, roles); diff != "" {
		t.Errorf("backed-up objects (-want +got):\n%s", diff)
	}

	// Every object reads back as it was, without managedFields.
	re, err := OpenBackup(dir)
	if err != nil {
		t.Fatal(err)
	}
	if re.Manifest.ID != "maasctl-backup-x" || !re.Manifest.Created.Equal(now) {
		t.Errorf("manifest %+v", re.Manifest)
	}
	for _, e := range re.Manifest.Entries {
		got, err := re.Object(e)
		if err != nil {
			t.Fatal(err)
		}
		var want *unstructured.Unstructured
		for _, gp := range st.Policies {
			if key(gp.Object) == e.Ref.String() {
				want = gp.Object
			}
		}
		for _, u := range append(append([]*unstructured.Unstructured{}, st.TierConfigMaps...), st.Models...) {
			if key(u) == e.Ref.String() {
				want = u
			}
		}
		want = want.DeepCopy()
		want.SetManagedFields(nil)
		if diff := cmp.Diff(want.Object, got.Object); diff != "" {
			t.Errorf("%s read back (-want +got):\n%s", e.Ref, diff)
		}
	}
	state, err := os.ReadFile(filepath.Join(dir, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"Date: 2026-09-01T07:00:00Z", "gateway-auth-policy", "old (tier-based)", `tiers ["free","premium"]`} {
		if !strings.Contains(string(state), s) {
			t.Errorf("state summary lacks %q:\n%s", s, state)
		}
	}

	// The journal appends and reads back in order.
	if j, err := re.Journal(); err != nil || len(j) != 0 {
		t.Fatalf("a new backup has journal %v, %v", j, err)
	}
	for _, a := range []string{ActionApplied, ActionDeleted} {
		if err := re.Record(JournalEntry{Action: a, Object: ObjectRef{Kind: "ConfigMap", Name: a}, Created: a == ActionApplied}); err != nil {
			t.Fatal(err)
		}
	}
	j, err := re.Journal()
	if err != nil {
		t.Fatal(err)
	}
	if len(j) != 2 || j[0].Action != ActionApplied || !j[0].Created || j[1].Action != ActionDeleted || j[1].Time.IsZero() {
		t.Errorf("journal %+v", j)
	}

	// A backup never overwrites another.
	if _, err := WriteBackup(dir, "again", st, now); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("WriteBackup into a used directory: %v", err)
	}
}

func TestSameValue(t *testing.T) {
	tests := []struct {
		name string
		a, b any
		want bool
	}{
		{"int and float", int64(300), float64(300), true},
		{"different numbers", int64(300), int64(30), false},
		{"bool", true, true, true},
		{"bool and string", true, "true", false},
		{"strings", "maas-default-gateway", "maas-default-gateway", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := sameValue(tt.a, tt.b); got != tt.want {
				t.Errorf("sameValue(%v, %v) = %v", tt.a, tt.b, got)
			}
		})
	}
}

func TestDecodeAll(t *testing.T) {
	list := `apiVersion: v1
kind: List
items:
- apiVersion: components.platform.opendatahub.io/v1alpha1
  kind: ModelsAsService
  metadata: {name: default-modelsasservice}
  spec: {apiKeys: {maxExpirationDays: 90}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
`
	objs, err := decodeAll([]byte(list), "list.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].GetKind() != "ModelsAsService" || objs[1].GetKind() != "ConfigMap" {
		t.Fatalf("decoded %v", names(objs))
	}
	if v, _, _ := unstructured.NestedFieldNoCopy(objs[0].Object, "spec", "apiKeys", "maxExpirationDays"); v != int64(90) {
		t.Errorf("maxExpirationDays decoded as %T %v, want int64 90", v, v)
	}
}
