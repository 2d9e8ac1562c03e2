package steps

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestUninstalledMarkRoundTrip: the mark uninstall writes is what
// LoadRecord's LIST reads back (decodeRecord), kept list and time whole,
// and it carries the label that LIST selects.
func TestUninstalledMarkRoundTrip(t *testing.T) {
	want := Uninstalled{At: time.Date(2026, 12, 7, 23, 1, 2, 0, time.UTC), Kept: []string{"Cluster rhoai-maas-db/maas-postgres (the database)", "Vault secret/maas/db (the password)"}}
	var cm corev1.ConfigMap
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(uninstalledObject(want).Object, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Labels["app.kubernetes.io/managed-by"] != "maasctl" || cm.Namespace != StateNamespace {
		t.Fatalf("mark %s/%s labels %v: LoadRecord's LIST would not see it", cm.Namespace, cm.Name, cm.Labels)
	}
	r, err := decodeRecord([]corev1.ConfigMap{cm})
	if err != nil {
		t.Fatal(err)
	}
	got := r.Uninstalled()
	if got == nil {
		t.Fatal("decodeRecord did not read the mark")
	}
	if d := cmp.Diff(want, *got); d != "" {
		t.Errorf("mark read back (-want +got):\n%s", d)
	}
	if r.Len() != 0 || len(r.Checkpoints()) != 0 {
		t.Errorf("the mark was read as record entries or checkpoints")
	}
	empty, err := decodeRecord(nil)
	if err != nil || empty.Uninstalled() != nil {
		t.Errorf("a record without the mark: %v, %v", empty.Uninstalled(), err)
	}
}
