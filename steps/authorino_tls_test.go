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

// caItem is one spec.volumes item of an Authorino CR.
func caItem(name, path string) map[string]any {
	return map[string]any{"name": name, "mountPath": path, "configMaps": []any{"cm-" + name}}
}

func authorinoCR(items ...any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "operator.authorino.kuadrant.io/v1beta1", "kind": "Authorino",
		"metadata": map[string]any{"name": "authorino", "namespace": "kuadrant-system"}, "spec": map[string]any{}}}
	if items != nil {
		_ = unstructured.SetNestedSlice(u.Object, items, "spec", "volumes", "items")
	}
	return u
}

// TestMergeVolumes: maasctl's Authorino apply keeps the volumes others put
// in the CR (spec.volumes.items is an atomic list: an apply replaces it
// whole) and replaces its own by name.
func TestMergeVolumes(t *testing.T) {
	ours := caItem("openshift-service-ca", "/etc/ssl/certs/openshift-service-ca")
	for _, tc := range []struct {
		name string
		live *unstructured.Unstructured
		want []string // item names in order
	}{
		{"no live volumes", authorinoCR(), []string{"openshift-service-ca"}},
		{"only ours, mounted elsewhere before", authorinoCR(caItem("openshift-service-ca", "/old")), []string{"openshift-service-ca"}},
		{"another volume is kept first", authorinoCR(caItem("oidc-ca", "/etc/oidc")), []string{"oidc-ca", "openshift-service-ca"}},
		{"another and ours", authorinoCR(caItem("openshift-service-ca", "/old"), caItem("oidc-ca", "/etc/oidc")), []string{"oidc-ca", "openshift-service-ca"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cr := authorinoCR(ours)
			got := mergeVolumes(tc.live, cr)
			items, _, _ := unstructured.NestedSlice(got.Object, "spec", "volumes", "items")
			var names []string
			for _, it := range items {
				names = append(names, it.(map[string]any)["name"].(string))
				if it.(map[string]any)["name"] == "openshift-service-ca" && it.(map[string]any)["mountPath"] != "/etc/ssl/certs/openshift-service-ca" {
					t.Errorf("our item kept the live mountPath %v", it.(map[string]any)["mountPath"])
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.want, ",") {
				t.Errorf("items %v, want %v", names, tc.want)
			}
			if items, _, _ := unstructured.NestedSlice(cr.Object, "spec", "volumes", "items"); len(items) != 1 {
				t.Errorf("the rendered CR was changed: %d items", len(items))
			}
		})
	}
}

// TestEnvDrift: the Check of platform/authorino-tls judges the Authorino
// Deployment by the env variables it sets, by name, whatever else the
// container holds.
func TestEnvDrift(t *testing.T) {
	deploy := func(env ...any) *unstructured.Unstructured {
		c := map[string]any{"name": "authorino", "image": "authorino:v0.27.0"}
		if env != nil {
			c["env"] = env
		}
		return &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{c}}}}}}
	}
	v := func(n, val string) any { return map[string]any{"name": n, "value": val} }
	want := deploy(v("SSL_CERT_FILE", "/ca/b.crt"), v("REQUESTS_CA_BUNDLE", "/ca/b.crt"))
	for _, tc := range []struct {
		name string
		live *unstructured.Unstructured
		want string
	}{
		{"both set", deploy(v("SSL_CERT_FILE", "/ca/b.crt"), v("REQUESTS_CA_BUNDLE", "/ca/b.crt")), ""},
		{"both set among others, in another order", deploy(v("LOG_LEVEL", "debug"), v("REQUESTS_CA_BUNDLE", "/ca/b.crt"), v("SSL_CERT_FILE", "/ca/b.crt")), ""},
		{"none", deploy(), "spec.template.spec.containers[authorino].env[SSL_CERT_FILE]"},
		{"one missing", deploy(v("SSL_CERT_FILE", "/ca/b.crt")), "spec.template.spec.containers[authorino].env[REQUESTS_CA_BUNDLE]"},
		{"another value", deploy(v("SSL_CERT_FILE", "/etc/pki/other.crt"), v("REQUESTS_CA_BUNDLE", "/ca/b.crt")), "spec.template.spec.containers[authorino].env[SSL_CERT_FILE].value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := envDrift(tc.live, want); got != tc.want {
				t.Errorf("envDrift = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestMissingMounts: the env is set only once the operator mounted the
// CR's volumes in the Deployment's container.
func TestMissingMounts(t *testing.T) {
	d := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{
		map[string]any{"name": "authorino", "volumeMounts": []any{map[string]any{"name": "tls-cert", "mountPath": "/etc/ssl/certs/tls.crt"}}}}}}}}}
	want := caMounts(authorinoCR(caItem("openshift-service-ca", "/etc/ssl/certs/openshift-service-ca")))
	if got := missingMounts(d, want); len(got) != 1 || got[0] != "/etc/ssl/certs/openshift-service-ca" {
		t.Errorf("missing %v, want the service CA mount", got)
	}
	c := d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["containers"].([]any)[0].(map[string]any)
	c["volumeMounts"] = append(c["volumeMounts"].([]any), map[string]any{"name": "openshift-service-ca", "mountPath": "/etc/ssl/certs/openshift-service-ca"})
	if got := missingMounts(d, want); len(got) != 0 {
		t.Errorf("missing %v once mounted", got)
	}
}
