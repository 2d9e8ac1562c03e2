package steps

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestOwnsTLSEnabled: platform/authorino-tls knows the Kuadrant operator
// has taken listener TLS on into its apply once its Apply entry holds
// spec.listener.tls.enabled; nil when it has no Apply entry (only its
// create, or none; TestTLSKept covers what the wait makes of that).
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

// TestTLSKept: waitTLSKept's condition. It ends on TLS off (the Kuadrant
// operator reverted it), and on TLS on once the operator's own apply holds
// enabled; a CR the operator has only created (no apply yet, as
// kuadrant-operator v1.5.2 creates it) or whose apply lacks enabled keeps
// it waiting; a CR that operator never wrote (created by another writer,
// owned by a Kuadrant all the same) is done at once.
func TestTLSKept(t *testing.T) {
	withTLS := `{"f:spec":{"f:listener":{"f:tls":{"f:enabled":{}}}}}`
	withoutTLS := `{"f:spec":{"f:oidcServer":{"f:tls":{"f:enabled":{}}}}}`
	cr := func(enabled bool, owned bool, entries ...metav1.ManagedFieldsEntry) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"listener": map[string]any{"tls": map[string]any{"enabled": enabled}}}}}
		if owned {
			u.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: "kuadrant.io/v1beta1", Kind: "Kuadrant", Name: "kuadrant", UID: "u"}})
		}
		u.SetManagedFields(entries)
		return u
	}
	apply := func(fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: kuadrantFieldManager, Operation: metav1.ManagedFieldsOperationApply, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}
	}
	create := metav1.ManagedFieldsEntry{Manager: kuadrantFieldManager, Operation: metav1.ManagedFieldsOperationUpdate, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(withTLS)}}
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		done bool
		want string
	}{
		{"reverted", cr(false, true, apply(withTLS)), true, "listener TLS off"},
		{"kept by the operator's apply", cr(true, true, create, apply(withTLS)), true, "listener TLS on"},
		{"kuadrant's, only created so far", cr(true, true, create), false, "waiting for the Kuadrant operator"},
		{"operator's apply lacks enabled", cr(true, true, apply(withoutTLS)), false, "waiting for the Kuadrant operator"},
		{"not kuadrant's", cr(true, false), true, "listener TLS on"},
		{"owned by a kuadrant, never written by its operator", cr(true, true, metav1.ManagedFieldsEntry{Manager: "maasctl-sim", Operation: metav1.ManagedFieldsOperationUpdate}), true, "listener TLS on"},
	} {
		r := tlsKept(tc.u)
		if r.Done != tc.done || !strings.Contains(r.Status, tc.want) {
			t.Errorf("%s: tlsKept = done %v %q, want done %v %q", tc.name, r.Done, r.Status, tc.done, tc.want)
		}
	}
}
