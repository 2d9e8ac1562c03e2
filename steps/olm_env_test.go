package steps

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/maasctl/maasctl/inventory"
)

func TestMergeEnvUpsertsByName(t *testing.T) {
	want := []inventory.EnvVar{{Name: "ISTIO_GATEWAY_CONTROLLER_NAMES", Value: "openshift.io/gateway-controller/v1"}, {Name: "AUTH_SERVICE_TIMEOUT", Value: "2s"}}
	e := func(n, v string) map[string]any { return map[string]any{"name": n, "value": v} }
	tests := []struct {
		name        string
		env         []any
		wantEnv     []any
		wantChanged []string
	}{
		{"empty", nil, []any{e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1"), e("AUTH_SERVICE_TIMEOUT", "2s")},
			[]string{"AUTH_SERVICE_TIMEOUT", "ISTIO_GATEWAY_CONTROLLER_NAMES"}},
		// B19: a merge patch left only AUTH_SERVICE_TIMEOUT; a user's FOO stays in place.
		{"keeps others, replaces in place", []any{e("FOO", "bar"), e("AUTH_SERVICE_TIMEOUT", "200ms")},
			[]any{e("FOO", "bar"), e("AUTH_SERVICE_TIMEOUT", "2s"), e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1")},
			[]string{"AUTH_SERVICE_TIMEOUT", "ISTIO_GATEWAY_CONTROLLER_NAMES"}},
		{"already there: unchanged", []any{e("AUTH_SERVICE_TIMEOUT", "2s"), e("FOO", "bar"), e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1")},
			[]any{e("AUTH_SERVICE_TIMEOUT", "2s"), e("FOO", "bar"), e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1")}, nil},
		{"valueFrom replaced, duplicate dropped", []any{
			map[string]any{"name": "AUTH_SERVICE_TIMEOUT", "valueFrom": map[string]any{"configMapKeyRef": map[string]any{"name": "x", "key": "y"}}},
			e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1"), e("AUTH_SERVICE_TIMEOUT", "2s")},
			[]any{e("AUTH_SERVICE_TIMEOUT", "2s"), e("ISTIO_GATEWAY_CONTROLLER_NAMES", "openshift.io/gateway-controller/v1")},
			[]string{"AUTH_SERVICE_TIMEOUT"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed := mergeEnv(tt.env, want)
			if d := cmp.Diff(tt.wantEnv, got); d != "" {
				t.Errorf("env (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantChanged, changed); d != "" {
				t.Errorf("changed (-want +got):\n%s", d)
			}
		})
	}
}

func TestEnvPatchTestsWhatItRead(t *testing.T) {
	env := []any{map[string]any{"name": "A", "value": "1"}}
	sub := func(spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	}
	tests := []struct {
		name string
		live *unstructured.Unstructured
		want []map[string]any
	}{
		{"env there", sub(map[string]any{"name": "p", "config": map[string]any{"env": []any{}}}), []map[string]any{
			{"op": "test", "path": "/spec/config/env", "value": []any{}}, {"op": "replace", "path": "/spec/config/env", "value": env}}},
		// config.resources must survive: add env into the config, not a new config.
		{"config without env", sub(map[string]any{"config": map[string]any{"resources": map[string]any{}}}), []map[string]any{
			{"op": "test", "path": "/spec/config", "value": map[string]any{"resources": map[string]any{}}}, {"op": "add", "path": "/spec/config/env", "value": env}}},
		{"no config", sub(map[string]any{"name": "p"}), []map[string]any{
			{"op": "test", "path": "/spec", "value": map[string]any{"name": "p"}}, {"op": "add", "path": "/spec/config", "value": map[string]any{"env": env}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := cmp.Diff(tt.want, envPatch(tt.live, env)); d != "" {
				t.Errorf("patch (-want +got):\n%s", d)
			}
		})
	}
}
