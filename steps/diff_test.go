package steps

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func mustObj(t *testing.T, js string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal([]byte(js), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFieldChanges(t *testing.T) {
	tests := []struct {
		name     string
		old, new string // "" old: the object would be created
		mask     bool
		want     []FieldChange
	}{
		{
			name: "unchanged",
			old:  `{"spec":{"a":1,"l":[{"x":"y"}]}}`,
			new:  `{"spec":{"a":1,"l":[{"x":"y"}]}}`,
		},
		{
			name: "a changed limit inside lists",
			old:  `{"spec":{"modelRefs":[{"tokenRateLimits":[{"limit":5,"window":"1h"}]}]}}`,
			new:  `{"spec":{"modelRefs":[{"tokenRateLimits":[{"limit":200000,"window":"1h"}]}]}}`,
			want: []FieldChange{{Path: "spec.modelRefs[0].tokenRateLimits[0].limit", Op: "~", Old: 5.0, New: 200000.0}},
		},
		{
			name: "label added and removed, keys with dots quoted",
			old:  `{"metadata":{"labels":{"team":"a"}}}`,
			new:  `{"metadata":{"labels":{"app.kubernetes.io/managed-by":"maasctl"}}}`,
			want: []FieldChange{
				{Path: `metadata.labels["app.kubernetes.io/managed-by"]`, Op: "+", New: "maasctl"},
				{Path: "metadata.labels.team", Op: "-", Old: "a"},
			},
		},
		{
			name: "list grows",
			old:  `{"g":["a"]}`,
			new:  `{"g":["a","b"]}`,
			want: []FieldChange{{Path: "g[1]", Op: "+", New: "b"}},
		},
		{
			name: "created object lists every leaf",
			new:  `{"kind":"Namespace","metadata":{"name":"x","labels":{}}}`,
			want: []FieldChange{
				{Path: "kind", Op: "+", New: "Namespace"},
				{Path: "metadata.labels", Op: "+", New: map[string]any{}},
				{Path: "metadata.name", Op: "+", New: "x"},
			},
		},
		{
			name: "secret data is masked",
			old:  `{"data":{"password":"b2xk"},"type":"Opaque"}`,
			new:  `{"data":{"password":"bmV3"},"type":"Opaque"}`,
			mask: true,
			want: []FieldChange{{Path: "data.password", Op: "~", Masked: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var old map[string]any
			if tt.old != "" {
				old = mustObj(t, tt.old)
			}
			got := fieldChanges(old, mustObj(t, tt.new), tt.mask)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("changes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStripServerFields(t *testing.T) {
	u := &unstructured.Unstructured{Object: mustObj(t, `{"metadata":{"name":"a","uid":"1","resourceVersion":"2","generation":3,
		"creationTimestamp":"x","managedFields":[{}],"labels":{"l":"v"}},"spec":{"s":1},"status":{"phase":"Ready"}}`)}
	want := mustObj(t, `{"metadata":{"name":"a","labels":{"l":"v"}},"spec":{"s":1}}`)
	if diff := cmp.Diff(want, stripServerFields(u)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, ok := u.Object["status"]; !ok {
		t.Error("stripServerFields changed its input")
	}
}
