package sim

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The simulated operators start their work when the real OLM of the local
// control plane (e2e/testenv: olm and catalog operators serving the
// generated catalogs) has installed them: their CSV is Succeeded and the
// Deployments of its install strategy are Available.

// catalogFieldManager is the field manager of the objects OLM's catalog
// operator creates (client-go's default, the program name of its user
// agent): an InstallPlan's CRDs carry it in managedFields.
const catalogFieldManager = "catalog"

// operatorRunning reports whether the operator serving CRD crdName runs, so
// that a simulated operator only acts while the real one would: when a CSV
// owns the CRD, the CSV must be Succeeded (phase written by the real
// olm-operator, which reports Succeeded once the strategy's Deployments are
// Available: InstallStrategyDeploymentInstaller.CheckInstalled) and every
// Deployment of its install strategy Available. A CRD that no CSV owns
// counts as served by a running operator when it came another way (the
// test fixture, as on a cluster where the operator was installed without
// OLM), and as not running when an InstallPlan created it: its CSV is
// gone, and with it (garbage-collected through the owner reference) the
// operator's Deployment, so nothing re-creates, say, the default
// DSCInitialization after an uninstall.
func (m *manager) operatorRunning(crdName string) bool {
	if !m.isServed(gvrCSV) {
		return true
	}
	for _, csv := range m.list(gvrCSV, "") {
		if str(csv, "status", "reason") == "Copied" {
			continue // OLM's copy in a target namespace; the operator runs beside the original
		}
		for _, o := range sliceOf(csv, "spec", "customresourcedefinitions", "owned") {
			if mstr(o.(map[string]any), "name") != crdName {
				continue
			}
			if str(csv, "status", "phase") != "Succeeded" {
				return false
			}
			for _, d := range sliceOf(csv, "spec", "install", "spec", "deployments") {
				// A Deployment scaled to 0 is Available (0 of 0) but runs
				// no operator pod.
				dep := m.get(gvrDeployment, csv.GetNamespace(), mstr(d.(map[string]any), "name"))
				if n, found, _ := unstructured.NestedInt64(mapOrNil(dep), "spec", "replicas"); !deploymentAvailable(dep) || found && n == 0 {
					return false
				}
			}
			return true
		}
	}
	crd := m.get(gvrCRD, "", crdName)
	if crd == nil {
		return false
	}
	for _, f := range crd.GetManagedFields() {
		if f.Manager == catalogFieldManager {
			return false
		}
	}
	return true
}

// ownerCSVUID is the UID of the CSV that owns CRD crdName (not a copied
// CSV), "" when none does.
func (m *manager) ownerCSVUID(crdName string) string {
	if !m.isServed(gvrCSV) {
		return ""
	}
	for _, csv := range m.list(gvrCSV, "") {
		if str(csv, "status", "reason") == "Copied" {
			continue
		}
		for _, o := range sliceOf(csv, "spec", "customresourcedefinitions", "owned") {
			if mstr(o.(map[string]any), "name") == crdName {
				return string(csv.GetUID())
			}
		}
	}
	return ""
}

// operatorWatches are the watches a reconciler gated by operatorRunning
// needs: CSVs and OLM-owned Deployments, both requeueing every object of
// primary.
func (m *manager) operatorWatches(primary schema.GroupVersionResource) []watch {
	all := m.allOf(primary, false)
	return []watch{
		{gvr: gvrCSV, mapFn: all},
		{gvr: gvrDeployment, mapFn: func(u *unstructured.Unstructured) []key {
			if u.GetLabels()["olm.owner"] == "" {
				return nil
			}
			return all(u)
		}},
	}
}

func toLabelSelector(m map[string]any) *metav1.LabelSelector {
	var s metav1.LabelSelector
	_ = fromMap(m, &s)
	return &s
}

func mapOrNil(u *unstructured.Unstructured) map[string]any {
	if u == nil {
		return nil
	}
	return u.Object
}
