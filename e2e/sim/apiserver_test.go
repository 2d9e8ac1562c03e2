package sim

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCreateWindowLeft(t *testing.T) {
	established := time.Date(2026, 11, 30, 10, 20, 2, 0, time.UTC)
	crd := func(status, ltt string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		if status != "" {
			u.Object["status"] = map[string]any{"conditions": []any{
				map[string]any{"type": "Established", "status": status, "lastTransitionTime": ltt},
			}}
		}
		return u
	}
	tests := []struct {
		name string
		crd  *unstructured.Unstructured
		now  time.Time
		want time.Duration
	}{
		{"just established", crd("True", "2026-11-30T10:20:02Z"), established.Add(500 * time.Millisecond), 1500*time.Millisecond + crdCreateMargin},
		{"window's last moment", crd("True", "2026-11-30T10:20:02Z"), established.Add(1990 * time.Millisecond), 10*time.Millisecond + crdCreateMargin},
		{"window over", crd("True", "2026-11-30T10:20:02Z"), established.Add(2100 * time.Millisecond), -80 * time.Millisecond},
		{"not established", crd("False", "2026-11-30T10:20:02Z"), established, 0},
		{"no conditions", crd("", ""), established, 0},
		{"unparsable time", crd("True", "soon"), established, 0},
		{"nil crd", nil, established, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := createWindowLeft(tc.crd, tc.now); got != tc.want {
				t.Errorf("createWindowLeft = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWatchableBuiltinIsReady(t *testing.T) {
	m := &manager{}
	tests := []struct {
		name string
		gvr  schema.GroupVersionResource
	}{
		{"core", gvrSecret},
		{"apps", gvrDeployment},
		{"crds", gvrCRD},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			select {
			case <-m.watchable(tc.gvr):
			default:
				t.Errorf("watchable(%s) is not closed; built-in kinds need no probe", tc.gvr)
			}
		})
	}
}
