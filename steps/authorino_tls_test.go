package steps

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestOwnsTLSEnabled: platform/authorino-tls knows the Kuadrant operator
// has taken listener TLS on into its apply once its Apply entry holds
// spec.listener.tls.enabled; without such an entry there is nothing to wait
// for.
func TestOwnsTLSEnabled(t *testing.T) {
	entry := func(manager string, op metav1.ManagedFieldsOperationType, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	withTLS := `{"f:spec":{"f:listener":{"f:tls":{"f:enabled":{}}},"f:oidcServer":{"f:tls":{"f:enabled":{}}}}}`
	withoutTLS := `{"f:spec":{"f:oidcServer":{"f:tls":{"f:enabled":{}}}}}`
	for _, tc := range []struct {
		name    string
		entries []metav1.ManagedFieldsEntry
		want    string
	}{
		{"no entries", nil, "nil"},
		{"only a create by the operator", []metav1.ManagedFieldsEntry{entry(kuadrantFieldManager, metav1.ManagedFieldsOperationUpdate, withTLS)}, "nil"},
		{"operator's apply holds enabled", []metav1.ManagedFieldsEntry{entry("maasctl", metav1.ManagedFieldsOperationApply, withTLS), entry(kuadrantFieldManager, metav1.ManagedFieldsOperationApply, withTLS)}, "true"},
		{"operator's apply lost enabled to maasctl", []metav1.ManagedFieldsEntry{entry("maasctl", metav1.ManagedFieldsOperationApply, withTLS), entry(kuadrantFieldManager, metav1.ManagedFieldsOperationApply, withoutTLS)}, "false"},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		u.SetManagedFields(tc.entries)
		got := "nil"
		if o := ownsTLSEnabled(u, kuadrantFieldManager); o != nil {
			got = map[bool]string{true: "true", false: "false"}[*o]
		}
		if got != tc.want {
			t.Errorf("%s: ownsTLSEnabled = %s, want %s", tc.name, got, tc.want)
		}
	}
}
