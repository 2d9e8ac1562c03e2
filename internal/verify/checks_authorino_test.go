package verify

import (
	"context"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/internal/release"
	"github.com/maasctl/maasctl/inventory"
)

// TestAuthorinoTrust: MAAS-V018 passes on the healthy fixture (the
// Deployment as authorino-operator v0.21.0 makes it from maasctl's CR,
// with maasctl's env) and names what is missing in each broken form.
func TestAuthorinoTrust(t *testing.T) {
	container := func(d *unstructured.Unstructured) map[string]any {
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		return cs[0].(map[string]any)
	}
	setContainer := func(d *unstructured.Unstructured, c map[string]any) {
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		cs[0] = c
		_ = unstructured.SetNestedSlice(d.Object, cs, "spec", "template", "spec", "containers")
	}
	for _, tc := range []struct {
		name   string
		edit   func(d *unstructured.Unstructured)
		noTLS  bool
		delete bool
		want   Result
		detail string
	}{
		{name: "healthy", want: Pass, detail: "SSL_CERT_FILE names the mounted service CA bundle"},
		{name: "no env", want: Fail, detail: "container authorino sets no SSL_CERT_FILE", edit: func(d *unstructured.Unstructured) {
			c := container(d)
			delete(c, "env")
			setContainer(d, c)
		}},
		{name: "file outside every mount", want: Fail, detail: "SSL_CERT_FILE=/etc/pki/ca.crt is in no volume", edit: func(d *unstructured.Unstructured) {
			c := container(d)
			c["env"] = []any{map[string]any{"name": "SSL_CERT_FILE", "value": "/etc/pki/ca.crt"}}
			setContainer(d, c)
		}},
		{name: "the bundle's file has another name", want: Fail, detail: "volume openshift-service-ca has no file service-ca.crt (its files: service-ca-bundle.crt)", edit: func(d *unstructured.Unstructured) {
			c := container(d)
			c["env"] = []any{map[string]any{"name": "SSL_CERT_FILE", "value": "/etc/ssl/certs/openshift-service-ca/service-ca.crt"}}
			setContainer(d, c)
		}},
		{name: "mount without its volume", want: Fail, detail: "which the Deployment does not have", edit: func(d *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(d.Object, []any{}, "spec", "template", "spec", "volumes")
		}},
		{name: "volume of another kind", want: Fail, detail: "holds no ConfigMap or Secret", edit: func(d *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(d.Object, []any{map[string]any{"name": "openshift-service-ca", "emptyDir": map[string]any{}}}, "spec", "template", "spec", "volumes")
		}},
		{name: "a ConfigMap volume without items", want: Pass, edit: func(d *unstructured.Unstructured) {
			_ = unstructured.SetNestedSlice(d.Object, []any{map[string]any{"name": "openshift-service-ca", "configMap": map[string]any{"name": "ca-bundle"}}}, "spec", "template", "spec", "volumes")
		}},
		{name: "Deployment missing", delete: true, want: Fail, detail: "not found"},
		{name: "Authorino TLS left to someone else", noTLS: true, delete: true, want: Skip},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := healthyReader(t)
			inv := inventory.Default()
			inv.Kuadrant.AuthorinoTLS = !tc.noTLS
			if tc.edit != nil {
				edit(t, r, DeploymentGVK, "kuadrant-system", "authorino", tc.edit)
			}
			if tc.delete {
				r.Remove(DeploymentGVK, "kuadrant-system", "authorino")
			}
			s, err := Snapshot(context.Background(), r, inv, release.Release{})
			if err != nil {
				t.Fatal(err)
			}
			c := checkAuthorinoTrust(s)
			if c.Result != tc.want || !strings.Contains(c.Detail, tc.detail) {
				t.Fatalf("%s %s %q, want %s with %q", c.Code, c.Result, c.Detail, tc.want, tc.detail)
			}
			if c.Result == Fail && (c.Cause == "" || !strings.HasPrefix(c.Fix, "maasctl install") && !strings.HasPrefix(c.Fix, "oc get authorino")) {
				t.Errorf("cause %q, fix %q", c.Cause, c.Fix)
			}
		})
	}
}
