package sim

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// bundle is one operator version a simulated catalog offers: the CSV OLM
// installs and what it brings.
type bundle struct {
	Package     string
	Channel     string
	CSV         string
	Version     string
	DisplayName string
	Provider    string
	// CRDs are globs under the CRD folder; OLM's InstallPlan creates them.
	CRDs []string
	// Deployment is the operator Deployment of the CSV's install strategy.
	Deployment string
	// PodLabels label the operator pods (and select them).
	PodLabels map[string]string
	// InstallModes maps OLM install mode types to whether the CSV supports
	// them (spec.installModes).
	InstallModes map[string]bool
}

// catalogs returns the simulated catalogs: CatalogSource name -> package ->
// channel -> bundle. The package, channel and CSV names are those of the
// real Red Hat catalogs (see ../shared/crds/SOURCES.md for the CSVs the CRDs
// come from); rhods-operator offers only the channel of rhoaiVersion.
func catalogs(rhoaiVersion string) map[string]map[string]map[string]bundle {
	allNS := map[string]bool{"OwnNamespace": false, "SingleNamespace": false, "MultiNamespace": false, "AllNamespaces": true}
	rhods := map[string]bundle{}
	rhodsCSV := map[string]string{RHOAI33: "3.3.5", RHOAI34: "3.4.4", RHOAI35: "3.5.0"}[rhoaiVersion]
	rhods["stable-"+rhoaiVersion] = bundle{
		Package: "rhods-operator", Channel: "stable-" + rhoaiVersion,
		CSV: "rhods-operator." + rhodsCSV, Version: rhodsCSV,
		DisplayName: "Red Hat OpenShift AI", Provider: "Red Hat",
		CRDs:       []string{"opendatahub/rhoai-" + rhoaiVersion + "/*.yaml"},
		Deployment: "rhods-operator",
		PodLabels:  map[string]string{"name": "rhods-operator"},
		// rhods-operator bundles declare AllNamespaces only.
		InstallModes: allNS,
	}
	return map[string]map[string]map[string]bundle{
		"certified-operators": {
			"cloudnative-pg": {
				"stable-v1": {
					Package: "cloudnative-pg", Channel: "stable-v1",
					CSV: "cloudnative-pg.v1.30.0", Version: "1.30.0",
					DisplayName: "CloudNativePG", Provider: "EDB",
					CRDs:       []string{"cnpg/*.yaml"},
					Deployment: "cnpg-controller-manager",
					PodLabels:  map[string]string{"app.kubernetes.io/name": "cloudnative-pg"},
					InstallModes: map[string]bool{
						"OwnNamespace": true, "SingleNamespace": true, "MultiNamespace": false, "AllNamespaces": true,
					},
				},
			},
		},
		"redhat-operators": {
			"rhcl-operator": {
				"stable-1.4": {
					Package: "rhcl-operator", Channel: "stable-1.4",
					CSV: "rhcl-operator.v1.4.1", Version: "1.4.1",
					DisplayName: "Red Hat Connectivity Link", Provider: "Red Hat",
					CRDs:       []string{"kuadrant/*.yaml", "authorino/*.yaml"},
					Deployment: "kuadrant-operator-controller-manager",
					// Kuadrant operator pod labels, from kuadrant-operator
					// config/manager/manager.yaml (control-plane) and the
					// bundle's common label app=kuadrant.
					PodLabels:    map[string]string{"app": "kuadrant", "control-plane": "controller-manager"},
					InstallModes: allNS,
				},
			},
			"leader-worker-set": {
				"stable-v1.0": {
					Package: "leader-worker-set", Channel: "stable-v1.0",
					CSV: "leader-worker-set.v1.0.0", Version: "1.0.0",
					DisplayName: "Red Hat build of Leader Worker Set", Provider: "Red Hat",
					CRDs:       []string{"lws-operator/*.yaml"},
					Deployment: "openshift-lws-operator",
					PodLabels:  map[string]string{"name": "openshift-lws-operator"},
					// openshift/lws-operator bundle: OwnNamespace and
					// SingleNamespace only.
					InstallModes: map[string]bool{
						"OwnNamespace": true, "SingleNamespace": true, "MultiNamespace": false, "AllNamespaces": false,
					},
				},
			},
			"rhods-operator": rhods,
		},
	}
}

// deploymentSpec is the install-strategy Deployment of b.
func (b bundle) deploymentSpec() appsv1.DeploymentSpec {
	one := int32(1)
	return appsv1.DeploymentSpec{
		Replicas: &one,
		Selector: &metav1.LabelSelector{MatchLabels: b.PodLabels},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: b.PodLabels},
			Spec: corev1.PodSpec{
				Containers: []corev1.Container{{
					Name:  "manager",
					Image: "registry.invalid/maasctl-sim/" + b.Package + ":v" + b.Version,
				}},
			},
		},
	}
}
